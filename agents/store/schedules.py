"""Schedules in Redis: one JSON record per schedule, an index by creation, a version that
replicas watch to rebuild their jobs, and per-fire-time claims (see ``agents.schedules``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import cast

from agents.errors import NotFound, StoreError
from agents.schedules import Schedule
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
        """Store a new schedule (StoreError if the id is taken)."""
        with self.store.errors():
            pipe = self.r.pipeline()
            pipe.set(self.keys.schedule(schedule.id), schedule.model_dump_json(), nx=True)
            pipe.zadd(self.keys.schedules(), {schedule.id: schedule.created_at.timestamp()})
            pipe.incr(self.keys.schedules_version())
            created, _, _ = pipe.execute()
        if not created:
            raise StoreError(f"schedule {schedule.id} already exists")
        return schedule

    def get(self, schedule_id: str) -> Schedule:
        with self.store.errors():
            raw = self.r.get(self.keys.schedule(schedule_id))
        if raw is None:
            raise NotFound(f"no schedule {schedule_id} — `schedules list` shows them")
        return Schedule.model_validate_json(raw)

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
        """Delete a schedule (NotFound if there is none)."""
        schedule = self.get(schedule_id)
        with self.store.errors():
            pipe = self.r.pipeline()
            pipe.delete(self.keys.schedule(schedule_id))
            pipe.zrem(self.keys.schedules(), schedule_id)
            pipe.incr(self.keys.schedules_version())
            deleted, _, _ = pipe.execute()
        if not deleted:
            raise NotFound(f"no schedule {schedule_id}")
        return schedule

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
