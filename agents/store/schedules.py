"""Schedules in Redis: one JSON record per schedule, an index by creation, a version that
replicas watch to rebuild their jobs, and per-fire-time claims (see ``agents.schedules.model``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import cast

from redis.client import Pipeline

from agents.errors import AmbiguousId, NotFound
from agents.ids import normalize
from agents.schedules.keys import ATTEMPTS, OccurrenceState, OccurrenceStatus
from agents.schedules.model import Schedule
from agents.store._redis import Part, Write

ScheduleChange = Callable[[Schedule], None]
"""Edits a schedule in place; raise ``Unchanged`` to write nothing."""


class Unchanged(Exception):  # noqa: N818 - a control signal, not an error
    """Raised by a change to leave the schedule as it is."""


class ScheduleBook(Part):
    """The store's ``schedules``: records, their index and occurrence claims. Every write
    is atomic."""

    def create(self, schedule: Schedule) -> Schedule:
        """Store and index a new schedule, all or nothing; a taken id is replaced in place."""
        schedule.id = self.create_unique(
            "sch", schedule.id, lambda schedule_id: [self.keys.schedule(schedule_id)],
            lambda pipe, schedule_id: self._write_new(pipe, schedule, schedule_id))
        return schedule

    def _write_new(self, pipe: Pipeline, schedule: Schedule, schedule_id: str) -> bool:
        key = self.keys.schedule(schedule_id)
        if pipe.exists(key):
            return False
        pipe.multi()
        pipe.set(key, schedule.model_copy(update={"id": schedule_id}).model_dump_json())
        pipe.zadd(self.keys.schedules(), {schedule_id: schedule.created_at.timestamp()})
        pipe.incr(self.keys.schedules_version())
        pipe.execute()
        return True

    def get(self, schedule_id: str) -> Schedule:
        with self.errors():
            raw = self.r.get(self.keys.schedule(schedule_id))
        if raw is None:
            raise NotFound(f"no schedule {schedule_id} — `schedules list` shows them")
        return Schedule.model_validate_json(raw)

    def find(self, typed: str) -> Schedule:
        """The schedule a person means by ``typed``: a whole id or a unique prefix of one
        (schedules are few, so the prefix is matched against all of them)."""
        wanted = normalize("sch", typed)
        with contextlib.suppress(NotFound):
            return self.get(wanted)
        matches = [s for s in self.all() if s.id.startswith(wanted)]
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise AmbiguousId(f"{typed.strip()} could be any of "
                              f"{', '.join(s.id for s in matches)}; type more of the id")
        raise NotFound(f"no schedule {typed.strip()} — `schedules list` shows them")

    def all(self) -> list[Schedule]:
        """Every schedule, oldest first."""
        with self.errors():
            ids = cast(list[bytes], self.r.zrange(self.keys.schedules(), 0, -1))
            raws = self.r.mget([self.keys.schedule(i.decode()) for i in ids]) if ids else []
        return [Schedule.model_validate_json(raw) for raw in raws if raw]

    def version(self) -> int:
        """Bumped by every change; replicas compare it to know when to rebuild."""
        with self.errors():
            return int(self.r.get(self.keys.schedules_version()) or 0)

    def update(self, schedule_id: str, change: ScheduleChange) -> Schedule | None:
        """Apply ``change`` atomically (compare-and-set); None if it raised Unchanged."""
        def changed(schedule: Schedule) -> list[Write]:
            change(schedule)
            return [lambda pipe: pipe.incr(self.keys.schedules_version())]

        try:
            return self.update_record(
                self.keys.schedule(schedule_id), Schedule, changed,
                missing=f"no schedule {schedule_id} — `schedules list` shows them")
        except Unchanged:
            return None

    def remove(self, schedule_id: str) -> Schedule:
        """Delete a schedule and its index entry together (NotFound if there is none)."""
        key = self.keys.schedule(schedule_id)

        def attempt(pipe: Pipeline) -> Schedule:
            raw = pipe.get(key)
            if raw is None:
                raise NotFound(f"no schedule {schedule_id} — `schedules list` shows them")
            pipe.multi()
            pipe.delete(key)
            pipe.zrem(self.keys.schedules(), schedule_id)
            pipe.incr(self.keys.schedules_version())
            pipe.execute()
            return Schedule.model_validate_json(raw)

        return self.cas([key], attempt, busy=f"schedule {schedule_id}")

    def claim(self, schedule_id: str, fire_time: datetime, *, owner: str,
              ttl: timedelta, kind: str = "fired") -> bool:
        """True for exactly one caller per (schedule, fire time, kind), across replicas."""
        key = self.keys.schedule_claim(schedule_id, kind, fire_time.astimezone(UTC).isoformat())
        with self.errors():
            return bool(self.r.set(key, owner, nx=True, px=int(ttl.total_seconds() * 1000)))

    def mark_fired(self, schedule_id: str, fire_time: datetime, coalesced: int) -> Schedule | None:
        """Record a firing (never moves ``armed_at`` back); None if the schedule is gone."""
        def change(schedule: Schedule) -> None:
            schedule.armed_at = max(schedule.armed_at, fire_time)
            schedule.last_fire = max(schedule.last_fire or fire_time, fire_time)
            schedule.last_coalesced = coalesced
            schedule.fires += 1

        try:
            return self.update(schedule_id, change)
        except NotFound:
            return None

    def rearm(self, schedule_id: str, now: datetime) -> None:
        """Skip everything up to ``now`` (missed beyond the grace time)."""
        def change(schedule: Schedule) -> None:
            if schedule.armed_at >= now:
                raise Unchanged
            schedule.armed_at = now

        with contextlib.suppress(NotFound):  # removed meanwhile: nothing to re-arm
            self.update(schedule_id, change)

    # -- occurrence leases (see agents.schedules.keys) -------------------------------------------

    def claim_occurrence(self, schedule_id: str, fire_time: datetime, *, owner: str,
                         lease: timedelta, ttl: timedelta) -> bool:
        """Claim an occurrence (True for exactly one caller, across replicas) and, in the
        same transaction, record it as being handled by ``owner`` under a lease."""
        iso = _iso(fire_time)
        claim = self.keys.schedule_claim(schedule_id, "fired", iso)
        state = OccurrenceState(schedule=schedule_id, fire_time=fire_time, owner=owner)

        def attempt(pipe: Pipeline) -> bool:
            if pipe.exists(claim):
                return False
            pipe.multi()
            pipe.set(claim, owner, px=_ms(ttl))
            pipe.set(self.keys.schedule_claim(schedule_id, "occurrence", iso),
                     state.model_dump_json(), px=_ms(ttl))
            pipe.set(self.keys.schedule_claim(schedule_id, "lease", iso), owner, px=_ms(lease))
            pipe.zadd(self.keys.schedules_open(), {f"{schedule_id} {iso}": fire_time.timestamp()})
            pipe.execute()
            return True

        return self.cas([claim], attempt, busy=f"occurrence {schedule_id} {iso}")

    def renew_lease(self, schedule_id: str, fire_time: datetime, *, owner: str,
                    lease: timedelta) -> bool:
        """Extend ``owner``'s lease; False if it is not (or no longer) theirs."""
        key = self.keys.schedule_claim(schedule_id, "lease", _iso(fire_time))

        def attempt(pipe: Pipeline) -> bool:
            if pipe.get(key) != owner.encode():
                return False
            pipe.multi()
            pipe.pexpire(key, _ms(lease))
            pipe.execute()
            return True

        return self.cas([key], attempt, busy=f"lease {key}")

    def occurrence(self, schedule_id: str, fire_time: datetime) -> OccurrenceState | None:
        with self.errors():
            raw = self.r.get(self.keys.schedule_claim(schedule_id, "occurrence", _iso(fire_time)))
        return OccurrenceState.model_validate_json(raw) if raw else None

    def settle_occurrence(self, schedule_id: str, fire_time: datetime, *, owner: str,
                          status: OccurrenceStatus, note: str | None = None) -> bool:
        """End ``owner``'s attempt; False (nothing written) if another replica holds it."""
        iso = _iso(fire_time)
        key = self.keys.schedule_claim(schedule_id, "occurrence", iso)

        def attempt(pipe: Pipeline) -> bool:
            raw = pipe.get(key)
            state = OccurrenceState.model_validate_json(raw) if raw else None
            if state is None or state.owner != owner or \
                    state.status is not OccurrenceStatus.PLANNING:
                return False
            state.status, state.note = status, note or state.note
            self._close(pipe, key, state, iso)
            return True

        return self.cas([key], attempt, busy=f"occurrence {schedule_id} {iso}")

    def abandoned_occurrences(self) -> list[tuple[str, datetime]]:
        """Open occurrences whose lease has lapsed (their claimer stopped)."""
        with self.errors():
            raw = cast(list[bytes], self.r.zrange(self.keys.schedules_open(), 0, -1))
            open_ = [tuple(m.decode().split(" ", 1)) for m in raw]
            held = [self.r.exists(self.keys.schedule_claim(sid, "lease", iso))
                    for sid, iso in open_]
        return [(sid, datetime.fromisoformat(iso))
                for (sid, iso), leased in zip(open_, held, strict=True) if not leased]

    def take_over(self, schedule_id: str, fire_time: datetime, *, owner: str,
                  lease: timedelta, too_old: str | None = None) -> OccurrenceState | None:
        """Take an abandoned occurrence (status PLANNING, ``owner`` now holds the lease), or
        record it MISSED when it may not be taken (``too_old``: why; or no attempt left);
        None when another replica got there first or its claimer still holds it."""
        iso = _iso(fire_time)
        key = self.keys.schedule_claim(schedule_id, "occurrence", iso)
        lease_key = self.keys.schedule_claim(schedule_id, "lease", iso)

        def attempt(pipe: Pipeline) -> OccurrenceState | None:
            raw = pipe.get(key)
            if pipe.exists(lease_key):
                return None
            state = OccurrenceState.model_validate_json(raw) if raw else None
            if state is None or state.status is not OccurrenceStatus.PLANNING:
                pipe.multi()
                pipe.zrem(self.keys.schedules_open(), f"{schedule_id} {iso}")
                pipe.execute()
                return None
            lost = f"{state.owner} stopped while handling it (its lease lapsed)"
            if too_old or state.attempt >= ATTEMPTS:
                state.status = OccurrenceStatus.MISSED
                state.note = f"missed: {lost}, and " + (
                    too_old or f"{state.attempt} attempt(s) were made; none is left")
                self._close(pipe, key, state, iso)
                return state
            state.previous_owner, state.owner = state.owner, owner
            state.attempt += 1
            state.note = f"taken over by {owner}: {lost}"
            pipe.multi()
            pipe.set(key, state.model_dump_json(), keepttl=True)
            pipe.set(lease_key, owner, px=_ms(lease))
            pipe.execute()
            return state

        return self.cas([key, lease_key], attempt, busy=f"occurrence {schedule_id} {iso}")

    def _close(self, pipe: Pipeline, key: str, state: OccurrenceState, iso: str) -> None:
        pipe.multi()
        pipe.set(key, state.model_dump_json(), keepttl=True)
        pipe.delete(self.keys.schedule_claim(state.schedule, "lease", iso))
        pipe.zrem(self.keys.schedules_open(), f"{state.schedule} {iso}")
        pipe.execute()

    def flag(self, schedule_id: str, **fields: str | None) -> None:
        """Set what ``schedules list`` flags on a schedule (``last_problem``,
        ``plan_problem``; None clears); nothing is written when nothing changes."""
        def change(schedule: Schedule) -> None:
            if all(getattr(schedule, k) == v for k, v in fields.items()):
                raise Unchanged
            for name, value in fields.items():
                setattr(schedule, name, value)

        with contextlib.suppress(NotFound):
            self.update(schedule_id, change)


def _iso(fire_time: datetime) -> str:
    return fire_time.astimezone(UTC).isoformat()


def _ms(span: timedelta) -> int:
    return max(1, int(span.total_seconds() * 1000))
