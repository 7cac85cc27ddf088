"""The append-only audit stream, and the dedupe keys that recognise Slack's retries."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agents.store._redis import RedisBase

LEGACY_SCAN = 10_000
"""Newest shared-stream entries searched for a run that has no stream of its own."""


@dataclass(frozen=True)
class AuditEntry:
    id: str
    at: float
    actor: str
    action: str
    run_id: str | None
    plan_id: str | None
    details: dict[str, Any]

    def as_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)


class AuditStore(RedisBase):
    def first_time(self, key: str, *, ttl: float = 3600) -> bool:
        """True the first time ``key`` is seen within ``ttl`` seconds (SET NX)."""
        with self.errors():
            return bool(self.r.set(self.keys.dedupe(key), "1", nx=True, px=int(ttl * 1000)))

    def audit(self, action: str, *, actor: str, run_id: str | None = None,
              plan_id: str | None = None, **details: Any) -> None:
        """Append to the audit stream, and to the run's own stream when it names a run
        (one MULTI), so ``--run`` reads only that run's entries. Entries are never edited."""
        entry = {"at": repr(self.clock()), "actor": actor, "action": action,
                 "run_id": run_id or "", "plan_id": plan_id or "",
                 "details": json.dumps(details, sort_keys=True, default=str)}
        with self.errors():
            pipe = self.r.pipeline()
            pipe.xadd(self.keys.audit(), entry)
            if run_id:
                pipe.xadd(self.keys.run_audit(run_id), entry)
            pipe.execute()

    def audit_log(self, *, run_id: str | None = None, limit: int = 200) -> list[AuditEntry]:
        """The newest ``limit`` entries, oldest first; only one run's when ``run_id`` is
        given. Reads at most ``limit`` entries (stream order, COUNT), never the whole log."""
        key = self.keys.run_audit(run_id) if run_id else self.keys.audit()
        with self.errors():
            raw = self.r.xrevrange(key, count=limit) if limit > 0 else []
            if run_id and not raw:
                raw = self._legacy_run_entries(run_id, limit)
        return [_audit_entry(i, f) for i, f in reversed(raw)]

    def _legacy_run_entries(self, run_id: str, limit: int) -> list[Any]:
        """A run audited before per-run streams existed: its entries among the newest
        LEGACY_SCAN of the shared stream, newest first."""
        raw = self.r.xrevrange(self.keys.audit(), count=LEGACY_SCAN)
        return [(i, f) for i, f in raw if f.get(b"run_id") == run_id.encode()][:limit]


def _audit_entry(entry_id: bytes, fields: dict[bytes, bytes]) -> AuditEntry:
    text = {k.decode(): v.decode() for k, v in fields.items()}
    return AuditEntry(id=entry_id.decode(), at=float(text["at"]), actor=text["actor"],
                      action=text["action"], run_id=text["run_id"] or None,
                      plan_id=text["plan_id"] or None, details=json.loads(text["details"]))
