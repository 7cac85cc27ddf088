"""Retention: finished runs and audit entries older than N days are exported to an archive
(a JSONL file), then trimmed from Redis; deploys only when ``history.retention_days`` says.

Each batch is read, appended to the archive, flushed and fsynced, and only then deleted.
A crash between the fsync and the delete leaves the batch both in the archive and in
Redis, so the next pass writes the same lines again: an archive may hold a line twice,
never miss a trimmed record. Lines carry nothing about the pass that wrote them, so a
repeated line is byte-identical (``sort -u`` or "one per (kind, id)" deduplicates).

One JSON object per line, with ``kind``:

* ``run``: ``id``, ``run`` (the record), ``plans`` (every version), ``audit`` (the run's
  own entries, which are deleted with it);
* ``audit``: one entry of the shared audit log (``id``, ``at``, ``actor``, ``action``,
  ``run_id``, ``plan_id``, ``details``, ``stream_id``) — a run's entries appear here too
  when they age out of the shared log;
* ``deploy``: one deployment-history entry (``id`` is ``RUN:ENV``).

Never trimmed: a run that is not terminal, however old; ``where`` (what each host serves);
an environment's newest deploys (``agents.store.history.KEEP_NEWEST``); an unattended
schedule's approved plan. Several replicas: a job lease lets one process trim at a time,
and ``job:retention:done`` spaces complete passes ``every_hours`` apart.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from agents.errors import RetentionError
from agents.history.deploys import DAY, Deploy
from agents.history.retention import RetentionSettings
from agents.store import AuditEntry, AuditLog, Locks, Store
from agents.store.retention import Found, RunRecord

JOB = "retention"
LEASE = 120.0
"""Seconds the job lease lasts; renewed after every batch."""
SLICE = 5.0
"""Seconds a worker spends trimming per idle moment, so queued runs never wait long."""
BATCH = 200
class Archive:
    """An append-only JSONL file; every ``append`` is on disk (fsynced) when it returns."""

    def __init__(self, path: Path):
        self.path = path
        self.lines = 0
        self._file: IO[bytes] | None = None

    def open(self) -> None:
        """Open for appending (creating it, mode 0600); a torn last line is closed off."""
        try:
            existed = self.path.exists()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            self._file = os.fdopen(fd, "ab")
            if existed and self.path.stat().st_size and not _ends_with_newline(self.path):
                self._file.write(b"\n")  # a crash mid-line: never glue a record onto it
            if not existed:
                _fsync_dir(self.path.parent)
        except OSError as exc:
            raise RetentionError(f"cannot write the retention export {self.path} "
                                 f"({exc.strerror or exc}); nothing was trimmed — fix "
                                 f"retention.export (or --export)") from exc

    def append(self, objects: list[dict[str, Any]]) -> None:
        if self._file is None:
            raise RetentionError("the archive is not open")  # a bug: trim only after open()
        data = b"".join(_line(o) for o in objects)
        try:
            self._file.write(data)
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as exc:
            raise RetentionError(f"writing the retention export {self.path} failed "
                                 f"({exc.strerror or exc}); this batch was not trimmed") from exc
        self.lines += len(objects)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


@dataclass
class RetentionReport:
    """What a pass exported and trimmed (or, in a dry run, would)."""

    cutoff: float
    export: Path | None
    """None only for a dry run given no export file (it writes nothing)."""
    dry_run: bool
    history_cutoff: float | None = None
    runs: Counter[str] = field(default_factory=Counter)
    """Trimmed runs by status."""
    unfinished: set[str] = field(default_factory=set)
    """Runs created before the cutoff that are not finished (kept)."""
    plans: int = 0
    audit: int = 0
    deploys: int = 0
    lines: int = 0
    held_for_sink: bool = False
    """Old audit entries the audit sink has not taken yet were kept (trimmed once shipped)."""
    complete: bool = True
    """False when the pass stopped at its time budget (the next one continues)."""

    @property
    def trimmed(self) -> int:
        return sum(self.runs.values()) + self.audit + self.deploys

    def add(self, found: Found) -> None:
        self.runs.update(r.run.status.value for r in found.records)
        self.plans += sum(len(r.plans) for r in found.records)
        self.unfinished |= {r.id for r in found.kept if not r.status.terminal}


Hold = Callable[[], bool]
"""Renews this process's lease before a delete; False if another process took it."""


