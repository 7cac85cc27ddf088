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
from agents.schedules.model import Schedule
from agents.store._redis import RedisBase, Write

ScheduleChange = Callable[[Schedule], None]
"""Edits a schedule in place; raise ``Unchanged`` to write nothing."""


class Unchanged(Exception):  # noqa: N818 - a control signal, not an error
    """Raised by a change to leave the schedule as it is."""


class ScheduleBook:
    """Schedules through a store's client, keys and helpers. Every write is atomic."""

    def __init__(self, store: RedisBase):
        self.store = store
        self.r = store.r
        self.keys = store.keys

    def create(self, schedule: Schedule) -> Schedule:
        """Store and index a new schedule, all or nothing; a taken id is replaced in place."""
        schedule.id = self.store.create_unique(
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
        with self.store.errors():
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
        with self.store.errors():
            ids = cast(list[bytes], self.r.zrange(self.keys.schedules(), 0, -1))
            raws = self.r.mget([self.keys.schedule(i.decode()) for i in ids]) if ids else []
        return [Schedule.model_validate_json(raw) for raw in raws if raw]

    def version(self) -> int:
        """Bumped by every change; replicas compare it to know when to rebuild."""
        with self.store.errors():
            return int(self.r.get(self.keys.schedules_version()) or 0)

    def update(self, schedule_id: str, change: ScheduleChange) -> Schedule | None:
        """Apply ``change`` atomically (compare-and-set); None if it raised Unchanged."""
        def changed(schedule: Schedule) -> list[Write]:
            change(schedule)
            return [lambda pipe: pipe.incr(self.keys.schedules_version())]

        try:
            return self.store.update_record(
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

        return self.store.cas([key], attempt, busy=f"schedule {schedule_id}")

    def claim(self, schedule_id: str, fire_time: datetime, *, owner: str,
              ttl: timedelta, kind: str = "fired") -> bool:
        """True for exactly one caller per (schedule, fire time, kind), across replicas."""
        key = self.keys.schedule_claim(schedule_id, kind, fire_time.astimezone(UTC).isoformat())
        with self.store.errors():
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
