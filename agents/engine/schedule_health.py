"""Whether each schedule still works under the current config: its approved plan must still
validate, and its latest occurrence must have planned. Shown by ``schedules list``, the App
Home and ``deckhand check`` (with ``REDIS_URL``), so a config change that breaks a schedule
is seen before its next occurrence fails at night.
"""

from __future__ import annotations

from agents.config import Config
from agents.errors import NotFound, PlanInvalid
from agents.ids import short_id
from agents.plan.validation import validate_plan
from agents.schedules.model import Schedule
from agents.store import Plans, ScheduleBook


def checked(schedule: Schedule, config: Config, *, plans: Plans) -> Schedule:
    """``schedule`` with ``plan_problem`` filled when its approved plan no longer validates
    (a copy; what is stored is left alone)."""
    problem = _approved_plan_problem(schedule, config, plans)
    if problem is None:
        return schedule
    return schedule.model_copy(update={"plan_problem": problem})


def _approved_plan_problem(schedule: Schedule, config: Config, plans: Plans) -> str | None:
    if schedule.approved_plan_id is None:
        return None
    try:
        plan = plans.get(schedule.approved_plan_id)
    except NotFound:
        return "its approved plan is no longer stored; re-create the schedule"
    try:
        validate_plan(plan, config.catalog, config.inventory, config.policy)
    except PlanInvalid as exc:
        return "its approved plan no longer validates: " + "; ".join(exc.problems)
    return None


def flags(schedule: Schedule) -> list[str]:
    """What to flag on a schedule, one line each (empty when it is healthy)."""
    out = [f"⚠ plan: {schedule.plan_problem}"] if schedule.plan_problem else []
    return out + ([f"⚠ last occurrence: {schedule.last_problem}"]
                  if schedule.last_problem else [])


def schedule_findings(config: Config, *, schedules: ScheduleBook, plans: Plans) -> list[str]:
    """``deckhand check``: one line per schedule that no longer plans under ``config``."""
    out = []
    for schedule in schedules.all():
        seen = checked(schedule, config, plans=plans)
        if seen.plan_problem:
            out.append(f"schedule {short_id(schedule.id)} ({schedule.spec} → "
                       f"{schedule.request!r}): {seen.plan_problem}")
    return out
