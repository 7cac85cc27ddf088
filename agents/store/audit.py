"""The append-only audit stream, and the dedupe keys that recognise Slack's retries."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agents.store._redis import RedisBase, Write

LEGACY_SCAN = 10_000
"""Newest shared-stream entries searched for a run that has no list of its own."""


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

    @classmethod
    def from_json(cls, item: bytes | str, run_id: str) -> AuditEntry:
        """An entry as run ``run_id``'s own list holds it."""
        return _from_json(item, run_id)


class AuditStore(RedisBase):
    def first_time(self, key: str, *, ttl: float = 3600) -> bool:
        """True the first time ``key`` is seen within ``ttl`` seconds (SET NX)."""
        with self.errors():
            return bool(self.r.set(self.keys.dedupe(key), "1", nx=True, px=int(ttl * 1000)))

    def audit(self, action: str, *, actor: str, run_id: str | None = None,
              plan_id: str | None = None, **details: Any) -> None:
        """Append to the audit stream and, when the entry names a run, to that run's own
        list (one MULTI: both or neither), so ``--run`` reads only its entries. A list, not a
        stream: a small stream costs ~4.7 KB in Redis 7, a small list a few hundred bytes.
        Entries are never edited."""
        self.commit([self.audit_write(action, actor=actor, run_id=run_id, plan_id=plan_id,
                                      **details)])

    def commit(self, writes: Sequence[Write]) -> None:
        """Queued writes (e.g. audit entries taken earlier), in one MULTI: all or none."""
        with self.errors():
            pipe = self.r.pipeline()
            for write in writes:
                write(pipe)
            pipe.execute()

    def audit_write(self, action: str, *, actor: str, run_id: str | None = None,
                    plan_id: str | None = None, **details: Any) -> Write:
        """The writes of one audit entry, to queue in a caller's transaction (so a state
        change and its audit entry land together, or not at all)."""
        entry = {"ref": self.ids("aud"), "at": repr(self.clock()), "actor": actor,
                 "action": action, "run_id": run_id or "", "plan_id": plan_id or "",
                 "details": json.dumps(details, sort_keys=True, default=str)}

        def write(pipe: Any) -> None:  # Any: a Pipeline, or the client itself
            pipe.xadd(self.keys.audit(), entry)
            if run_id:  # the list's key names the run: its entries leave it out
                own = {k: v for k, v in entry.items() if k != "run_id"}
                pipe.rpush(self.keys.run_audit(run_id), json.dumps(own, separators=(",", ":")))

        return write

    def audit_log(self, *, run_id: str | None = None, limit: int = 200) -> list[AuditEntry]:
        """The newest ``limit`` entries, oldest first; only one run's when ``run_id`` is
        given. Reads at most ``limit`` entries (COUNT, or a range of the run's list)."""
        if limit <= 0:
            return []
        with self.errors():
            if run_id is None:
                return [_audit_entry(i, f) for i, f in
                        reversed(self.r.xrevrange(self.keys.audit(), count=limit))]
            own = self.r.lrange(self.keys.run_audit(run_id), -limit, -1)
            if own:
                return [_from_json(item, run_id) for item in own]
            return [_audit_entry(i, f) for i, f in
                    reversed(self._legacy_run_entries(run_id, limit))]

    def old_audit(self, cutoff: float, *, after: str | None = None, limit: int = 500
                  ) -> tuple[list[tuple[str, AuditEntry]], bool]:
        """The oldest stream entries written before ``cutoff`` (their ``at``), after stream
        id ``after``: up to ``limit`` of them, and whether more old ones may follow. Stops
        at the first newer entry, so a writer's skewed clock can only delay a trim."""
        start = f"({after}" if after else "-"
        with self.errors():
            page = self.r.xrange(self.keys.audit(), min=start, max="+", count=limit)
        found: list[tuple[str, AuditEntry]] = []
        for stream_id, fields in page:
            entry = _audit_entry(stream_id, fields)
            if entry.at >= cutoff:
                return found, False
            found.append((stream_id.decode(), entry))
        return found, len(page) == limit

    def forget_audit(self, stream_ids: list[str]) -> int:
        """Delete exactly these stream entries (already exported); how many were there."""
        if not stream_ids:
            return 0
        with self.errors():
            return int(self.r.xdel(self.keys.audit(), *stream_ids))

    def _legacy_run_entries(self, run_id: str, limit: int) -> list[Any]:
        """A run audited before per-run lists existed: its entries among the newest
        LEGACY_SCAN of the shared stream, newest first."""
        raw = self.r.xrevrange(self.keys.audit(), count=LEGACY_SCAN)
        return [(i, f) for i, f in raw if f.get(b"run_id") == run_id.encode()][:limit]


def _audit_entry(entry_id: bytes, fields: dict[bytes, bytes]) -> AuditEntry:
    text = {k.decode(): v.decode() for k, v in fields.items()}
    return _entry(text.get("ref") or entry_id.decode(), text)


def _from_json(item: bytes | str, run_id: str) -> AuditEntry:
    text = json.loads(item)
    return _entry(text["ref"], {"run_id": run_id, **text})  # older entries carry their own


def _entry(entry_id: str, text: dict[str, str]) -> AuditEntry:
    """Entries written before refs existed are known by their stream id."""
    return AuditEntry(id=entry_id, at=float(text["at"]), actor=text["actor"],
                      action=text["action"], run_id=text["run_id"] or None,
                      plan_id=text["plan_id"] or None, details=json.loads(text["details"]))
