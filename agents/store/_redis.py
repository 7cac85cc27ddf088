"""The Redis border every part of the store goes through: the client, key names, the
translation of redis-py's exceptions, and the one compare-and-set loop.

Keys (prefix ``dh``, see :class:`Keys`): ``plan:ID:vN``, ``plan:ID:latest``, ``run:ID``,
``runs`` (zset by creation), ``runs:ids`` (zset, all scores 0: ids in lexical order, for
prefix lookups), ``run:ID:owner`` (worker lease), ``run:ID:cancel``, ``run:ID:audit``
(list: that run's audit entries, as JSON), ``lock:ENV``, ``locks`` (set of environments
whose lock may be held), ``lockq:ENV`` (waiting runs), ``queue`` (stream, group
``workers``; an entry is deleted when acknowledged), ``audit`` (stream), ``dedupe:KEY``,
``schedule:ID``, ``schedules`` (zset), ``schedules:version``, ``schedule:ID:KIND:ISO``
(fire claims).

A create writes its record and every companion (indexes, ``latest``) in one MULTI under
WATCH on the record's key, so either all of it lands or none; a create that finds its id
taken retries under a fresh id from ``RedisBase.ids`` (see ``RedisBase.create_unique``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.client import Pipeline
from redis.retry import Retry

from agents.errors import StoreError, StoreUnavailable
from agents.ids import new_id

CAS_RETRIES = 100
CREATE_RETRIES = 10
"""Fresh ids tried before a create gives up (one retry is already a once-in-ages event)."""
GROUP = "workers"
T = TypeVar("T")
IdFactory = Callable[[str], str]
"""Makes a fresh id for a kind of record (``run``, ``plan``, ``sch``)."""


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

    def run_ids(self) -> str:
        return self("runs", "ids")

    def run_audit(self, run_id: str) -> str:
        return self("run", run_id, "audit")

    def owner(self, run_id: str) -> str:
        return self("run", run_id, "owner")

    def cancel(self, run_id: str) -> str:
        return self("run", run_id, "cancel")

    def lock(self, environment: str) -> str:
        return self("lock", environment)

    def locks(self) -> str:
        return self("locks")

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


class RedisBase:
    """The client and the two helpers every store method uses: ``errors()`` and ``cas()``."""

    def __init__(self, client: redis.Redis, *, prefix: str = "dh",
                 clock: Callable[[], float] = time.time, where: str = "redis",
                 ids: IdFactory = new_id):
        # Any: redis-py types replies as bytes | str (it depends on decode_responses); this
        # store always uses bytes, and decodes at the few places it reads text.
        self.r: Any = client
        self.prefix = prefix
        self.keys = Keys(prefix)
        self.clock = clock
        self.where = where
        self.ids = ids

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

    def create_unique(self, kind: str, first_id: str, keys: Callable[[str], Sequence[str]],
               attempt: Callable[[Pipeline, str], bool]) -> str:
        """Create a record under ``first_id``, or under a fresh id if that one is taken.

        ``attempt(pipe, id)`` runs under WATCH on ``keys(id)``: it returns False, writing
        nothing, when the id is taken, else queues the record and all its companions in one
        MULTI and executes. The caller never sees a collision; it gets the id used.
        """
        candidate = first_id
        for _ in range(CREATE_RETRIES):
            def once(pipe: Pipeline, chosen: str = candidate) -> bool:
                return attempt(pipe, chosen)

            if self.cas(keys(candidate), once, busy=f"{kind} {candidate}"):
                return candidate
            candidate = self.ids(kind)
        raise StoreError(f"no free {kind} id after {CREATE_RETRIES} tries; nothing was written")

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
