"""Environment locks: owner, TTL and heartbeat, plus a first-come queue of waiting runs."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from redis.client import Pipeline

from agents.errors import LockHeld
from agents.store._redis import Part, text


@dataclass(frozen=True)
class LockInfo:
    environment: str
    run_id: str
    worker: str
    since: float

    def describe(self) -> str:
        held = time.strftime("%H:%M:%S", time.localtime(self.since))
        return f"{self.environment} is locked by {self.run_id} (worker {self.worker}, since {held})"


class Locks(Part):
    """Environment locks (one run each), the queue of runs waiting for one, and job leases."""

    def acquire(self, environments: Iterable[str], *, run_id: str, worker: str,
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
            pipe.sadd(self.keys.locks(), *envs)
            pipe.execute()

        self.cas(keys, attempt, busy="locks")

    def refresh(self, environments: Iterable[str], *, run_id: str, ttl: float) -> None:
        for env in environments:
            self._if_holder(self.keys.lock(env), env, run_id, _extend(ttl))

    def release(self, environments: Iterable[str], *, run_id: str) -> None:
        for env in environments:
            self._if_holder(self.keys.lock(env), env, run_id, self._unlock(env))

    def _unlock(self, environment: str) -> Callable[[Pipeline, str], Any]:
        def write(pipe: Pipeline, key: str) -> None:
            pipe.delete(key)
            pipe.srem(self.keys.locks(), environment)
        return write

    def _if_holder(self, key: str, name: str, holder: str,
                   action: Callable[[Pipeline, str], Any]) -> bool:
        """Apply ``action`` to the lock at ``key`` only while ``holder`` holds it."""
        def attempt(pipe: Pipeline) -> bool:
            info = _lock_info(name, pipe.get(key))
            if info is None or info.run_id != holder:
                return False
            pipe.multi()
            action(pipe, key)
            pipe.execute()
            return True

        return self.cas([key], attempt, busy=f"the lock on {name}")

    # -- periodic jobs (retention): one process at a time across every replica -------------

    def take_job(self, name: str, *, owner: str, ttl: float) -> bool:
        """Take the lease on job ``name`` for ``ttl`` seconds; False if someone holds it."""
        value = json.dumps({"run": owner, "worker": owner, "since": self.clock()})
        with self.errors():
            return bool(self.r.set(self.keys.job_lock(name), value, nx=True,
                                   px=int(ttl * 1000)))

    def hold_job(self, name: str, *, owner: str, ttl: float) -> bool:
        """Extend ``owner``'s lease on job ``name``; False if it lapsed or another took it."""
        return self._if_holder(self.keys.job_lock(name), name, owner, _extend(ttl))

    def release_job(self, name: str, *, owner: str) -> None:
        self._if_holder(self.keys.job_lock(name), name, owner, lambda p, k: p.delete(k))

    def job_done_at(self, name: str) -> float | None:
        """When job ``name`` last completed (None: never)."""
        with self.errors():
            raw = self.r.get(self.keys.job_done(name))
        return float(raw) if raw is not None else None

    def mark_job_done(self, name: str, at: float) -> None:
        with self.errors():
            self.r.set(self.keys.job_done(name), repr(at))

    def note_job(self, name: str, note: dict[str, Any]) -> None:
        """Leave ``note`` (JSON) for readers of job ``name``, replacing the last one."""
        with self.errors():
            self.r.set(self.keys.job_note(name), json.dumps(note, separators=(",", ":")))

    def job_note(self, name: str) -> dict[str, Any] | None:
        with self.errors():
            raw = self.r.get(self.keys.job_note(name))
        return dict(json.loads(raw)) if raw is not None else None

    def job(self, name: str) -> LockInfo | None:
        """Who holds job ``name``'s lease (``run_id`` and ``worker`` name the owner)."""
        with self.errors():
            return _lock_info(name, self.r.get(self.keys.job_lock(name)))

    def get(self, environment: str) -> LockInfo | None:
        """Who holds ``environment``'s lock, or None if it is free."""
        with self.errors():
            return _lock_info(environment, self.r.get(self.keys.lock(environment)))

    def all(self) -> list[LockInfo]:
        """Every lock held now, from the set of environments ever locked (one entry per
        environment, so bounded), never a SCAN of the keyspace. Members whose lock expired
        are skipped here (``check --store --repair`` removes them)."""
        with self.errors():
            envs = sorted(text(e) for e in self.r.smembers(self.keys.locks()))
            values = self.r.mget([self.keys.lock(e) for e in envs]) if envs else []
        infos = [_lock_info(env, v) for env, v in zip(envs, values, strict=True)]
        return [i for i in infos if i is not None]

    def wait_for(self, environment: str, run_id: str) -> None:
        """Queue ``run_id`` behind ``environment``'s lock (first come, first served, once)."""
        key = self.keys.lock_queue(environment)

        def attempt(pipe: Pipeline) -> None:
            if run_id.encode() in pipe.lrange(key, 0, -1):
                return
            pipe.multi()
            pipe.rpush(key, run_id)
            pipe.execute()

        self.cas([key], attempt, busy=f"the queue for {environment}'s lock")


def _extend(ttl: float) -> Callable[[Pipeline, str], Any]:
    return lambda pipe, key: pipe.pexpire(key, int(ttl * 1000))


def _lock_info(env: str, raw: bytes | str | None) -> LockInfo | None:
    if raw is None:
        return None
    data = json.loads(raw)
    return LockInfo(env, data["run"], data["worker"], float(data["since"]))
