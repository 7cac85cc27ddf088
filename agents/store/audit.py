"""The append-only audit stream, and the dedupe keys that recognise Slack's retries."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agents.store._redis import RedisBase


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
        """Append to the audit stream. Entries are never edited."""
        entry = {"at": repr(self.clock()), "actor": actor, "action": action,
                 "run_id": run_id or "", "plan_id": plan_id or "",
                 "details": json.dumps(details, sort_keys=True, default=str)}
        with self.errors():
            self.r.xadd(self.keys.audit(), entry)

    def audit_log(self, *, run_id: str | None = None, limit: int = 200) -> list[AuditEntry]:
        """Oldest first; filtered to one run when ``run_id`` is given."""
        with self.errors():
            raw = self.r.xrange(self.keys.audit())
        entries = [_audit_entry(i, f) for i, f in raw]
        if run_id:
            entries = [e for e in entries if e.run_id == run_id]
        return entries[-limit:]


def _audit_entry(entry_id: bytes, fields: dict[bytes, bytes]) -> AuditEntry:
    text = {k.decode(): v.decode() for k, v in fields.items()}
    return AuditEntry(id=entry_id.decode(), at=float(text["at"]), actor=text["actor"],
                      action=text["action"], run_id=text["run_id"] or None,
                      plan_id=text["plan_id"] or None, details=json.loads(text["details"]))
