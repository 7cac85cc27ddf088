"""What happens at a schedule's occurrence: plan afresh, store, and post or run unattended.

Every occurrence plans the schedule's request again (requested by ``schedule:ID``), stores
the plan and a Run awaiting approval, exactly like a typed request. An ``--auto`` schedule's
run is approved and queued without a click only when the policy of every environment it
touches allows unattended runs, its creator may still approve there, and the new plan hashes
the same as the plan approved at creation; otherwise it waits for approval and the result
carries the difference.

Locked environments follow the environment's ``lock`` policy, as the worker does:
``refuse`` skips the occurrence (no plan is stored, no run created) and says who holds the
lock; ``wait`` delays it: the run is created as usual and, once queued, waits behind the
lock in the worker's queue.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from agents.engine.desk import RunDesk
from agents.errors import ApprovalRefused, NotFound, PlanError, PlanInvalid, ServiceUnknown
from agents.faces import Face
from agents.plan.diff import PlanDiff, diff_plans
from agents.plan.model import Plan
from agents.run.record import Run
from agents.schedules.keys import occurrence_key, occurrence_run_id
from agents.schedules.model import Schedule
from agents.services import Services
from agents.store import LockInfo, Store


class Outcome(StrEnum):
    AWAITING_APPROVAL = "awaiting_approval"
    """Posted for approval (a plain schedule, or an --auto one that may not run alone)."""
    QUEUED = "queued"
    """--auto: unchanged plan, approved by the schedule and queued for a worker."""
    SKIPPED_LOCKED = "skipped_locked"
    """An environment was locked and its policy refuses to wait: nothing was created."""
    PLAN_FAILED = "plan_failed"
    """The request could not be planned this time: nothing was created."""
    ALREADY_STORED = "already_stored"
    """An earlier attempt at this occurrence (a replica that then stopped) stored its run."""


@dataclass(frozen=True)
class Occurrence:
    """The result of one occurrence, for the front end to render and post.

    Attributes:
        schedule: the schedule as it was when it fired.
        fire_time: the occurrence (UTC); for ``run ID``, the moment it was asked.
        outcome: what happened.
        message: one line for the schedule's channel.
        plan: the new plan (None only when planning failed; a skipped occurrence keeps the
            plan it would have run, unstored).
        run: the run created (None when skipped or planning failed).
        diff: for --auto, how the plan differs from the one approved at creation.
        lock: the lock that skipped or delays this occurrence.
        manual: fired by ``run ID`` rather than by the clock.
    """

    schedule: Schedule
    fire_time: datetime
    outcome: Outcome
    message: str
    plan: Plan | None = None
    run: Run | None = None
    diff: PlanDiff | None = None
    lock: LockInfo | None = None
    manual: bool = False

    @property
    def channel(self) -> str | None:
        return self.schedule.channel

    @property
    def delayed(self) -> bool:
        """A run was created but will wait for another run's lock."""
        return self.lock is not None and self.run is not None


def run_occurrence(services: Services, schedule: Schedule, fire_time: datetime, *,
                   manual: bool = False) -> Occurrence:
    """Plan and store one occurrence of ``schedule``; for --auto, queue it if allowed.

    Args:
        services: the shared services (planner, config, store).
        schedule: the schedule that fired.
        fire_time: the occurrence being handled.
        manual: True for ``run ID`` (fire now).

    Returns:
        What happened, with the plan, run and message to post.
    """
    # The whole Store (through services): one occurrence walks its nouns in turn (schedules,
    # locks, plans, audit); the run's verbs are the desk's (agents.engine.desk).
    done = _Done(services.store, schedule, fire_time, manual)
    book = services.store.schedules
    try:  # planned, stored and approved under its own service's config
        services = services.for_record(schedule.service, what=f"schedule {schedule.id}")
        plan = services.make_plan(schedule.request, requested_by=schedule.requester,
                              face="schedule")
    except (PlanError, ServiceUnknown) as exc:  # unknown: never under another's config
        book.flag(schedule.id, plan_problem=f"{schedule.local(fire_time)}: {exc}")
        return done(Outcome.PLAN_FAILED, f"could not plan {schedule.request!r}: {exc}")
    book.flag(schedule.id, plan_problem=None)
    targets = services.targets(plan)
    envs = targets.environments
    lock = _held_lock(services.store, plan.service, envs)
    if lock is not None and services.config.policy.strictest(targets.scopes).lock == "refuse":
        return done(Outcome.SKIPPED_LOCKED, f"skipped: {lock.describe()}, and policy does not "
                    f"queue behind it", plan=plan, lock=lock)
    try:
        run, created = _store_run(RunDesk(services), schedule, plan, fire_time, manual)
    except PlanInvalid as exc:  # nobody could complete its approvals: refused, audited
        return done(Outcome.PLAN_FAILED, f"could not plan {schedule.request!r}: {exc}",
                    plan=plan)
    if not created:
        return done(Outcome.ALREADY_STORED, f"run {run.id} for this occurrence was stored by "
                    f"an earlier attempt; it is {run.status.value}",
                    plan=services.store.plans.get(run.plan_id, run.plan_version), run=run)
    if schedule.auto:
        return _unattended(services, done, plan, run, lock)
    return done(Outcome.AWAITING_APPROVAL, f"{plan.goal}: plan ready for approval"
                f"{_lock_note(lock)}", plan=plan, run=run, lock=lock)


