"""Run records and their transitions: every change is one compare-and-set on ``run:ID``.

Approval rules are checked inside that transaction, and an approval that completes a run
enqueues it in the same EXEC. While a run executes, its worker writes host events to the
run's host journal (``run:ID:hosts``, see ``agents.store.leases``) instead of rewriting the
record; every read here folds the journal in, so readers see the whole run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from redis.client import Pipeline

from agents import tracing
from agents.errors import (
    AlreadyStopping,
    AmbiguousId,
    ApprovalRefused,
    IllegalTransition,
    NotFound,
)
from agents.ids import normalize
from agents.plan.model import Plan
from agents.plan.targets import PlanTargets
from agents.policy.approvals import (
    approval_grant,
    approvals_needed,
    live_approvals,
    policy_version,
)
from agents.policy.eligibility import Grant
from agents.policy.rules import Policy
from agents.run.record import Approval, HostChange, Pause, Run, RunStatus, StepState
from agents.store._redis import Keys, Part, RedisBase, Write, text
from agents.store.audit import AuditLog
from agents.store.limits import ApprovalCounts
from agents.store.manual_locks import ManualLocks
from agents.store.queue import Queue

Change = Callable[[Run], "list[Write] | None"]
"""Edits a run in place; may return extra commands to run in the same transaction."""
Companions = Callable[[str], Sequence[Write]]
"""The writes that go with a new run (given the id it is stored under): its audit entry."""
Check = Callable[[Run], "str | None"]
"""One more reason to refuse, read inside the transaction (None: no objection)."""


ID_TEXT = re.compile(r"[a-z0-9-]+")
MAX_CANDIDATES = 10
"""Runs listed when a typed prefix is ambiguous."""


class Runs(Part):
    """Run records: created, read, and changed by one compare-and-set each. An approval
    that completes a run queues it, and a state change writes its audit entry, in the same
    EXEC (hence ``audit`` and ``queue``)."""

    def __init__(self, db: RedisBase, *, audit: AuditLog, queue: Queue,
                 limits: ApprovalCounts, manual_locks: ManualLocks | None = None) -> None:
        super().__init__(db)
        self.audit, self.queue, self.limits = audit, queue, limits
        self.manual_locks = manual_locks

    def create(self, run: Run, *, then: Companions | None = None) -> Run:
        """Store a new run and index it, all or nothing; a taken id is replaced in place.
        ``then(run_id)``: writes for the same EXEC (its audit entry)."""
        run.id = self.create_unique(
            "run", run.id, lambda run_id: [self.keys.run(run_id)],
            lambda pipe, run_id: self._write_new_run(pipe, run, run_id, then))
        return run

    def create_once(self, run: Run, *, then: Companions | None = None) -> tuple[Run, bool]:
        """Store ``run`` under its own id unless a run has it already: (the stored run,
        whether this call created it). For ids derived from an idempotency key."""
        created = self.cas([self.keys.run(run.id)],
                           lambda pipe: self._write_new_run(pipe, run, run.id, then),
                           busy=f"run {run.id}")
        return (run, True) if created else (self.get(run.id), False)

    def _write_new_run(self, pipe: Pipeline, run: Run, run_id: str,
                       then: Companions | None) -> bool:
        if pipe.exists(self.keys.run(run_id)):
            return False
        stored = run.model_copy(update={"id": run_id})

        def record(p: Pipeline) -> None:
            p.set(self.keys.run(run_id), stored.record_json())
            p.zadd(self.keys.runs(), {run_id: run.created_at})
            p.zadd(self.keys.run_ids(), {run_id: 0})
            if run.service is not None:  # the legacy service's runs are the rest of ``runs``
                p.zadd(self.keys.runs_of(run.service), {run_id: run.created_at})
            index_open(p, self.keys, stored)

        self.queue_writes(pipe, [record, *(then(run_id) if then else ())])
        pipe.execute()
        return True

    def find(self, typed: str) -> Run:
        """The run a person means by ``typed``: a whole id, or a unique prefix of one.

        NotFound if nothing matches; AmbiguousId (listing the candidates) if several do.
        """
        wanted = normalize("run", typed)
        if not ID_TEXT.fullmatch(wanted):
            raise NotFound(f"no run {typed.strip()} — run ids are letters, digits and dashes")
        with self.errors():
            if self.r.exists(self.keys.run(wanted)):
                return self.get(wanted)
            matches = self._ids_with_prefix(wanted)
        if len(matches) == 1:
            return self.get(matches[0])
        if not matches:
            raise NotFound(f"no run {typed.strip()} — `deckhand runs` lists recent ones")
        shown = ", ".join(matches[:MAX_CANDIDATES]) + (", …" if len(matches) > MAX_CANDIDATES
                                                       else "")
        raise AmbiguousId(f"{typed.strip()} could be any of {shown}; type more of the id")

    def _ids_with_prefix(self, prefix: str) -> list[str]:
        """Up to MAX_CANDIDATES + 1 ids starting with ``prefix``, from the lexical index
        (a bounded range read); runs stored before that index existed are scanned for
        only while the index is incomplete (``deckhand check --store --repair`` fills it)."""
        after = f"({prefix}~"  # "~" sorts after every character an id may hold
        raw = self.r.zrangebylex(self.keys.run_ids(), f"[{prefix}", after, start=0,
                                 num=MAX_CANDIDATES + 1)
        found = {text(i) for i in raw}
        if self.r.zcard(self.keys.run_ids()) < self.r.zcard(self.keys.runs()):
            legacy = self.r.zscan_iter(self.keys.runs(), match=f"{prefix}*", count=1000)
            found |= {text(i) for i, _ in legacy}
        return sorted(found)

    def get(self, run_id: str) -> Run:
        found = self._current([run_id])
        if run_id not in found:
            raise NotFound(f"no run {run_id} — `deckhand runs` lists recent ones")
        return found[run_id]

    def recent(self, *, limit: int = 20, statuses: Iterable[RunStatus] | None = None) -> list[Run]:
        """Most recent runs first, optionally only those in ``statuses``.

        Unfinished statuses are read from the index of open runs alone, whatever their age
        (runs stored before that index existed are added to it once, see
        ``_complete_open_index``); finished ones among the newest ``max(limit * 5, 100)``;
        without a filter, exactly ``limit`` are read.
        """
        wanted = set(statuses) if statuses is not None else None
        window = limit if wanted is None else max(limit * 5, 100)
        with self.errors():
            if wanted and not any(s.terminal for s in wanted):
                self._complete_open_index()
                ids = self.r.zrange(self.keys.runs_open(), 0, -1)
            else:
                ids = self.r.zrevrange(self.keys.runs(), 0, window - 1) if window > 0 else []
            raws = self.r.mget([self.keys.run(text(i)) for i in ids]) if ids else []
        runs = self._with_journals([Run.model_validate_json(raw) for raw in raws if raw])
        runs.sort(key=lambda r: r.created_at, reverse=True)
        return [r for r in runs if wanted is None or r.status in wanted][:limit]

    def mentioning(self, text_: str, *, scan: int) -> list[Run]:
        """Among the newest ``scan`` runs, those whose record mentions ``text_`` (a user id:
        who asked, who approved), newest first. Only those are parsed: the rest are
        skipped by a byte search, so a Home's "your recent runs" costs about one read of
        ``scan`` records whatever their size. Callers check what the mention was."""
        needle = json.dumps(text_).encode()
        with self.errors():
            ids = self.r.zrevrange(self.keys.runs(), 0, scan - 1) if scan > 0 else []
            raws = self.r.mget([self.keys.run(text(i)) for i in ids]) if ids else []
        found = [Run.model_validate_json(raw) for raw in raws if raw and needle in raw]
        return self._with_journals(found)

    def _complete_open_index(self, window: int = 1_000) -> None:
        """Once per store: add unfinished runs among the newest ``window`` stored before the
        open index existed, so the index alone answers from then on (reads stay flat)."""
        if self.r.exists(self.keys.runs_open_complete()):
            return
        ids = [text(i) for i in self.r.zrevrange(self.keys.runs(), 0, window - 1)]
        raws = self.r.mget([self.keys.run(i) for i in ids]) if ids else []
        open_runs = {run.id: run.created_at for run in
                     (Run.model_validate_json(raw) for raw in raws if raw)
                     if not run.status.terminal}
        with self.r.pipeline() as pipe:  # a run that ends meanwhile is filtered on read
            if open_runs:
                pipe.zadd(self.keys.runs_open(), open_runs)
            pipe.set(self.keys.runs_open_complete(), "1")
            pipe.execute()

    def of_service(self, service: str, *, limit: int = 20) -> list[Run]:
        """Service ``service``'s newest ``limit`` runs, newest first, from its index
        (``runs:svc:S``); runs its release stored before that index existed are added to
        it once (``_complete_service_index``). The legacy service's runs are the rest."""
        with self.errors():
            self._complete_service_index()
            ids = self.r.zrevrange(self.keys.runs_of(service), 0, limit - 1) if limit else []
        return self.by_id([text(i) for i in ids])

    def _complete_service_index(self, chunk: int = 500) -> None:
        """Once per store: index every stored run that names a service (step 1 of issue 40
        wrote ``service`` before the index existed), one pass over the runs in chunks."""
        if self.r.exists(self.keys.runs_of_complete()):
            return
        ids = [text(i) for i in self.r.zrange(self.keys.runs(), 0, -1)]
        with self.r.pipeline() as pipe:  # zadd is idempotent: two processes may both do it
            for start in range(0, len(ids), chunk):
                raws = self.r.mget([self.keys.run(i) for i in ids[start:start + chunk]])
                named = (raw for raw in raws if raw and b'"service":' in raw)  # else legacy
                for run in (Run.model_validate_json(raw) for raw in named):
                    if run.service is not None:
                        pipe.zadd(self.keys.runs_of(run.service), {run.id: run.created_at})
            pipe.set(self.keys.runs_of_complete(), "1")
            pipe.execute()

    def since(self, since: float, *, limit: int = 10_000) -> list[Run]:
        """Runs created at or after ``since`` (epoch seconds), newest first, at most ``limit``."""
        return self.by_id(self.ids_since(since, limit=limit))

    def ids_since(self, since: float, *, limit: int) -> list[str]:
        """Ids of the runs created since ``since`` (epoch seconds), newest first, at most
        ``limit``."""
        with self.errors():
            ids = self.r.zrevrangebyscore(self.keys.runs(), "+inf", since, start=0, num=limit)
        return [text(i) for i in ids]

    def by_id(self, run_ids: list[str]) -> list[Run]:
        """The runs with these ids, in one round trip (ids without a record are left out)."""
        if not run_ids:
            return []
        with self.errors():
            raws = self.r.mget([self.keys.run(i) for i in run_ids])
        return self._with_journals([Run.model_validate_json(raw) for raw in raws if raw])

    def _with_journals(self, runs: list[Run]) -> list[Run]:
        """A finished run's journal was folded into its record; an active one is read
        again with its journal, both in one transaction."""
        current = self._current([r.id for r in runs if not r.status.terminal])
        return [current.get(r.id, r) for r in runs]

    def _current(self, run_ids: list[str]) -> dict[str, Run]:
        """The runs (those that exist) with their host journals, read at one moment."""
        if not run_ids:
            return {}
        with self.errors(), self.r.pipeline() as pipe:
            for run_id in run_ids:
                pipe.get(self.keys.run(run_id))
                pipe.hgetall(self.keys.run_hosts(run_id))
            replies = pipe.execute()
        return {run_id: with_journal(Run.model_validate_json(raw), journal)
                for run_id, raw, journal in zip(run_ids, replies[::2], replies[1::2],
                                                strict=True) if raw is not None}

    def update(self, run_id: str, change: Change) -> Run:
        """Apply ``change`` atomically: re-read and retry if anyone wrote the run meanwhile."""
        before: list[RunStatus] = []

        def indexed(run: Run) -> list[Write]:
            before[:] = [run.status]
            extras = list(change(run) or ())
            return [*extras, lambda pipe: index_open(pipe, self.keys, run)]

        run = self.update_record(self.keys.run(run_id), Run, indexed,
                                 missing=f"no run {run_id}")
        if run.status.terminal and not before[0].terminal:
            _ended_unexecuted(run)
        return run

    def transition(self, run_id: str, new: RunStatus, *,
                   expect: Iterable[RunStatus] | None = None, reason: str | None = None) -> Run:
        """Move a run to ``new`` (IllegalTransition if the state machine forbids it)."""
        expected = set(expect) if expect is not None else None

        def change(run: Run) -> None:
            if expected is not None and run.status not in expected:
                raise IllegalTransition(f"run {run_id} is {run.status.value}, not "
                                        f"{' or '.join(sorted(s.value for s in expected))}")
            run.move(new)
            run.reason = reason or run.reason
            if new.terminal:
                run.finished_at = self.clock()

        run = self.update(run_id, change)
        return self.durable(run, f"end ({new.value})") if new.terminal else run

    def approve(self, run_id: str, *, user: str, face: str, user_groups: Iterable[str] = (),
                plan_version: int, plan_hash: str, policy: Policy,
                actor: str | None = None, recorded_as: str | None = None,
                check: Check | None = None, **details: Any) -> Run:
        """Record an approval and its audit entry; when it is the last one needed, queue
        the run — all in one EXEC. ``user`` is the person whose rights and per-hour count
        it uses; ``recorded_as`` and ``actor`` name the approval and its audit entry when
        that is not ``user`` (an unattended schedule); ``check`` may refuse it for one
        more reason, read in the same transaction. A refusal (the rules, a limit, a stale
        plan) is audited here, for every face (``face``: slack, cli, terminal, schedule),
        then raised."""
        groups = list(user_groups)

        def change(run: Run) -> list[Write]:
            now = self.clock()
            grant = approval_grant(run, user=user, user_groups=groups,
                                   plan_version=plan_version, plan_hash=plan_hash,
                                   policy=policy, now=now)
            if not isinstance(grant, Grant):
                raise ApprovalRefused(grant)
            problem = check(run) if check is not None else None
            if problem:
                raise ApprovalRefused(problem)
            self._not_locked_by_hand(run)
            glass, version = grant is Grant.BREAK_GLASS, policy_version(policy)
            counted = self.limits.counted(policy, run.service, run.scopes, run_id=run_id,
                                          user=user)
            run.approvals = [*live_approvals(run, policy, now=now),
                             Approval(user=recorded_as or user, via=face, at=now,
                                      plan_version=plan_version, plan_hash=plan_hash,
                                      break_glass=glass, policy=version)]
            audit = self.audit.write("approved", actor=actor or user, run_id=run_id,
                                     plan_id=run.plan_id, version=plan_version,
                                     hash=plan_hash, grant=grant.value, face=face,
                                     policy=version, **details)
            if approvals_needed(run, policy) > 0:
                return [counted, audit]  # counted first: over a limit, nothing is written
            run.move(RunStatus.APPROVED)
            run.move(RunStatus.QUEUED)
            return [counted, audit, self.queue.step(run_id)]

        try:
            run = self.durable(self.update(run_id, change), f"approval by {user}")
        except ApprovalRefused as exc:  # who was held back, and by which rule (its words)
            self.audit.refused("approve", actor=actor or user, face=face, rule=str(exc),
                               run_id=run_id, version=plan_version,
                               policy=policy_version(policy), **details)
            raise
        with tracing.span("deckhand.approval", {
                "deckhand.run.id": run_id, "deckhand.approver": user,
                "deckhand.approvals": len(run.approvals), "deckhand.run.status": run.status.value},
                parent=tracing.context_of(run.meta.get("traceparent"))):
            return run

    def _not_locked_by_hand(self, run: Run) -> None:
        """A person's lock on an environment the run changes refuses its approval (a freeze
        in all but name: nobody edits config). Break-glass does not lift it: ask the holder."""
        held = self.manual_locks and self.manual_locks.blocking(run.environments,
                                                                 service=run.service)
        if held:
            raise ApprovalRefused(held.refusal())

    def durable(self, run: Run, what: str) -> Run:
        """Wait for a replica to have ``run``'s last write; if none confirms in time, say so
        in the record (an operator reading it knows a failover may have lost that write)."""
        if self.replicate(f"{what} on run {run.id}"):
            return run
        return self.update(run.id, lambda r: r.meta.setdefault("unreplicated", [])
                           .append(what))

    def revise(self, run_id: str, plan: Plan, targets: PlanTargets, *,
               writes: Sequence[Write] = ()) -> Run:
        """Bind a waiting run to a new plan version; earlier approvals no longer count.
        ``writes`` go in the same EXEC (the revision's audit entry)."""
        def change(run: Run) -> list[Write]:
            run.move(RunStatus.AWAITING_APPROVAL)
            run.plan_version, run.plan_hash = plan.version, plan.hash
            run.approvals = []
            run.set_targets(targets)
            run.goal = plan.goal
            run.plan_versions.append(plan.version)
            run.modified_versions.append(plan.version)
            run.steps = {s.id: StepState(id=s.id) for s in plan.steps}
            run.rollback = {r.id: StepState(id=r.id) for r in plan.rollback}
            return list(writes)

        return self.update(run_id, change)

    def request_cancel(self, run_id: str, *, user: str, via: str | None = None,
                       stop_rollback: bool = True) -> Run:
        """Stop ``run_id`` for ``user``, once: cancel a waiting run at once (its queue entry
        goes with it, so the queue depth stays true), or ask the worker of a running one to
        stop it (``run:ID:cancel``, which the executor reads before anything new starts).

        One compare-and-set decides which request is the first; only that one is written,
        with its ``cancel_requested`` audit entry (``via``: the face) in the same EXEC. A
        later one raises AlreadyStopping (naming who stopped it), a finished run
        ApprovalRefused, and so does a run rolling back unless ``stop_rollback`` (the
        rollback goes on either way: nothing stops a rollback).
        """
        run_key, cancel_key = self.keys.run(run_id), self.keys.cancel(run_id)

        def attempt(pipe: Pipeline) -> Run:
            raw = pipe.get(run_key)
            if raw is None:
                raise NotFound(f"no run {run_id} — `deckhand runs` lists recent ones")
            run, first = Run.model_validate_json(raw), pipe.get(cancel_key)
            if first is not None:
                raise AlreadyStopping(f"run {run_id} is already stopping (stopped by "
                                      f"{text(first)}): its worker kills what runs and "
                                      f"rolls back", by=text(first))
            if run.status.terminal:
                raise ApprovalRefused(f"run {run_id} already ended ({run.status.value}); "
                                      f"there is nothing to stop")
            if run.status is RunStatus.ROLLING_BACK and not stop_rollback:
                raise ApprovalRefused(f"run {run_id} is already rolling back; there is "
                                      f"nothing left to stop")
            audit = self.audit.write("cancel_requested", actor=user, run_id=run_id,
                                     plan_id=run.plan_id, via=via)
            if run.status in (RunStatus.RUNNING, RunStatus.ROLLING_BACK):
                self.queue_writes(pipe, [lambda p: p.set(cancel_key, user), audit])
                pipe.execute()
                return run
            queued = run.status is RunStatus.QUEUED
            run.move(RunStatus.CANCELLED)
            run.reason = f"cancelled by {user}"
            run.finished_at = self.clock()
            self.queue_writes(pipe, [
                lambda p: p.set(run_key, run.record_json()),
                lambda p: index_open(p, self.keys, run),
                *(self.queue.unqueue(run_id) if queued else []), audit])
            pipe.execute()
            _ended_unexecuted(run)
            return run

        return self.cas([run_key, cancel_key], attempt, busy=f"run {run_id}")

    def cancel_requested(self, run_id: str) -> str | None:
        """Who stopped ``run_id`` (the first Stop), if anyone did while it runs."""
        with self.errors():
            who = self.r.get(self.keys.cancel(run_id))
        return who.decode() if who else None

    def request_pause(self, run_id: str, *, user: str, via: str,
                      writes: Sequence[Write] = ()) -> Run:
        """Ask the worker of a running run to hold it before its next step or rollout batch
        (its heartbeat relays this, as a cancel); ApprovalRefused unless it is running and
        not paused already. ``writes`` go in the same EXEC (its audit entry)."""
        run_key, key = self.keys.run(run_id), self.keys.pause(run_id)

        def attempt(pipe: Pipeline) -> Run:
            raw = pipe.get(run_key)
            if raw is None:
                raise NotFound(f"no run {run_id} — `deckhand runs` lists recent ones")
            run = Run.model_validate_json(raw)
            if run.status is not RunStatus.RUNNING:
                raise ApprovalRefused(_not_pausable(run))
            held = pipe.get(key)
            if held is not None:
                raise ApprovalRefused(f"run {run_id} is already paused by "
                                      f"{Pause.model_validate_json(held).by}; resume it to "
                                      f"carry on")
            pause = Pause(by=user, at=self.clock(), via=via).model_dump_json()
            self.queue_writes(pipe, [lambda p: p.set(key, pause), *writes])
            pipe.execute()
            return run

        return self.cas([run_key, key], attempt, busy=f"run {run_id}")

    def request_resume(self, run_id: str, *, writes: Sequence[Write] = ()) -> Pause:
        """Lift a run's pause (its worker carries on within a heartbeat): the pause lifted;
        ApprovalRefused if it is not paused. ``writes`` go in the same EXEC."""
        key = self.keys.pause(run_id)

        def attempt(pipe: Pipeline) -> Pause:
            held = pipe.get(key)
            if held is None:
                status = self.get(run_id).status
                ended = f" (it {status.value.replace('_', ' ')})" if status.terminal else ""
                raise ApprovalRefused(f"run {run_id} is not paused{ended}; there is nothing "
                                      f"to resume")
            self.queue_writes(pipe, [lambda p: p.delete(key), *writes])
            pipe.execute()
            return Pause.model_validate_json(held)

        return self.cas([key], attempt, busy=f"run {run_id}")

    def pause_requested(self, run_id: str) -> Pause | None:
        """The pause asked for ``run_id`` (held or about to be), or None."""
        with self.errors():
            raw = self.r.get(self.keys.pause(run_id))
        return Pause.model_validate_json(raw) if raw else None

    def controls(self, run_id: str) -> tuple[Pause | None, str | None]:
        """The pause and the stop asked for ``run_id`` (who stopped it), read at one moment
        in one round trip: what the executor looks at before anything new starts."""
        with self.errors(), self.r.pipeline(transaction=False) as pipe:
            pipe.get(self.keys.pause(run_id))
            pipe.get(self.keys.cancel(run_id))
            paused, stopped = pipe.execute()
        return (Pause.model_validate_json(paused) if paused else None,
                text(stopped) if stopped else None)


