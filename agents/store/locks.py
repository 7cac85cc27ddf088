"""Locks per (service, environment) and on shared hosts: owner, TTL and heartbeat, plus a
first-come queue of runs waiting for an environment's lock."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from redis.client import Pipeline

from agents.errors import LockHeld
from agents.store._redis import Part, scope_label, scope_member, split_member, text


@dataclass(frozen=True)
class LockInfo:
    environment: str
    """The environment locked, or the host ID for a host lock (``host`` True)."""
    run_id: str
    worker: str
    since: float
    service: str | None = None
    """Whose environment (None: the legacy service's)."""
    host: bool = False

    @classmethod
    def naming(cls, locked: str, service: str | None = None, *,
               host: bool = False) -> LockInfo:
        """What a lock is on, before reading who holds it (``_lock_info`` fills that in)."""
        return cls(locked, "", "", 0.0, service, host)

    @property
    def scope(self) -> str:
        """What is locked, as people read it: ``api/production``, ``production``, ``host …``."""
        return f"host {self.environment}" if self.host else scope_label(self.service,
                                                                         self.environment)

    def describe(self) -> str:
        held = time.strftime("%H:%M:%S", time.localtime(self.since))
        return f"{self.scope} is locked by {self.run_id} (worker {self.worker}, since {held})"


class Locks(Part):
    """Environment locks per (service, environment), host locks on hosts services share
    (one run each), the queue of runs waiting for a lock, and job leases."""

    def acquire(self, service: str | None, environments: Iterable[str], *,
                hosts: Iterable[str] = (), run_id: str, worker: str, ttl: float) -> None:
        """Take every lock — ``service``'s environments and the ``hosts`` — for ``run_id``,
        or none (LockHeld says who has one): one WATCH/MULTI over every key, so there is
        no lock order to get wrong."""
        held = self._held(service, environments, hosts)
        if not held:
            return
        keys = [key for key, _ in held]

        def attempt(pipe: Pipeline) -> None:
            for key, info in held:
                holder = _lock_info(info, pipe.get(key))
                if holder is not None and holder.run_id != run_id:
                    raise LockHeld(holder.describe())
            pipe.multi()
            value = json.dumps({"run": run_id, "worker": worker, "since": self.clock()})
            for key in keys:
                pipe.set(key, value, px=int(ttl * 1000))
            envs = [scope_member(service, i.environment) for _, i in held if not i.host]
            ids = [i.environment for _, i in held if i.host]
            if envs:
                pipe.sadd(self.keys.locks(), *envs)
            if ids:
                pipe.sadd(self.keys.host_locks(), *ids)
            pipe.execute()

        self.cas(keys, attempt, busy="locks")

    def refresh(self, service: str | None, environments: Iterable[str], *,
                hosts: Iterable[str] = (), run_id: str, ttl: float) -> None:
        for key, info in self._held(service, environments, hosts):
            self._if_holder(key, info, run_id, _extend(ttl))

    def release(self, service: str | None, environments: Iterable[str], *,
                hosts: Iterable[str] = (), run_id: str) -> list[str]:
        """Release what ``run_id`` holds of these locks (a lock another run holds is
        left alone); the host IDs it did release, whose waiting runs may go next."""
        return [info.environment for key, info in self._held(service, environments, hosts)
                if self._if_holder(key, info, run_id, self._unlock(info)) and info.host]

    def _held(self, service: str | None, environments: Iterable[str],
              hosts: Iterable[str]) -> list[tuple[str, LockInfo]]:
        """Each lock's key beside a template naming what it locks, sorted by key."""
        envs = [(self.keys.lock(service, e), LockInfo.naming(e, service))
                for e in set(environments)]
        ids = [(self.keys.host_lock(h), LockInfo.naming(h, host=True))
               for h in set(hosts)]
        return sorted(envs + ids, key=lambda pair: pair[0])

    def _unlock(self, info: LockInfo) -> Callable[[Pipeline, str], Any]:
        index = self.keys.host_locks() if info.host else self.keys.locks()
        member = info.environment if info.host else scope_member(info.service, info.environment)

        def write(pipe: Pipeline, key: str) -> None:
            pipe.delete(key)
            pipe.srem(index, member)
        return write

    def _if_holder(self, key: str, what: LockInfo | str, holder: str,
                   action: Callable[[Pipeline, str], Any]) -> bool:
        """Apply ``action`` to the lock at ``key`` only while ``holder`` holds it."""
        name = what.scope if isinstance(what, LockInfo) else what

        def attempt(pipe: Pipeline) -> bool:
            info = _lock_info(what, pipe.get(key))
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

    def get(self, service: str | None, environment: str) -> LockInfo | None:
        """Who holds ``service``'s ``environment`` lock, or None if it is free."""
        with self.errors():
            return _lock_info(LockInfo.naming(environment, service),
                              self.r.get(self.keys.lock(service, environment)))

    def all(self) -> list[LockInfo]:
        """Every environment lock held now, of every service, from the set of environments
        ever locked (one entry per environment, so bounded), never a SCAN of the keyspace.
        Members whose lock expired are skipped here (``check --store --repair`` removes
        them)."""
        with self.errors():
            members = sorted(text(m) for m in self.r.smembers(self.keys.locks()))
            scopes = [split_member(m) for m in members]
            keys = [self.keys.lock(s, e) for s, e in scopes]
            values = self.r.mget(keys) if keys else []
        infos = [_lock_info(LockInfo.naming(e, s), v)
                 for (s, e), v in zip(scopes, values, strict=True)]
        return [i for i in infos if i is not None]

    def of(self, service: str | None) -> dict[str, LockInfo]:
        """``service``'s environment locks held now, by environment."""
        return {i.environment: i for i in self.all() if i.service == service}

    def host(self, host: str) -> LockInfo | None:
        """Who holds the lock on shared host ``host``, or None if it is free."""
        with self.errors():
            return _lock_info(LockInfo.naming(host, host=True),
                              self.r.get(self.keys.host_lock(host)))

    def hosts(self) -> list[LockInfo]:
        """Every host lock held now (``LockInfo.environment`` is the host ID)."""
        with self.errors():
            ids = sorted(text(m) for m in self.r.smembers(self.keys.host_locks()))
            values = self.r.mget([self.keys.host_lock(h) for h in ids]) if ids else []
        infos = [_lock_info(LockInfo.naming(h, host=True), v)
                 for h, v in zip(ids, values, strict=True)]
        return [i for i in infos if i is not None]

    def wait_for(self, service: str | None, environment: str, run_id: str) -> None:
        """Queue ``run_id`` behind ``service``'s ``environment`` lock (first come, first
        served, once)."""
        label = scope_label(service, environment)
        self._wait(self.keys.lock_queue(service, environment), label, run_id)

    def wait_in_line(self, service: str | None, environments: Iterable[str], *,
                     hosts: Iterable[str] = (), run_id: str) -> bool:
        """Queue ``run_id`` behind each of these locks (first come, first served, once)
        while another run holds one of them: True. False if none is held by another run
        any more: take them now. One WATCH over the locks and their queues, so a release
        between a refused ``acquire`` and this is never missed (its wake would have found
        an empty queue and left the run waiting for nothing)."""
        held = self._held(service, environments, hosts)
        queues = [self._queue_of(info) for _, info in held]

        def attempt(pipe: Pipeline) -> bool:
            holders = [_lock_info(info, pipe.get(key)) for key, info in held]
            if not any(h is not None and h.run_id != run_id for h in holders):
                return False
            waiting = [q for q in queues if run_id.encode() not in pipe.lrange(q, 0, -1)]
            pipe.multi()
            for queue in waiting:
                pipe.rpush(queue, run_id)
            pipe.execute()
            return True

        return self.cas([key for key, _ in held] + queues, attempt, busy="the lock queues")

    def _queue_of(self, info: LockInfo) -> str:
        if info.host:
            return self.keys.host_lock_queue(info.environment)
        return self.keys.lock_queue(info.service, info.environment)

    def _wait(self, key: str, label: str, run_id: str) -> None:
        def attempt(pipe: Pipeline) -> None:
            if run_id.encode() in pipe.lrange(key, 0, -1):
                return
            pipe.multi()
            pipe.rpush(key, run_id)
            pipe.execute()

        self.cas([key], attempt, busy=f"the queue for {label}'s lock")


def _extend(ttl: float) -> Callable[[Pipeline, str], Any]:
    return lambda pipe, key: pipe.pexpire(key, int(ttl * 1000))


def _lock_info(what: LockInfo | str, raw: bytes | str | None) -> LockInfo | None:
    """The lock ``raw`` holds on ``what`` (a template ``LockInfo``, or a job's name)."""
    if raw is None:
        return None
    data = json.loads(raw)
    held = {"run_id": data["run"], "worker": data["worker"], "since": float(data["since"])}
    if isinstance(what, str):
        return LockInfo(what, **held)
    return replace(what, **held)
