"""Environment locks taken by a person (``deckhand lock production --reason …``, ``.lock``):
who holds it, why, since when and until when. Not a run's lock (``locks``): nothing runs
under it; it refuses new plans and approvals in its environment until it is lifted or lapses.

Keys take the service first (``manlock:ENV`` for the legacy service, ``manlock:S:ENV`` for
a named one), with ``manlocks`` listing them (``S:ENV`` or ``ENV``, as ``locks`` does), so a
listing never SCANs.
An expiry is kept in the record and read against the store's clock (a test's injected one
too); the key's TTL only cleans up some time after it lapsed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from redis.client import Pipeline

from agents.errors import ManualLockRefused
from agents.store._redis import Part, RedisBase, scope_member, split_member
from agents.store.audit import AuditLog

GRACE = 86_400.0
"""Seconds a lapsed lock's key stays before Redis drops it (readers ignore it already)."""


@dataclass(frozen=True)
class ManualLock:
    """One environment held by a person."""

    environment: str
    holder: str
    reason: str
    since: float
    until: float | None = None
    service: str | None = None
    via: str = "cli"

    def lapsed(self, now: float) -> bool:
        return self.until is not None and now >= self.until

    @property
    def since_text(self) -> str:
        return _clock(self.since)

    @property
    def until_text(self) -> str:
        return "until unlocked" if self.until is None else f"until {_clock(self.until)}"

    def describe(self) -> str:
        """``production is locked by alice since 2026-11-28 14:02 UTC until 2026-11-28 16:02
        UTC: db migration``."""
        until = f" {self.until_text}" if self.until is not None else ""
        return (f"{self.environment} is locked by {self.holder} since {self.since_text}"
                f"{until}: {self.reason}")

    def refusal(self) -> str:
        """What a refused plan or approval says: who, why, since when, and the way out."""
        return (f"{self.describe()}. Ask {self.holder} or an approver of {self.environment} "
                f"to unlock it (`deckhand unlock {self.environment}`, or `.unlock "
                f"{self.environment}` in Slack)")

    def as_json(self) -> dict[str, object]:
        return asdict(self)


class ManualLocks(Part):
    """Locks by hand, one per (service, environment); every change audited in its EXEC."""

    def __init__(self, db: RedisBase, *, audit: AuditLog) -> None:
        super().__init__(db)
        self.audit = audit

    def key(self, service: str | None, environment: str) -> str:
        return self.keys.manual_lock(service, environment)

    def take(self, lock: ManualLock, *, face: str) -> ManualLock | None:
        """Hold ``lock``'s environment; the holder may take it again (a new reason or
        expiry). ManualLockRefused names whoever else holds it. Returns the lock replaced
        (the holder's own, or a lapsed one), if any."""
        key = self.key(lock.service, lock.environment)

        def attempt(pipe: Pipeline) -> ManualLock | None:
            held = self._read(pipe, key)
            if held is not None and held.holder != lock.holder:
                raise ManualLockRefused(f"{held.describe()}; it stays theirs until they (or "
                                        f"an approver) unlock it")
            ttl = None if lock.until is None else lock.until - self.clock() + GRACE
            self.queue_writes(pipe, [
                lambda p: p.set(key, json.dumps(lock.as_json()),
                                px=None if ttl is None else int(ttl * 1000)),
                lambda p: p.sadd(self._index(), scope_member(lock.service, lock.environment)),
                self.audit.write("locked", actor=lock.holder, environment=lock.environment,
                                 service=lock.service, reason=lock.reason, until=lock.until,
                                 face=face, renewed=held is not None)])
            pipe.execute()
            return held

        return self.cas([key], attempt, busy=f"the lock by hand on {lock.environment}")

    def release(self, environment: str, *, service: str | None, by: str, face: str,
                holder: str | None = None) -> ManualLock:
        """Lift the lock on ``environment`` (who may is the caller's policy, checked against
        ``holder``: a lock someone else took meanwhile stays); returns the lock lifted.
        ManualLockRefused when nothing (or someone other than ``holder``) holds it."""
        key = self.key(service, environment)

        def attempt(pipe: Pipeline) -> ManualLock:
            held = self._read(pipe, key)
            if held is None:
                raise ManualLockRefused(f"{environment} is not locked; nothing to unlock")
            if holder is not None and held.holder != holder:
                raise ManualLockRefused(f"{held.describe()} now (it changed hands); ask again")
            self.queue_writes(pipe, [
                lambda p: p.delete(key),
                lambda p: p.srem(self._index(), scope_member(service, environment)),
                self.audit.write("unlocked", actor=by, environment=environment,
                                 service=service, holder=held.holder, reason=held.reason,
                                 since=held.since, face=face)])
            pipe.execute()
            return held

        return self.cas([key], attempt, busy=f"the lock by hand on {environment}")

    def get(self, environment: str, *, service: str | None) -> ManualLock | None:
        """Who holds ``environment`` now (None: free, or the lock lapsed)."""
        with self.errors():
            return self._live(self.r.get(self.key(service, environment)))

    def blocking(self, environments: Iterable[str], *, service: str | None
                 ) -> ManualLock | None:
        """The first lock held on any of ``environments`` (sorted, so always the same one)."""
        envs = sorted(set(environments))
        if not envs:
            return None
        with self.errors():
            values = self.r.mget([self.key(service, e) for e in envs])
        return next((lock for raw in values if (lock := self._live(raw)) is not None), None)

    def all(self, *, service: str | None) -> dict[str, ManualLock]:
        """Every lock held now in ``service``, by environment."""
        with self.errors():
            scopes = [split_member(m) for m in self.r.smembers(self._index())]
        envs = sorted(e for s, e in scopes if s == service)
        found = [lock for e in envs if (lock := self.get(e, service=service)) is not None]
        return {lock.environment: lock for lock in found}

    def everywhere(self) -> dict[tuple[str | None, str], ManualLock]:
        """Every lock held now, of every service, by (service, environment): the index
        and one MGET, however many services (``where`` across an organisation)."""
        with self.errors():
            scopes = [split_member(m) for m in self.r.smembers(self._index())]
            values = self.r.mget([self.key(*scope) for scope in scopes]) if scopes else []
        return {scope: lock for scope, raw in zip(scopes, values, strict=True)
                if (lock := self._live(raw)) is not None}

    def _read(self, pipe: Pipeline, key: str) -> ManualLock | None:
        return self._live(pipe.get(key))

    def _live(self, raw: bytes | str | None) -> ManualLock | None:
        if raw is None:
            return None
        lock = ManualLock(**json.loads(raw))
        return None if lock.lapsed(self.clock()) else lock

    def _index(self) -> str:
        return self.keys.manual_locks()


def _clock(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(at))
