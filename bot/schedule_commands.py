"""The ``schedule`` commands, shared by Slack (``/deckhand schedule ...``) and the terminal.

``handle_schedule_command`` takes the words after ``schedule`` and returns a ScheduleReply;
it never talks to Slack or prints. Bad input (an invalid cron or readable spec, an unknown
time zone, a request no planner can plan, missing rights) is a reply with ``ok=False`` and
a message saying what to type, and nothing is stored.

Who may do what: anyone may add a plain schedule (each occurrence still needs an approval),
list, and pause any schedule (pausing only ever stops things). An ``--auto`` schedule runs
without a click, so creating one needs the rights to approve its environments in person
(``agents.engine.desk.auto_problem``), and resuming, running or removing one needs
approver rights for its environments.

``add --auto`` is two steps, like any approval: without ``--approve`` it only plans and
returns the plan with ``confirm``, the exact words that create the schedule with that plan's
hash frozen (an Approve button sends them back). If the plan changed in between, the hash
no longer matches and the new plan is shown instead.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agents.engine.desk import auto_problem
from agents.engine.occurrences import Occurrence, run_occurrence
from agents.engine.schedule_health import checked
from agents.engine.schedule_health import flags as schedule_flags
from agents.errors import NotFound, PlanError, ScheduleError
from agents.ids import short_id
from agents.plan.model import Plan
from agents.policy.eligibility import PlanSubject, eligibility, of_scopes
from agents.schedules.model import Schedule, split_spec, zone_named
from agents.services import Services
from agents.store.schedules import ScheduleBook

USAGE = """\
schedule add "<when>" <request...> [--tz ZONE] [--channel C] [--auto]
    <when>: cron (5 fields, 0 and 7 = Sunday) or "every weekday at 02:00",
    "every day at 9:30", "every monday at 08:00", "every 6h", "every 30m"
