"""The Redis border every part of the store goes through: the client, key names, the
translation of redis-py's exceptions, and the one compare-and-set loop.

Keys (prefix ``dh``, see :class:`Keys`): ``plan:ID:vN``, ``plan:ID:latest``, ``run:ID``,
``runs`` (zset), ``run:ID:owner`` (worker lease), ``run:ID:cancel``, ``lock:ENV``,
``lockq:ENV`` (waiting runs), ``queue`` (stream, group ``workers``), ``audit`` (stream),
``dedupe:KEY``, ``schedule:ID``, ``schedules`` (zset), ``schedules:version``,
``schedule:ID:KIND:ISO`` (fire claims), ``proposal:HASH:REQUESTER`` (validated plans not
yet requested, with a TTL).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import redis
from pydantic import BaseModel
from redis.backoff import ExponentialBackoff
from redis.client import Pipeline
from redis.retry import Retry

from agents.errors import NotFound, StoreError, StoreUnavailable

CAS_RETRIES = 100
GROUP = "workers"
T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
Write = Callable[[Pipeline], Any]
"""A command queued in a transaction (e.g. a run's XADD onto the queue)."""


class Keys:
    """Every Redis key name deckhand uses, in one place."""

    def __init__(self, prefix: str):
        self.prefix = prefix

    def __call__(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    def plan(self, plan_id: str, version: int) -> str:
        return self("plan", plan_id, f"v{version}")

    def plan_latest(self, plan_id: str) -> str:
        return self("plan", plan_id, "latest")

    def run(self, run_id: str) -> str:
        return self("run", run_id)

    def runs(self) -> str:
        return self("runs")

    def owner(self, run_id: str) -> str:
        return self("run", run_id, "owner")

    def cancel(self, run_id: str) -> str:
        return self("run", run_id, "cancel")

    def lock(self, environment: str) -> str:
        return self("lock", environment)

    def lock_queue(self, environment: str) -> str:
        return self("lockq", environment)

    def queue(self) -> str:
        return self("queue")

    def audit(self) -> str:
        return self("audit")

    def dedupe(self, key: str) -> str:
        return self("dedupe", key)

    def schedule(self, schedule_id: str) -> str:
        return self("schedule", schedule_id)

    def schedules(self) -> str:
        return self("schedules")

    def schedules_version(self) -> str:
        return self("schedules", "version")

    def schedule_claim(self, schedule_id: str, kind: str, fire_time_iso: str) -> str:
        return self("schedule", schedule_id, kind, fire_time_iso)

    def proposal(self, plan_hash: str, requester: str) -> str:
        return self("proposal", plan_hash, requester)


class RedisBase:
    """The client and the two helpers every store method uses: ``errors()`` and ``cas()``."""

    def __init__(self, client: redis.Redis, *, prefix: str = "dh",
                 clock: Callable[[], float] = time.time, where: str = "redis"):
        # Any: redis-py types replies as bytes | str (it depends on decode_responses); this
        # store always uses bytes, and decodes at the few places it reads text.
        self.r: Any = client
        self.prefix = prefix
        self.keys = Keys(prefix)
        self.clock = clock
        self.where = where

    def k(self, *parts: str) -> str:
        """A key under this store's prefix (``Keys`` names the ones deckhand uses)."""
        return self.keys(*parts)

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """Translate redis-py's exceptions into ours at the border."""
        try:
            yield
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise StoreUnavailable(f"cannot reach Redis at {self.where} ({exc}); nothing was "
                                   f"changed — check REDIS_URL and that Redis is up") from exc
        except redis.RedisError as exc:
            raise StoreError(f"Redis refused the operation: {exc}") from exc

    def cas(self, keys: Sequence[str], attempt: Callable[[Pipeline], T], *, busy: str) -> T:
        """Run ``attempt`` under WATCH on ``keys``, again from the start if one changed.

        ``attempt`` reads through the pipeline (immediate mode until ``pipe.multi()``), then
        queues its writes and calls ``pipe.execute()``; EXEC fails if a watched key changed
        meanwhile, and the attempt is retried with fresh reads. ``busy`` names what was
        contended, for the error after ``CAS_RETRIES`` lost races.
        """
        with self.errors():
            for _ in range(CAS_RETRIES):
                with self.r.pipeline() as pipe:
                    try:
                        pipe.watch(*keys)
                        return attempt(pipe)
                    except redis.WatchError:
                        continue
        raise StoreError(f"{busy} is changing too fast; try again")

    def update_record(self, key: str, model: type[M],
                      change: Callable[[M], Sequence[Write] | None], *, missing: str) -> M:
        """Read the JSON record at ``key``, let ``change`` edit it, write it back atomically.

        ``change`` may return more writes for the same transaction; NotFound(``missing``)
        if there is no record. Retried with a fresh read whenever ``key`` changed meanwhile.
        """
        def attempt(pipe: Pipeline) -> M:
            raw = pipe.get(key)
            if raw is None:
                raise NotFound(missing)
            record = model.model_validate_json(raw)
            extras = change(record) or ()
            pipe.multi()
            pipe.set(key, record.model_dump_json())
            for extra in extras:
                extra(pipe)
            pipe.execute()
            return record

        return self.cas([key], attempt, busy=key.removeprefix(self.prefix + ":"))

    def ping(self) -> bool:
        with self.errors():
            return bool(self.r.ping())


def connect_client(url: str) -> redis.Redis:
    """A client for ``url`` that rides out a short Redis restart."""
    retry = Retry(ExponentialBackoff(cap=0.5, base=0.05), retries=6)
    return redis.Redis.from_url(url, retry=retry, socket_timeout=5,
                                retry_on_error=[redis.ConnectionError, redis.TimeoutError])


def safe_url(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    return f"{parts.scheme}://{host}:{parts.port or 6379}{parts.path}"


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
