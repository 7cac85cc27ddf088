"""Trimming finished runs: everything a run owns, read for export, then deleted with it.

A run owns its record, its places in the two runs indexes, its plan's versions and
``latest`` pointer, its companion keys (``Keys.run_companions``: lease, cancel flag, audit
list, history marker), queue entries left naming it and places in lock queues. Its audit
entries in the shared stream and its deploys in the history are separate records with
their own retention (``AuditLog.older_than``, ``History.older_than``); ``where`` is
never trimmed.

``trim_runs`` reads under WATCH, hands what it read to the caller's ``export`` (which must
make it durable before returning), and only then deletes, in one transaction: a run that
changed after it was read is not deleted (the transaction is retried with fresh reads,
exported again), so nothing is deleted that was not exported in that exact form.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from redis.client import Pipeline

from agents.run.record import Run
from agents.store._redis import GROUP, Part, RedisBase, text
from agents.store.queue import Queue


@dataclass(frozen=True)
class RunRecord:
    """One finished run and everything it owns, as read from Redis (raw JSON)."""

    run: Run
    raw: bytes
    plans: dict[int, bytes]
    """Plan version → that version's JSON (empty when the plan is kept)."""
    audit: list[bytes]
    """The run's own audit list, oldest first."""
    queued: list[str] = field(default_factory=list)
    """Queue entries still naming the run (left by a crash)."""
    keep_plan: bool = False
    """The plan outlives the run (an unattended schedule's approved plan)."""


@dataclass
class Found:
    """Runs read for trimming: those finished before the cutoff, and how many were not."""

    records: list[RunRecord]
    kept: list[Run]


Export = Callable[[list[RunRecord]], None]
"""Makes records durable elsewhere (written and fsynced) before they are deleted; raises
to delete nothing."""


def finished_before(run: Run, cutoff: float) -> bool:
    """Terminal, and ended before ``cutoff`` (older records lack ``finished_at``)."""
    ended = run.finished_at or run.started_at or run.created_at
    return run.status.terminal and ended < cutoff


class Trimming(Part):
    """Finished runs found by age and deleted with everything they own, in one MULTI each
    (the retention job exports them first); a run still queued is never trimmed."""

    def __init__(self, db: RedisBase, *, queue: Queue) -> None:
        super().__init__(db)
        self.queue = queue

    def runs_created_before(self, cutoff: float) -> list[str]:
        """Ids of runs created before ``cutoff``, oldest first (from the creation index:
        a run cannot have finished before it was created)."""
        with self.errors():
            ids = self.r.zrangebyscore(self.keys.runs(), "-inf", f"({cutoff!r}")
        return [text(i) for i in ids]

    def finished_runs(self, run_ids: list[str], cutoff: float, *,
                      keep_plans: Iterable[str] = ()) -> Found:
        """Of ``run_ids``, those finished before ``cutoff`` with all they own; the rest kept.

        Plans named in ``keep_plans`` (an unattended schedule's approved plan) are not read,
        so they are neither exported nor deleted with the run.
        """
        keep = set(keep_plans)
        with self.errors():
            runs = self._read_runs(run_ids)
            done = [(raw, run) for raw, run in runs if finished_before(run, cutoff)]
            audits, plans = self._owned([run for _, run in done], keep)
            queued = self._queued({run.id for _, run in done})
        records = [RunRecord(run, raw, plans[run.id], audit, queued.get(run.id, []),
                             keep_plan=run.plan_id in keep)
                   for (raw, run), audit in zip(done, audits, strict=True)]
        return Found(records, [run for _, run in runs if not finished_before(run, cutoff)])

    def trim(self, run_ids: list[str], cutoff: float, *, export: Export,
             keep_plans: Iterable[str] = ()) -> Found:
        """Export, then delete, the runs among ``run_ids`` that finished before ``cutoff``.

        One transaction under WATCH on the finished runs' records and audit lists (never on
        a run still going, whose every event would restart it): if one changed after it was
        read, nothing is deleted and the round is repeated, exported again.
        """
        keep = set(keep_plans)
        with self.errors():
            runs = [run for _, run in self._read_runs(run_ids)]
        ids = [run.id for run in runs if finished_before(run, cutoff)]
        kept = [run for run in runs if not finished_before(run, cutoff)]
        watched = [k for i in ids for k in (self.keys.run(i), self.keys.run_audit(i))]

        def attempt(pipe: Pipeline) -> Found:
            found = self.finished_runs(ids, cutoff, keep_plans=keep)
            if found.records:
                export(found.records)
                pipe.multi()
                for record in found.records:
                    self.forget_run(pipe, record)
                pipe.execute()
            return Found(found.records, kept)

        return self.cas(watched, attempt, busy="runs being trimmed") if ids else Found([], kept)

    def forget_run(self, pipe: Pipeline, record: RunRecord) -> None:
        """Queue the deletion of ``record``'s run and everything it owns: the one place
        that knows all of it (per-run keys themselves are listed by ``run_companions``)."""
        run = record.run
        pipe.delete(self.keys.run(run.id), *self.keys.run_companions(run.id))
        pipe.zrem(self.keys.runs(), run.id)
        pipe.zrem(self.keys.runs_open(), run.id)
        pipe.zrem(self.keys.run_ids(), run.id)
        if run.service is not None:
            pipe.zrem(self.keys.runs_of(run.service), run.id)
        if not record.keep_plan:
            pipe.delete(self.keys.plan_latest(run.plan_id),
                        *(self.keys.plan(run.plan_id, v) for v in record.plans))
        if record.queued:
            pipe.xack(self.keys.queue(), GROUP, *record.queued)
            pipe.xdel(self.keys.queue(), *record.queued)
        for environment in run.environments:
            pipe.lrem(self.keys.lock_queue(run.service, environment), 0, run.id)

    # -- reading what runs own -------------------------------------------------------------

    def _read_runs(self, run_ids: list[str]) -> list[tuple[bytes, Run]]:
        raws = self.r.mget([self.keys.run(i) for i in run_ids]) if run_ids else []
        return [(raw, Run.model_validate_json(raw)) for raw in raws if raw]

    def _owned(self, runs: list[Run], keep_plans: set[str]
               ) -> tuple[list[list[bytes]], dict[str, dict[int, bytes]]]:
        """Each run's audit list, and its plan's versions (none for a kept plan)."""
        with self.r.pipeline(transaction=False) as pipe:
            for run in runs:
                pipe.lrange(self.keys.run_audit(run.id), 0, -1)
                pipe.get(self.keys.plan_latest(run.plan_id))
            replies = pipe.execute() if runs else []
        wanted = [(run, v) for run, latest in zip(runs, replies[1::2], strict=True)
                  if run.plan_id not in keep_plans
                  for v in range(1, max(int(latest or 0), run.plan_version) + 1)]
        keys = [self.keys.plan(run.plan_id, v) for run, v in wanted]
        plans: dict[str, dict[int, bytes]] = {run.id: {} for run in runs}
        for (run, version), raw in zip(wanted, self.r.mget(keys) if keys else [], strict=True):
            if raw is not None:
                plans[run.id][version] = raw
        return replies[0::2], plans

    def _queued(self, run_ids: set[str]) -> dict[str, list[str]]:
        """Queue entries naming any of ``run_ids`` (the stream holds only the backlog)."""
        found: dict[str, list[str]] = defaultdict(list)
        if run_ids:
            for entry_id, run_id in self.queue.entries():
                if run_id in run_ids:
                    found[run_id].append(entry_id)
        return found
