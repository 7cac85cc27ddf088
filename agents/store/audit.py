"""The append-only audit stream, hash-chained (``chain``), and the dedupe keys that recognise
Slack's retries."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from agents.store._redis import Part, Write, text
from agents.store.chain import AuditAppend, ChainReport, trimmed, verify
from agents.store.checkpoints import CHECKPOINT, AuditKey, CheckpointAppend, Resume, Seals

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
    prev: str = ""
    """The hash of the entry before it in the stream (the chain's genesis for the first)."""
    hash: str = ""
    """This entry's hash (``chain.entry_hash``); empty for entries from before the chain."""

    def as_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)

    @classmethod
    def from_json(cls, item: bytes | str, run_id: str) -> AuditEntry:
        """An entry as run ``run_id``'s own list holds it."""
        return _from_json(item, run_id)


class Dedupe(Part):
    """Keys that recognise a delivery seen before (Slack's retries of one event)."""

    def first_time(self, key: str, *, ttl: float = 3600) -> bool:
        """True the first time ``key`` is seen within ``ttl`` seconds (SET NX)."""
        with self.errors():
            return bool(self.r.set(self.keys.dedupe(key), "1", nx=True, px=int(ttl * 1000)))


class AuditLog(Part):
    """The append-only audit stream, and each run's own list of its entries."""

    def record(self, action: str, *, actor: str, run_id: str | None = None,
               plan_id: str | None = None, **details: Any) -> None:
        """Append to the audit stream and, when the entry names a run, to that run's own
        list (one MULTI: both or neither), so ``--run`` reads only its entries. A list, not a
        stream: a small stream costs ~4.7 KB in Redis 7, a small list a few hundred bytes.
        Entries are never edited."""
        self.commit([self.write(action, actor=actor, run_id=run_id, plan_id=plan_id,
                                **details)])

    def refused(self, what: str, *, actor: str, face: str, rule: str,
                action: str = "refused", run_id: str | None = None,
                plan_id: str | None = None, **details: Any) -> None:
        """A refusal, from any face: who (``actor``), what they tried (``what``: approve,
        cancel, a tool's name …), where (``face``: slack, cli, terminal, mcp) and the rule or
        check that said no (``rule``: the refusal's own words). Every refusal's action ends
        in ``refused`` (MCP's name the step refused: ``mcp_call_refused`` …)."""
        self.record(action, actor=actor, run_id=run_id, plan_id=plan_id, what=what,
                    face=face, rule=rule[:500], **details)

    def write(self, action: str, *, actor: str, run_id: str | None = None,
              plan_id: str | None = None, **details: Any) -> Write:
        """The writes of one audit entry, to queue in a caller's transaction (so a state
        change and its audit entry land together, or not at all)."""
        entry = {"ref": self.ids("aud"), "at": repr(self.clock()), "actor": actor,
                 "action": action, "run_id": run_id or "", "plan_id": plan_id or "",
                 "details": json.dumps(details, sort_keys=True, default=str)}
        # hashed as stored: redacted now, so the store's door finds nothing left to change
        return AuditAppend(self.keys, {k: self.scrubbed(v) for k, v in entry.items()},
                           run_id)

    def verify(self) -> ChainReport:
        """The audit chain checked end to end (``chain.verify``), without a key."""
        with self.errors():
            return verify(self.r, self.keys)

    def verify_signed(self, *, key: AuditKey | None, grace: float = float("inf"),
                      full: bool = False) -> tuple[ChainReport, Seals]:
        """The audit chain checked (``chain.verify``) with its signed checkpoints
        (``checkpoints.Seals``: unsigned entries older than ``grace`` seconds fail it). With
        a key, the walk starts after the checkpoint the last successful verify ended on
        (unless ``full``), and a successful one records where it ended."""
        seals = Seals(key, now=self.clock(), grace=grace)
        with self.errors():
            resume = None
            if key is not None and not full:
                resume = Resume.read(text(self.r.get(self.keys.audit_verified()) or b""), key)
            report = verify(self.r, self.keys, seals=seals,
                            resume=(resume.stream_id, resume.hash) if resume else None)
            if resume is not None and report.resumed and seals.last is None:
                seals.last = (resume.stream_id, resume.hash)  # verified before: still signed
            if report.ok and key is not None and seals.last is not None:
                self.r.set(self.keys.audit_verified(), Resume(*seals.last).signed(key))
        return report, seals

    def checkpoint(self, key: AuditKey, *, actor: str) -> None:
        """Sign the chain's head as it is now, as one more entry (``audit_checkpoint``)."""
        entry = {"ref": self.ids("aud"), "at": repr(self.clock()), "actor": actor,
                 "action": CHECKPOINT, "run_id": "", "plan_id": "", "details": "{}"}
        self.commit([CheckpointAppend(self.keys, {k: self.scrubbed(v) for k, v in
                                                  entry.items()}, key)])

    def newest_action(self) -> str | None:
        """The newest entry's action (None: no entry)."""
        with self.errors():
            newest = self.r.xrevrange(self.keys.audit(), count=1)
        return text(newest[0][1].get(b"action", b"")) if newest else None

    def since(self, since: float, *, page: int = 1000) -> Iterator[tuple[str, AuditEntry]]:
        """(stream id, entry) of every stream entry from ``since`` (by stream time) on, a
        page at a time (an export of millions never holds them all)."""
        start = f"{int(since * 1000)}-0"
        while True:
            with self.errors():
                batch = self.r.xrange(self.keys.audit(), min=start, max="+", count=page)
            if not batch:
                return
            yield from ((text(i), _audit_entry(i, f)) for i, f in batch)
            start = f"({text(batch[-1][0])}"

    def entries(self, *, run_id: str | None = None, limit: int = 200) -> list[AuditEntry]:
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

    def older_than(self, cutoff: float, *, after: str | None = None, limit: int = 500
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

    def forget(self, stream_ids: list[str]) -> int:
        """Delete exactly these stream entries (already exported, the stream's oldest, oldest
        first); how many were there. The newest one's hash is kept as the trimmed head, in
        the same MULTI, so the chain stays verifiable from the first entry kept."""
        if not stream_ids:
            return 0
        with self.errors():
            with self.r.pipeline(transaction=False) as pipe:
                for stream_id in stream_ids:
                    pipe.xrange(self.keys.audit(), min=stream_id, max=stream_id)
                pipe.hgetall(self.keys.audit_chain())
                *pages, meta = pipe.execute()
            entries = [(text(i), {text(k): text(v) for k, v in f.items()})
                       for page in pages for i, f in page]
            with self.r.pipeline() as pipe:
                pipe.xdel(self.keys.audit(), *stream_ids)
                if entries:
                    pipe.hset(self.keys.audit_chain(), mapping=trimmed(
                        entries, {text(k): text(v) for k, v in meta.items()}))
                return int(pipe.execute()[0])

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
                      plan_id=text["plan_id"] or None, details=json.loads(text["details"]),
                      prev=text.get("prev", ""), hash=text.get("hash", ""))
