"""Deploy freezes: windows in which an environment takes no changes, and break-glass.

A window is either recurring — ``cron`` gives when it starts, ``hours`` how long it lasts
(``0 18 * * fri`` for 62 hours: the weekend) — or a date range (``start``/``end``, a holiday
freeze). Times are wall-clock in the window's ``timezone``, with the same DST rules as
schedules. A plan touching a frozen environment is refused at planning, at approval and at
run start, naming the window, its reason and when it ends.

Break-glass: the requester states why (``--break-glass "reason"``, or the button on the
refusal); the run then needs one more approval, from ``policy.break_glass.approvers``
(e.g. the incident commanders), on top of the usual rules. It is audited and shown on the
plan.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agents.errors import ScheduleError
from agents.schedules.model import cron_rule, spec_to_cron, zone_named


class FreezeWindow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    environments: list[str] = Field(min_length=1)
    reason: str = Field(min_length=1, max_length=300)
    timezone: str = "UTC"
    cron: str | None = Field(default=None, description="when each freeze starts")
    hours: float | None = Field(default=None, gt=0, le=24 * 31)
    start: datetime | None = None
    end: datetime | None = None
    services: list[str] | None = Field(default=None, min_length=1, description="main config "
                                       "only: the services it freezes (unset: every one)")

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            zone_named(value)
        except ScheduleError as exc:  # it names close matches
            raise ValueError(str(exc)) from exc
        return value

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        try:
            return spec_to_cron(value) if value is not None else None
        except ScheduleError as exc:
            raise ValueError(str(exc)) from exc

    @model_validator(mode="after")
    def _one_form(self) -> FreezeWindow:
        recurring = self.cron is not None and self.hours is not None
        dated = self.start is not None and self.end is not None
        if recurring == dated:
            raise ValueError("a freeze is either cron + hours, or start + end")
        if dated and self._utc(self.end) <= self._utc(self.start):
            raise ValueError("end must be after start")
        return self

    def active_until(self, now: datetime) -> datetime | None:
        """When the freeze that covers ``now`` ends (UTC), or None if it is not frozen."""
        if self.cron is not None and self.hours is not None:
            length = timedelta(hours=self.hours)
            began = cron_rule(self.cron).next_after(now - length, zone_named(self.timezone))
            return began + length if began is not None and began <= now else None
        start, end = self._utc(self.start), self._utc(self.end)
        return end if start <= now < end else None

    def _utc(self, moment: datetime | None) -> datetime:
        assert moment is not None  # noqa: S101 - only called for the dated form
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=zone_named(self.timezone))
        return moment.astimezone(UTC)


class BreakGlass(BaseModel):
    """Who may grant an override of a freeze (one extra approval)."""

    model_config = ConfigDict(extra="forbid")

    users: list[str] = Field(default_factory=list)
    groups: list[str] = Field(default_factory=list)

    def allows(self, user: str, user_groups: Iterable[str]) -> bool:
        return user in self.users or bool(set(user_groups) & set(self.groups))


@dataclass(frozen=True)
class Frozen:
    environment: str
    reason: str
    until: datetime

    def describe(self) -> str:
        ends = self.until.strftime("%a %Y-%m-%d %H:%M UTC")
        return (f"{self.environment} is frozen until {ends}: {self.reason}. If this cannot "
                f"wait, ask again with a break-glass reason")


def frozen(windows: Iterable[FreezeWindow], environments: Iterable[str],
           now: datetime) -> Frozen | None:
    """The freeze that blocks a change to ``environments`` at ``now`` (longest first)."""
    hits = [Frozen(env, w.reason, until) for w in windows for env in environments
            if env in w.environments for until in [w.active_until(now)] if until is not None]
    return max(hits, key=lambda f: f.until) if hits else None