def _ended_unexecuted(run: Run) -> None:
    """A run that ends here without having executed (rejected, expired, cancelled while
    waiting) ends its request's trace too; an executed one's executor ends it."""
    if tracing.ATTEMPT not in run.meta:
        tracing.request_ended(run.meta.get(tracing.ROOT), status=run.status.value, ok=False,
                              why=run.status.value, run_id=run.id, service=run.service)


def _not_pausable(run: Run) -> str:
    """Why ``run`` cannot be paused, for the one who asked."""
    state = run.status.value.replace("_", " ")
    if run.status.terminal:
        return f"run {run.id} already ended ({state}); there is nothing to pause"
    if run.status is RunStatus.ROLLING_BACK:
        return f"run {run.id} is rolling back; a rollback is never paused"
    return f"run {run.id} is {state}, not running; only a running run can be paused"


def journal_field(change: HostChange) -> str:
    """The host journal's field for a change: one per phase, step and host."""
    return f"{change.phase.value}/{change.step}/{change.result.host}"


def with_journal(run: Run, journal: Mapping[bytes | str, bytes | str] | None) -> Run:
    """``run`` with the changes of its host journal that are newer than it folded in."""
    base = run.seq
    changes = [HostChange.model_validate_json(raw) for raw in (journal or {}).values()]
    for change in sorted(changes, key=lambda c: c.seq):
        if change.seq > base:
            run.apply_host_change(change)
    return run


def index_open(pipe: Pipeline, keys: Keys, run: Run) -> None:
    """Keep the index of open runs in step with a run record written in the same MULTI."""
    if run.status.terminal:
        pipe.zrem(keys.runs_open(), run.id)
    else:
        pipe.zadd(keys.runs_open(), {run.id: run.created_at})