schedule list
schedule pause ID | resume ID | remove ID
schedule run ID          (fire now)"""
_SMART_QUOTES = str.maketrans({"“": '"', "”": '"', "‘": "'", "’": "'"})
_SLACK_CHANNEL = re.compile(r"^<#(?P<id>[A-Z0-9]+)(?:\|[^>]*)?>$")


@dataclass(frozen=True)
class ScheduleView:
    """A schedule with its next fire times, for ``list``."""

    schedule: Schedule
    next_fires: list[datetime]
    """UTC; render with ``schedule.local(t)`` (the schedule's own time zone)."""

    def describe(self) -> str:
        s = self.schedule
        flags = "".join(f" [{f}]" for f, on in (("auto", s.auto), ("paused", s.paused)) if on)
        upcoming = ", ".join(s.local(t) for t in self.next_fires) or "—"
        where = f" in {s.channel}" if s.channel else ""
        troubles = "".join(f"\n    {line}" for line in schedule_flags(s))
        return (f"{short_id(s.id)}{flags}  {s.spec}  ({s.cron}, {s.timezone})  → "
                f"{s.request!r}{where}\n"
                f"    next: {'paused' if s.paused else upcoming}{troubles}")


@dataclass(frozen=True)
class ScheduleReply:
    """What a schedule command did, for the front end to render.

    Attributes:
        ok: False for an error; ``text`` then says what to do and nothing was stored.
        text: plain text for the user (terminal, or an ephemeral Slack message).
        schedule: the schedule added or changed.
        schedules: for ``list``.
        plan: the plan planned at ``add`` (for ``--auto``: the one to approve).
        confirm: for ``add --auto``: the words that create the schedule with ``plan``
            approved (send them back as the ``args`` of the next call).
        occurrence: for ``run``: what the occurrence did (post it like a scheduled one).
        changed: schedules changed; call ``Scheduler.reload()`` to pick it up at once.
    """

    ok: bool
    text: str
    schedule: Schedule | None = None
    schedules: list[ScheduleView] = field(default_factory=list)
    plan: Plan | None = None
    confirm: list[str] | None = None
    occurrence: Occurrence | None = None
    changed: bool = False


@dataclass(frozen=True)
class _Ctx:
    user: str
    user_groups: list[str]
    channel: str | None
    services: Services
    now: datetime

    @property
    def book(self) -> ScheduleBook:
        return self.services.store.schedules


def handle_schedule_command(args: list[str] | str, *, user: str, user_groups: Iterable[str],
                            channel: str | None, services: Services,
                            now: datetime) -> ScheduleReply:
    """Run one ``schedule`` command.

    Args:
        args: the words after ``schedule`` (a string is split like a shell would).
        user: who is asking (Slack user id, or terminal user name).
        user_groups: their Slack user-group ids (for approver rules).
        channel: where the command was typed; the default channel for ``add``.
        services: the shared services.
        now: the current time (aware).

    Returns:
        The reply; ``ok=False`` with a message for bad input or missing rights.
    """
    ctx = _Ctx(user, list(user_groups), channel, services, now)
    try:
        words = _words(args)
        if not words or words[0].lower() in ("help", "-h", "--help"):
            return ScheduleReply(True, USAGE)
        action = _ACTIONS.get(words[0].lower())
        if action is None:
            raise ScheduleError(f"unknown schedule command {words[0]!r}. Usage:\n{USAGE}")
        return action(ctx, words[1:])
    except (ScheduleError, NotFound) as exc:
        return ScheduleReply(False, str(exc))


def _words(args: list[str] | str) -> list[str]:
    if not isinstance(args, str):
        return list(args)
    try:
        return shlex.split(args.translate(_SMART_QUOTES))  # Slack turns " into “ ”
    except ValueError as exc:
        raise ScheduleError(f"cannot read that command ({exc}); check the quotes") from exc


# -- add ---------------------------------------------------------------------------------


@dataclass
class _AddOptions:
    words: list[str] = field(default_factory=list)
    tz: str | None = None
    channel: str | None = None
    auto: bool = False
    approve: str | None = None


def _add_options(words: list[str]) -> _AddOptions:
    opts, rest = _AddOptions(), iter(words)
    for word in rest:
        name, eq, value = word.partition("=")
        if name == "--auto":
            opts.auto = True
        elif name in ("--tz", "--channel", "--approve"):
            value = value if eq else next(rest, "")
            if not value:
                raise ScheduleError(f"{name} needs a value")
            setattr(opts, name[2:], value)
        elif word.startswith("--"):
            raise ScheduleError(f"unknown option {word}. Usage:\n{USAGE}")
        else:
            opts.words.append(word)
    return opts


def _add(ctx: _Ctx, words: list[str]) -> ScheduleReply:
    opts = _add_options(words)
    spec, cron, request = split_spec(opts.words)
    schedule = Schedule(spec=spec, cron=cron, timezone=_zone_name(ctx, opts.tz),
                        request=request, service=ctx.services.config.key,
                        channel=_channel(opts.channel) or ctx.channel,
                        created_by=ctx.user, created_by_groups=ctx.user_groups,
                        created_at=ctx.now, armed_at=ctx.now)
    if schedule.next_fire(ctx.now) is None:
        raise ScheduleError(f"{spec!r} never fires (no such date); check the day and month")
    plan = _plan(ctx, schedule)
    schedule.environments = ctx.services.targets(plan).scopes
    if opts.auto:
        return _add_auto(ctx, schedule, plan, opts)
    ctx.book.create(schedule)
    _audit(ctx, "schedule_created", schedule, plan_id=plan.id, planned_goal=plan.goal)
    text = (f"{_created(ctx, schedule)}\nEach occurrence is planned afresh and posted for "
            f"approval. Planned now: {_plan_line(plan, schedule.environments)}.")
    return ScheduleReply(True, text, schedule=schedule, plan=plan, changed=True)


def _zone_name(ctx: _Ctx, given: str | None) -> str:
    name = given or ctx.services.settings.schedule_tz
    try:
        zone_named(name)
    except ScheduleError as exc:
        if given:
            raise
        raise ScheduleError(f"the default time zone DECKHAND_TZ is invalid: {exc}") from exc
    return name


def _channel(given: str | None) -> str | None:
    """A channel id from ``<#C123|name>`` (how Slack sends a mention), else as given."""
    if given is None:
        return None
    found = _SLACK_CHANNEL.match(given)
    return found["id"] if found else given


def _plan(ctx: _Ctx, schedule: Schedule) -> Plan:
    """Plan the request now, so a request nothing can plan is refused at creation."""
    try:
        return ctx.services.make_plan(schedule.request, requested_by=schedule.requester,
                                      face="schedule")
    except PlanError as exc:
        raise ScheduleError(f"cannot schedule {schedule.request!r}: {exc}") from exc


def _add_auto(ctx: _Ctx, schedule: Schedule, plan: Plan, opts: _AddOptions) -> ScheduleReply:
    subject = PlanSubject.of(ctx.services.targets(plan), requested_by=schedule.requester)
    problem = auto_problem(ctx.services.config.policy, subject, user=ctx.user,
                           user_groups=ctx.user_groups)  # the plan's real hosts, limits too
    if problem:
        raise ScheduleError(f"cannot create an --auto schedule: {problem}. Without --auto, "
                            f"each occurrence is posted for approval.")
    confirm = _confirm_words(schedule, plan)
    if opts.approve is None:
        return ScheduleReply(True, _confirm_text(schedule, plan), plan=plan, confirm=confirm)
    if not _same_hash(opts.approve, plan.hash):
        return ScheduleReply(False, "the plan changed since it was shown; review this one and "
                             "approve it instead", plan=plan, confirm=confirm)
    ctx.services.store.plans.save(plan)
    schedule.auto, schedule.approved_plan_id = True, plan.id
    schedule.approved_plan_hash = plan.hash
    ctx.book.create(schedule)
    _audit(ctx, "schedule_created", schedule, plan_id=plan.id, approved_hash=plan.hash)
    text = (f"{_created(ctx, schedule)}\nRuns unattended while the plan stays as approved by "
            f"{ctx.user} (hash {plan.hash[:12]}): {_plan_line(plan, schedule.environments)}. "
            f"A changed plan is posted for approval instead.")
    return ScheduleReply(True, text, schedule=schedule, plan=plan, changed=True)


def _same_hash(given: str, actual: str) -> bool:
    """A full hash, or the 12-character prefix plan tables show."""
    given = given.strip().lower()
    return len(given) >= 12 and actual.startswith(given)


def _confirm_words(schedule: Schedule, plan: Plan) -> list[str]:
    words = ["add", schedule.spec, schedule.request, "--tz", schedule.timezone, "--auto",
             "--approve", plan.hash]
    return words + (["--channel", schedule.channel] if schedule.channel else [])


def _confirm_text(schedule: Schedule, plan: Plan) -> str:
    return (f"--auto: this plan (hash {plan.hash[:12]}) will run without a click at every "
            f"occurrence of {schedule.spec!r} ({schedule.timezone}) for as long as a fresh plan "
            f"stays exactly the same; a changed plan is posted for approval instead. Approve "
            f"it to create the schedule: {_plan_line(plan, schedule.environments)}.")


def _created(ctx: _Ctx, schedule: Schedule) -> str:
    where = f", posted to {schedule.channel}" if schedule.channel else ""
    upcoming = " · ".join(schedule.local(t) for t in schedule.next_fires(ctx.now, 3))
    return (f"Scheduled {short_id(schedule.id)}: {schedule.spec} (cron {schedule.cron}, "
            f"{schedule.timezone}) → {schedule.request!r}{where}.\nNext: {upcoming}")


def _plan_line(plan: Plan, scopes: list[str]) -> str:
    envs = ", ".join(scopes) or "no environment"
    steps = f"{len(plan.steps)} step{'' if len(plan.steps) == 1 else 's'}"
    return f"{plan.goal} ({steps}; {envs})"


# -- list, pause, resume, remove, run ----------------------------------------------------


def _list(ctx: _Ctx, words: list[str]) -> ScheduleReply:
    config, plans = ctx.services.config, ctx.services.store.plans
    views = [ScheduleView(checked(s, config, plans=plans),
                          [] if s.paused else s.next_fires(ctx.now, 3))
             for s in ctx.book.all()]
    text = "\n".join(v.describe() for v in views) or "No schedules. " + USAGE.splitlines()[0]
    return ScheduleReply(True, text, schedules=views)


def _pause(ctx: _Ctx, words: list[str]) -> ScheduleReply:
    def change(schedule: Schedule) -> None:
        schedule.paused = True

    schedule = _change(ctx, _one_id(ctx, words, "pause"), change)
    _audit(ctx, "schedule_paused", schedule)
    return ScheduleReply(True, f"Paused {short_id(schedule.id)} ({schedule.spec} → "
                         f"{schedule.request!r}).", schedule=schedule, changed=True)


def _resume(ctx: _Ctx, words: list[str]) -> ScheduleReply:
    schedule_id = _one_id(ctx, words, "resume")
    _check_rights(ctx, ctx.book.get(schedule_id), "resume")

    def change(schedule: Schedule) -> None:
        schedule.paused = False
        schedule.armed_at = max(schedule.armed_at, ctx.now)  # nothing from the pause fires

    schedule = _change(ctx, schedule_id, change)
    _audit(ctx, "schedule_resumed", schedule)
    upcoming = ", ".join(schedule.local(t) for t in schedule.next_fires(ctx.now, 1))
    return ScheduleReply(True, f"Resumed {short_id(schedule.id)}; next: {upcoming or '—'}.",
                         schedule=schedule, changed=True)


def _remove(ctx: _Ctx, words: list[str]) -> ScheduleReply:
    schedule_id = _one_id(ctx, words, "remove")
    _check_rights(ctx, ctx.book.get(schedule_id), "remove")
    schedule = ctx.book.remove(schedule_id)
    _audit(ctx, "schedule_removed", schedule)
    return ScheduleReply(True, f"Removed {short_id(schedule.id)} ({schedule.spec} → "
                         f"{schedule.request!r}).", schedule=schedule, changed=True)


def _run(ctx: _Ctx, words: list[str]) -> ScheduleReply:
    schedule = ctx.book.get(_one_id(ctx, words, "run"))
    _check_rights(ctx, schedule, "run")
    _audit(ctx, "schedule_run_now", schedule)
    occurrence = run_occurrence(ctx.services, schedule, ctx.now, manual=True)
    return ScheduleReply(occurrence.run is not None, occurrence.message, schedule=schedule,
                         plan=occurrence.plan, occurrence=occurrence)


def _one_id(ctx: _Ctx, words: list[str], action: str) -> str:
    """The whole id of the schedule named by ``words`` (an id or a unique prefix)."""
    if len(words) != 1:
        raise ScheduleError(f"usage: schedule {action} ID (`schedule list` shows the ids)")
    return ctx.book.find(words[0]).id


def _change(ctx: _Ctx, schedule_id: str, change: Callable[[Schedule], None]) -> Schedule:
    schedule = ctx.book.update(schedule_id, change)
    assert schedule is not None  # noqa: S101 - these changes never raise Unchanged
    return schedule


def _check_rights(ctx: _Ctx, schedule: Schedule, action: str) -> None:
    """Only approvers of its environments may resume, run or remove an --auto schedule."""
    envs = schedule.environments
    answer = eligibility(of_scopes(envs), ctx.services.config.policy)
    if schedule.auto and not answer.allows(ctx.user, ctx.user_groups):
        raise ScheduleError(f"{short_id(schedule.id)} runs unattended, so only people who may "
                            f"approve {', '.join(envs) or 'its plans'} can {action} it. Who can: "
                            f"{answer.who()}")


def _audit(ctx: _Ctx, action: str, schedule: Schedule, **details: Any) -> None:
    ctx.services.store.audit.record(action, actor=ctx.user, schedule=schedule.id,
                                    spec=schedule.spec, cron=schedule.cron,
                                    timezone=schedule.timezone,
                                    request=schedule.request, auto=schedule.auto, **details)


_ACTIONS: dict[str, Callable[[_Ctx, list[str]], ScheduleReply]] = {
    "add": _add, "list": _list, "ls": _list, "pause": _pause, "resume": _resume,
    "remove": _remove, "rm": _remove, "delete": _remove, "run": _run,
}