class Retention:
    """One pass over the store: runs, then the shared audit log, then (if set) deploys."""

    def __init__(self, store: Store, *, older_than: float, export: Path | None,
                 history_older_than: float | None = None, batch: int = BATCH,
                 hold: Hold = lambda: True, sink: bool = True):
        # The whole Store: one pass walks everything that ages against one clock: runs and
        # their plans (trimming), the schedules whose approved plans it must keep, the audit
        # log up to the sink's cursor (feed), and deploy history.
        self.store, self.export, self.batch, self.hold = store, export, batch, hold
        self.older_than, self.history_older_than = older_than, history_older_than
        self.sink = sink
        """Whether ``audit.sink`` is configured: then an entry goes only once shipped, even
        before the first shipper has run (fail closed: assumed unless told otherwise)."""
        self.archive = Archive(export) if export is not None else None
        self._deadline = float("inf")

    @classmethod
    def configured(cls, store: Store, settings: RetentionSettings | None, *,
                   history_days: float | None, sink: bool, older_than: float | None = None,
                   export: Path | None = None, batch: int = BATCH,
                   dry_run: bool = False) -> Retention:
        """A pass as the config says, each setting overridable (RetentionError if neither
        the config nor the caller gives an age, or an export file unless ``dry_run``: a dry
        run only counts)."""
        age = older_than if older_than is not None else (settings.days * DAY if settings
                                                         else None)
        path = export or (Path(settings.export) if settings else None)
        if age is None or (path is None and not dry_run):
            needed = "--older-than" if dry_run else "--older-than and --export"
            raise RetentionError("retention is not configured: add a retention section "
                                 f"(days, export) to the config, or pass {needed}")
        return cls(store, older_than=age, export=path, batch=batch, sink=sink,
                   history_older_than=history_days * DAY if history_days else None)

    def run(self, *, dry_run: bool = False, budget: float | None = None) -> RetentionReport:
        """Export and trim (or only count, ``dry_run``) what is older than the cutoffs."""
        now = self.store.clock()
        report = RetentionReport(now - self.older_than, self.export, dry_run)
        if self.history_older_than is not None:
            report.history_cutoff = now - self.history_older_than
        self._deadline = time.monotonic() + budget if budget is not None else float("inf")
        if not dry_run:
            if self.archive is None:
                raise RetentionError("retention needs an export file to trim: set "
                                     "retention.export in the config, or pass --export")
            self.archive.open()
        try:
            report.complete = self._runs(report) and self._audit(report) and self._deploys(report)
        finally:
            if self.archive is not None:
                report.lines = self.archive.lines
                self.archive.close()
        return report

    def _runs(self, report: RetentionReport) -> bool:
        keep = {s.approved_plan_id for s in self.store.schedules.all() if s.approved_plan_id}
        ids = self.store.trimming.runs_created_before(report.cutoff)
        for start in range(0, len(ids), self.batch):
            if start and self._late():
                return False
            chunk = ids[start:start + self.batch]
            report.add(self.store.trimming.finished_runs(chunk, report.cutoff, keep_plans=keep)
                       if report.dry_run else
                       self.store.trimming.trim(chunk, report.cutoff, keep_plans=keep,
                                                export=self._export_runs))
        return True

    def _export_runs(self, records: list[RunRecord]) -> None:
        self._durable([run_line(r) for r in records])

    def _audit(self, report: RetentionReport) -> bool:
        after: str | None = None
        unshipped = self.store.feed.unshipped_from(sink=self.sink)
        while True:
            entries, more = self.store.audit.older_than(report.cutoff, after=after,
                                                        limit=self.batch)
            if unshipped is not None and any(not _before(i, unshipped) for i, _ in entries):
                entries = [(i, e) for i, e in entries if _before(i, unshipped)]
                report.held_for_sink, more = True, False
            if entries and not report.dry_run:
                self._durable([audit_line(i, e) for i, e in entries])
                self.store.audit.forget([i for i, _ in entries])
            report.audit += len(entries)
            if not more:
                return True
            if self._late():
                return False
            after = entries[-1][0]

    def _deploys(self, report: RetentionReport) -> bool:
        if report.history_cutoff is None:
            return True
        history = self.store.history
        for service, env in history.scopes():
            skip = 0
            while found := history.older_than(service, env, report.history_cutoff,
                                              skip=skip, limit=self.batch):
                if report.deploys and self._late():
                    return False
                if report.dry_run:
                    skip += len(found)
                else:
                    self._durable([deploy_line(env, d, service=service) for _, d in found])
                    history.forget(service, env, [member for member, _ in found])
                report.deploys += len(found)
        return True

    def _late(self) -> bool:
        """Past the time budget (checked between batches: a pass always makes progress)."""
        return time.monotonic() > self._deadline

    def _durable(self, lines: list[dict[str, Any]]) -> None:
        """Append and fsync ``lines``; then make sure the lease is still ours to delete."""
        assert self.archive is not None  # noqa: S101 - run() refuses a trim without one
        self.archive.append(lines)
        if not self.hold():
            raise RetentionError("another process took over retention (the lease lapsed); "
                                 "stopped before deleting this batch — it is exported and "
                                 "will be again")