class _Done:
    """Builds the Occurrence and audits it, so every outcome is recorded the same way."""

    def __init__(self, store: Store, schedule: Schedule, fire_time: datetime, manual: bool):
        self.store, self.schedule, self.fire_time, self.manual = store, schedule, fire_time, manual

    def __call__(self, outcome: Outcome, text: str, **parts: Any) -> Occurrence:
        when = "run now" if self.manual else self.schedule.local(self.fire_time)
        where = f"{self.schedule.spec}, {when}{self._stands_for}"
        message = f"Schedule {self.schedule.id} ({where}): {text}"
        occurrence = Occurrence(self.schedule, self.fire_time, outcome, message,
                                manual=self.manual, **parts)
        run, plan = occurrence.run, occurrence.plan
        self.store.audit.record(f"schedule_{outcome.value}", actor=self.schedule.requester,
                                run_id=run.id if run else None, plan_id=plan.id if plan else None,
                                schedule=self.schedule.id, fire_time=self.fire_time.isoformat(),
                                manual=self.manual, message=message)
        return occurrence

    @property
    def _stands_for(self) -> str:
        """How many occurrences a coalesced firing stands for (missed ones folded into it)."""
        schedule, count = self.schedule, self.schedule.last_coalesced
        if self.manual or count <= 0 or schedule.last_fire != self.fire_time:
            return ""
        return f"; stands for {count + 1} occurrences, {count} missed one(s) coalesced into it"


def _held_lock(store: Store, service: str | None,
               environments: Iterable[str]) -> LockInfo | None:
    held = store.locks.of(service)
    return next((held[env] for env in environments if env in held), None)


def _lock_note(lock: LockInfo | None) -> str:
    if lock is None:
        return ""
    return f" — {lock.describe()}; once approved it waits for that run to finish"


def _store_run(desk: RunDesk, schedule: Schedule, plan: Plan, fire_time: datetime,
               manual: bool) -> tuple[Run, bool]:
    """The occurrence's run, and whether this call stored it: a clock-fired occurrence's
    run id comes from its idempotency key, so every attempt at it stores one run."""
    meta = {"schedule": schedule.id, "fire_time": fire_time.isoformat(), "manual": manual,
            "occurrence": occurrence_key(schedule.id, fire_time)}
    said: dict[str, Any] = {"user": schedule.requester, "face": Face.SCHEDULE, "meta": meta,
            "request": schedule.request, "schedule": schedule.id}
    if manual:
        return desk.propose(plan, **said), True
    return desk.propose_once(plan, run_id=occurrence_run_id(schedule.id, fire_time), **said)


# -- unattended (--auto) -----------------------------------------------------------------


def _unattended(services: Services, done: _Done, plan: Plan, run: Run,
                lock: LockInfo | None) -> Occurrence:
    schedule = done.schedule
    if plan.hash != schedule.approved_plan_hash:
        diff = _diff_from_approved(services.store, schedule, plan)
        what = _describe(diff) if diff else "the approved plan is no longer stored"
        return done(Outcome.AWAITING_APPROVAL, f"{plan.goal}: the plan changed since "
                    f"{schedule.created_by} approved it at creation ({what}); approve it to run",
                    plan=plan, run=run, diff=diff, lock=lock)
    try:  # as a person's approval: the run's hosts, the creator's count, audited
        queued = RunDesk(services).approve_unattended(run.id, schedule=schedule, plan=plan)
    except ApprovalRefused as exc:
        return done(Outcome.AWAITING_APPROVAL, f"{plan.goal}: not run unattended ({exc}); "
                    f"approve it to run", plan=plan, run=run, lock=lock)
    wait = f" — {lock.describe()}; it starts when that run finishes" if lock else ""
    return done(Outcome.QUEUED, f"{plan.goal}: unchanged since approved by "
                f"{schedule.created_by} at creation; queued without a click{wait}",
                plan=plan, run=queued, lock=lock)


def _describe(diff: PlanDiff) -> str:
    """One line: what changed, by step id (``changed: a; added: b``)."""
    changed = [c.id for c in (*diff.changed, *diff.rollback_changed)]
    added = [s.id for s in diff.added] + [r.id for r in diff.rollback_added]
    removed = [s.id for s in diff.removed] + [r.id for r in diff.rollback_removed]
    groups = (("changed", changed), ("added", added), ("removed", removed))
    parts = [f"{name}: {', '.join(ids)}" for name, ids in groups if ids]
    if diff.goal:
        parts.insert(0, f"goal: {diff.goal[0]!r} → {diff.goal[1]!r}")
    return "; ".join(parts) or "same steps, different order"


def _diff_from_approved(store: Store, schedule: Schedule, plan: Plan) -> PlanDiff | None:
    if schedule.approved_plan_id is None:
        return None
    try:
        return diff_plans(store.plans.get(schedule.approved_plan_id), plan)
    except NotFound:
        return None
