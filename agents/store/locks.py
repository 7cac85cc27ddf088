"""Environment locks: owner, TTL and heartbeat, plus a first-come queue of waiting runs."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from redis.client import Pipeline

from agents.errors import LockHeld
from agents.store._redis import RedisBase


@dataclass(frozen=True)
class LockInfo:
    environment: str
    run_id: str
    worker: str
    since: float

    def describe(self) -> str:
        held = time.strftime("%H:%M:%S", time.localtime(self.since))
        return f"{self.environment} is locked by {self.run_id} (worker {self.worker}, since {held})"


class LockStore(RedisBase):
    def acquire_locks(self, environments: Iterable[str], *, run_id: str, worker: str,
                      ttl: float) -> None:
        """Take every environment's lock for ``run_id`` or none (LockHeld says who has one)."""
        envs = sorted(set(environments))
        if not envs:
            return
        keys = [self.keys.lock(e) for e in envs]

        def attempt(pipe: Pipeline) -> None:
            for env, key in zip(envs, keys, strict=True):
                holder = _lock_info(env, pipe.get(key))
                if holder is not None and holder.run_id != run_id:
                    raise LockHeld(holder.describe())
            pipe.multi()
            value = json.dumps({"run": run_id, "worker": worker, "since": self.clock()})
            for key in keys:
                pipe.set(key, value, px=int(ttl * 1000))
            pipe.execute()

        self.cas(keys, attempt, busy="locks")

    def refresh_locks(self, environments: Iterable[str], *, run_id: str, ttl: float) -> None:
        for env in environments:
            self._if_lock_owner(env, run_id, lambda p, k: p.pexpire(k, int(ttl * 1000)))

    def release_locks(self, environments: Iterable[str], *, run_id: str) -> None:
        for env in environments:
            self._if_lock_owner(env, run_id, lambda p, k: p.delete(k))

    def _if_lock_owner(self, env: str, run_id: str,
                       action: Callable[[Pipeline, str], Any]) -> None:
        key = self.keys.lock(env)

        def attempt(pipe: Pipeline) -> None:
            holder = _lock_info(env, pipe.get(key))
            if holder is None or holder.run_id != run_id:
                return
            pipe.multi()
            action(pipe, key)
            pipe.execute()

        self.cas([key], attempt, busy=f"the lock on {env}")

    def locks(self) -> list[LockInfo]:
        with self.errors():
            keys = sorted(self.r.scan_iter(self.keys.lock("*")))
            values = self.r.mget(keys) if keys else []
        prefix = len(self.keys.lock(""))
        infos = [_lock_info(key.decode()[prefix:], v) for key, v in zip(keys, values, strict=True)]
        return [i for i in infos if i is not None]

    def wait_for_lock(self, environment: str, run_id: str) -> None:
        """Queue ``run_id`` behind ``environment``'s lock (first come, first served)."""
        key = self.keys.lock_queue(environment)
        with self.errors():
            if run_id.encode() not in self.r.lrange(key, 0, -1):
                self.r.rpush(key, run_id)

    def next_waiting(self, environment: str) -> str | None:
        """Pop the first run waiting for ``environment`` (the lock was released)."""
        with self.errors():
            raw = self.r.lpop(self.keys.lock_queue(environment))
        return raw.decode() if raw else None


def _lock_info(env: str, raw: bytes | str | None) -> LockInfo | None:
    if raw is None:
        return None
    data = json.loads(raw)
    return LockInfo(env, data["run"], data["worker"], float(data["since"]))