def run_line(record: RunRecord) -> dict[str, Any]:
    return {"kind": "run", "id": record.run.id, "run": json.loads(record.raw),
            "plans": [json.loads(raw) for _, raw in sorted(record.plans.items())],
            "audit": [AuditEntry.from_json(item, record.run.id).__dict__
                      for item in record.audit]}


def _before(stream_id: str, other: str) -> bool:
    """Stream ids in order (``ms-seq``, compared as numbers, not as text)."""
    def key(i: str) -> tuple[int, ...]:
        return tuple(int(part) for part in i.split("-"))
    return key(stream_id) < key(other)


def audit_line(stream_id: str, entry: AuditEntry) -> dict[str, Any]:
    return {"kind": "audit", **entry.__dict__, "stream_id": stream_id}


def deploy_line(environment: str, deploy: Deploy, *,
                service: str | None = None) -> dict[str, Any]:
    """A trimmed deploy as the export holds it (``service`` only for a named service's)."""
    named = {} if service is None else {"service": service}
    return {"kind": "deploy", "id": f"{deploy.run_id}:{environment}", **named,
            "deploy": deploy.model_dump(mode="json")}


# -- the embedded store's record ------------------------------------------------------------

KEPT_RUNS = "runs.jsonl"
"""In the state directory: every run executed on the in-process store (no REDIS_URL), one
``run`` line each, as an archive holds it — that store ends with its process, and the
terminal that showed the run may be gone (a dead ``| tee``). ``deckhand runs show RUN``
without REDIS_URL reads it."""


def kept_runs(state_dir: Path) -> Path:
    return state_dir / KEPT_RUNS


def keep_run(store: Store, run_id: str, path: Path) -> None:
    """Append run ``run_id`` as the store has it now (journal folded in), with its plan's
    versions and its own audit entries, to ``path`` and fsync it; OSError if it cannot."""
    run = store.runs.get(run_id)
    line = {"kind": "run", "id": run.id, "run": run.model_dump(mode="json"),
            "plans": [p.model_dump(mode="json") for p in store.plans.versions(run.plan_id)],
            "audit": [e.__dict__ for e in store.audit.entries(run_id=run.id, limit=100_000)]}
    path.parent.mkdir(parents=True, exist_ok=True)
    existed = path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "ab") as file:
        torn = existed and path.stat().st_size and not _ends_with_newline(path)
        file.write((b"\n" if torn else b"") + _line(line))  # never glued onto a torn line
        file.flush()
        os.fsync(file.fileno())
    if not existed:
        _fsync_dir(path.parent)


# -- one process at a time ------------------------------------------------------------------

def run_exclusively(retention: Retention, *, locks: Locks, audit: AuditLog, owner: str,
                    budget: float | None = None) -> RetentionReport | None:
    """A pass under the job lease, or None if another process holds it. A complete pass
    marks the job done; one that trimmed anything is audited."""
    if not locks.take_job(JOB, owner=owner, ttl=LEASE):
        return None
    retention.hold = lambda: locks.hold_job(JOB, owner=owner, ttl=LEASE)
    try:
        report = retention.run(budget=budget)
        if report.runs and report.export is not None:  # `runs show` says where they went
            locks.note_job(JOB, {"cutoff": report.cutoff, "export": str(report.export)})
        if report.complete:
            locks.mark_job_done(JOB, locks.clock())
    finally:
        locks.release_job(JOB, owner=owner)
    if report.trimmed:
        audit.record("retention", actor=owner, runs=sum(report.runs.values()),
                     audit_entries=report.audit, deploys=report.deploys,
                     export=str(report.export), complete=report.complete)
    return report


def holder_text(locks: Locks) -> str:
    """Who holds the retention lease, for a message."""
    holder = locks.job(JOB)
    if holder is None:
        return "another process (just finished)"
    return f"{holder.worker}, since {time.strftime('%H:%M:%S', time.localtime(holder.since))}"


def due(locks: Locks, settings: RetentionSettings) -> bool:
    """Whether a worker should start (or continue) a pass now."""
    if settings.every_hours == 0:
        return False
    done = locks.job_done_at(JOB)
    return done is None or locks.clock() - done >= settings.every_hours * 3600


def _line(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            + "\n").encode()


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"


def _fsync_dir(directory: Path) -> None:
    """Make a new file's name durable too, not only its contents."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
