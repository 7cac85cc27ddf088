"""Runs schedules with APScheduler 3, exactly once per occurrence across replicas.

Every replica runs a Scheduler. Each keeps its own BackgroundScheduler with an in-memory
job store (APScheduler's docs: a job store must not be shared between schedulers), rebuilt
from Redis on start and whenever ``schedules:version`` moves (checked every ``sync_every``
seconds, or at once through ``reload()``). APScheduler only wakes the process up at the
right moment; what fires is decided by ``fire_due(now)`` from Redis state, and a Redis
claim per (schedule, fire time) lets exactly one replica handle each occurrence, under a
lease: if that replica dies while handling it, another takes it over once, with the same
idempotency key, or records it missed (``agents.schedules.keys``). Fire times,
DST rules and the missed-occurrence policy are those of ``agents.schedules.model``.

Tests drive ``tick(now)`` / ``fire_due(now)`` with a controlled clock; nothing sleeps.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.base import BaseTrigger

from agents.engine.occurrences import Occurrence, run_occurrence
from agents.errors import NotFound, ScheduleError, StoreError
from agents.schedules.keys import DEFAULT_LEASE, Heartbeat, OccurrenceState, OccurrenceStatus
from agents.schedules.model import (
    DEFAULT_GRACE,
    Due,
    Schedule,
    claim_ttl,
    utc_now,
)
from agents.services import Services
from agents.store import AuditLog, ScheduleBook

log = logging.getLogger("deckhand.scheduler")

OnOccurrence = Callable[[Schedule, datetime], None]
"""Called once per occurrence, on exactly one replica: (the schedule, its fire time)."""
OnMissed = Callable[[Schedule, datetime], None]
"""Called when occurrences older than the grace time were dropped: (schedule, first one)."""
JOBS = "schedules"  # the job store alias holding one job per active schedule


@dataclass(frozen=True)
class Fired:
    """One occurrence this replica claimed and handed to ``on_occurrence``."""

    schedule: Schedule
    fire_time: datetime
    coalesced: int = 0


class Scheduler:
    """Fires due schedules; start one per bot replica (or ``deckhand schedules serve``)."""

    def __init__(self, *, schedules: ScheduleBook, audit: AuditLog,
                 on_occurrence: OnOccurrence, on_missed: OnMissed | None = None,
                 grace: timedelta = DEFAULT_GRACE, clock: Callable[[], datetime] = utc_now,
                 name: str | None = None, sync_every: float = 10.0,
                 lease: timedelta = DEFAULT_LEASE):
        self.book, self.audit = schedules, audit
        self.on_occurrence = on_occurrence
        self.on_missed = on_missed
        self.grace = grace
        self.clock = clock
        self.name = name or f"scheduler-{socket.gethostname()}-{os.getpid()}"
        self.sync_every = sync_every
        self.lease = lease
        """How long a claimed occurrence may go without its claimer's heartbeat before
        another replica takes it over (``agents.schedules.keys``)."""
        self._aps: BackgroundScheduler | None = None
        self._version: int | None = None
        self._reload_lock = threading.Lock()

    @classmethod
    def for_services(cls, services: Services, *,
                     report: Callable[[Occurrence], None] | None = None,
                     on_missed: OnMissed | None = None, **options: Any) -> Scheduler:
        """The scheduler a bot replica runs: the default occurrence handler feeding ``report``,
        the grace time from ``DECKHAND_SCHEDULE_GRACE``."""
        options.setdefault("grace", timedelta(seconds=services.settings.schedule_grace))
        options.setdefault("lease", timedelta(seconds=services.settings.schedule_lease))
        store = services.store
        return cls(schedules=store.schedules, audit=store.audit,
                   on_occurrence=occurrence_handler(services, report), on_missed=on_missed,
                   **options)

    # -- the core, driven by a clock ---------------------------------------------------------

    def tick(self, now: datetime) -> list[Fired]:
        """Pick up schedule changes, then fire whatever is due at ``now``."""
        self.sync()
        return self.fire_due(now)

    def fire_due(self, now: datetime) -> list[Fired]:
        """Fire every schedule due at ``now`` that this replica wins the claim for, then take
        over the occurrences whose claimer stopped while handling them."""
        fired = [self._fire_checked(schedule, now) for schedule in self.book.all()]
        return [f for f in fired if f is not None] + self.recover(now)

    def _fire_checked(self, schedule: Schedule, now: datetime) -> Fired | None:
        try:
            return self._fire(schedule, now)
        except ScheduleError as exc:  # e.g. its time zone left tzdata: the others still fire
            log.error("schedule %s cannot fire: %s", schedule.id, exc)
            return None

    def fire_schedule(self, schedule_id: str, now: datetime) -> Fired | None:
        """Fire one schedule if it is due at ``now`` (and this replica wins the claim)."""
        try:
            return self._fire(self.book.get(schedule_id), now)
        except NotFound:
            return None

    def _fire(self, schedule: Schedule, now: datetime) -> Fired | None:
        due = schedule.due(now, grace=self.grace)
        if due is None:
            return None
        if due.missed_since is not None:
            self._missed(schedule, due, now)
        if due.fire_time is None:
            return None
        if not self.book.claim_occurrence(schedule.id, due.fire_time, owner=self.name,
                                          lease=self.lease, ttl=claim_ttl(self.grace)):
            return None  # another replica has this occurrence
        current = self.book.mark_fired(schedule.id, due.fire_time, due.coalesced)
        if current is None:  # removed in the meantime
            self.book.settle_occurrence(schedule.id, due.fire_time, owner=self.name,
                                        status=OccurrenceStatus.DONE, note="schedule removed")
            return None
        self.audit.record("schedule_fired", actor=self.name, schedule=schedule.id,
                          fire_time=due.fire_time.isoformat(), coalesced=due.coalesced)
        self._hand_over(current, due.fire_time)
        return Fired(current, due.fire_time, due.coalesced)

    def recover(self, now: datetime) -> list[Fired]:
        """Take over (once) each occurrence whose claimer's lease lapsed, or record it
        missed with the reason; the ones this replica took over and handled."""
        fired = []
        for schedule_id, fire_time in self.book.abandoned_occurrences():
            too_old = (f"the occurrence is older than the grace time "
                       f"({self.grace.total_seconds():g}s)") if now - fire_time > self.grace \
                else None
            state = self.book.take_over(schedule_id, fire_time, owner=self.name,
                                        lease=self.lease, too_old=too_old)
            if state is None:
                continue  # another replica got there first, or it was settled meanwhile
            schedule = self._recorded(state)
            if schedule is not None and state.status is OccurrenceStatus.PLANNING:
                self._hand_over(schedule, fire_time)
                fired.append(Fired(schedule, fire_time))
        return fired

    def _recorded(self, state: OccurrenceState) -> Schedule | None:
        """Audit and flag a takeover or a miss; the schedule (None if it was removed)."""
        missed = state.status is OccurrenceStatus.MISSED
        log.warning("schedule %s, occurrence %s: %s", state.schedule,
                    state.fire_time.isoformat(), state.note)
        self.audit.record("schedule_missed" if missed else "schedule_taken_over",
                          actor=self.name, schedule=state.schedule,
                          fire_time=state.fire_time.isoformat(), attempt=state.attempt,
                          previous_owner=state.previous_owner, reason=state.note)
        try:
            schedule = self.book.get(state.schedule)
        except NotFound:
            return None
        self.book.flag(schedule.id, last_problem=f"{schedule.local(state.fire_time)}: "
                                                 f"{state.note}")
        if not missed:
            return schedule
        if self.on_missed is not None:
            self._guarded(self.on_missed, schedule, state.fire_time)
        return None

    def _missed(self, schedule: Schedule, due: Due, now: datetime) -> None:
        first = due.missed_since
        assert first is not None  # noqa: S101 - checked by the caller
        if due.fire_time is None:
            self.book.rearm(schedule.id, now)
        if not self.book.claim(schedule.id, first, owner=self.name,
                               ttl=claim_ttl(self.grace), kind="missed"):
            return
        log.warning("schedule %s missed occurrences from %s (older than the grace time)",
                    schedule.id, schedule.local(first))
        self.audit.record("schedule_missed", actor=self.name, schedule=schedule.id,
                          since=first.isoformat(), grace=self.grace.total_seconds())
        if self.on_missed is not None:
            self._guarded(self.on_missed, schedule, first)

    def _hand_over(self, schedule: Schedule, fire_time: datetime) -> None:
        """Handle the occurrence under a renewed lease, then settle it."""
        def renew() -> bool:
            return self.book.renew_lease(schedule.id, fire_time, owner=self.name,
                                         lease=self.lease)

        with Heartbeat(renew, self.lease, what=f"{schedule.id}@{fire_time.isoformat()}"):
            error = self._guarded(self.on_occurrence, schedule, fire_time)
        note = f"handling failed: {error!r}" if error is not None else None
        self.book.settle_occurrence(schedule.id, fire_time, owner=self.name, note=note,
                                    status=OccurrenceStatus.FAILED if note
                                    else OccurrenceStatus.DONE)
        if note:
            self.book.flag(schedule.id, last_problem=f"{schedule.local(fire_time)}: {note}")

    def _guarded(self, callback: Callable[[Schedule, datetime], None], schedule: Schedule,
                 when: datetime) -> Exception | None:
        # One schedule's failing callback must not stop the others from firing: log it
        # with its traceback and carry on (the occurrence is settled as failed, and shown).
        try:
            callback(schedule, when)
        except Exception as exc:
            log.exception("schedule %s: handling the occurrence at %s failed",
                          schedule.id, when.isoformat())
            return exc
        return None

    # -- APScheduler -------------------------------------------------------------------------

    def start(self) -> None:
        """Build the jobs from Redis, catch up on what was missed, and start waking up."""
        self._aps = BackgroundScheduler(timezone=UTC, jobstores={"default": MemoryJobStore(),
                                                                 JOBS: MemoryJobStore()})
        self._aps.add_job(self._sync_job, "interval", seconds=self.sync_every, id="sync",
                          max_instances=1, coalesce=True)
        self._aps.start()
        self.reload()
        self.fire_due(self.clock())
        log.info("scheduler %s started with %d schedule(s)", self.name, len(self.jobs()))

    def shutdown(self) -> None:
        if self._aps is not None:
            self._aps.shutdown(wait=True)
            self._aps = None

    def sync(self) -> bool:
        """Rebuild the jobs if any replica changed a schedule; True if it did."""
        version = self.book.version()
        if version == self._version:
            return False
        self.reload()
        return True

    def reload(self) -> None:
        """Rebuild the jobs from Redis (call after a schedule command in this process)."""
        with self._reload_lock:
            self._version = self.book.version()
            schedules = [s for s in self.book.all() if not s.paused]
            if self._aps is None:
                return
            self._aps.remove_all_jobs(jobstore=JOBS)
            for schedule in schedules:
                self._aps.add_job(self._wake, ScheduleTrigger(schedule), args=[schedule.id],
                                  id=schedule.id, jobstore=JOBS, max_instances=1,
                                  coalesce=True, misfire_grace_time=None)

    def jobs(self) -> dict[str, datetime | None]:
        """APScheduler's view: schedule id → next wake-up (UTC)."""
        if self._aps is None:
            return {}
        return {job.id: job.next_run_time for job in self._aps.get_jobs(jobstore=JOBS)}

    def _wake(self, schedule_id: str) -> None:
        try:
            self.fire_schedule(schedule_id, self.clock())
        except StoreError as exc:  # Redis down: the sync job catches up within the grace
            log.error("scheduler %s: %s", self.name, exc)

    def _sync_job(self) -> None:
        try:
            self.tick(self.clock())
        except StoreError as exc:
            log.error("scheduler %s: %s", self.name, exc)


class ScheduleTrigger(BaseTrigger):  # type: ignore[misc]  # APScheduler 3 is untyped
    """An APScheduler trigger that wakes at a schedule's DST-correct fire times."""

    def __init__(self, schedule: Schedule):
        self.schedule = schedule

    def get_next_fire_time(self, previous_fire_time: datetime | None,
                           now: datetime) -> datetime | None:
        after = previous_fire_time or now - timedelta(microseconds=1)
        return self.schedule.rule.next_after(after, self.schedule.zone)

    def __str__(self) -> str:
        return f"schedule[{self.schedule.cron} {self.schedule.timezone}]"


def occurrence_handler(services: Services,
                       report: Callable[[Occurrence], None] | None = None) -> OnOccurrence:
    """The default ``on_occurrence``: plan, store and maybe queue, then ``report`` the result.

    Args:
        services: the shared services.
        report: receives each Occurrence (the Slack bot posts it to ``occurrence.channel``);
            by default the message is logged.
    """
    def handle(schedule: Schedule, fire_time: datetime) -> None:
        occurrence = run_occurrence(services, schedule, fire_time)
        (report or _log_occurrence)(occurrence)

    return handle


def _log_occurrence(occurrence: Occurrence) -> None:
    log.info("%s", occurrence.message)
