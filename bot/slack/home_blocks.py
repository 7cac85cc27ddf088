"""The App Home tab as Block Kit: pure functions, a HomeData snapshot in, a ``home`` view out.

A Home view holds at most 100 blocks; every list is capped and ends with an "and N more"
line pointing at the CLI, so the view stays within limits however busy the team is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agents.engine.schedule_health import flags as schedule_flags
from agents.history.deploys import Where
from agents.ids import short_id
from agents.policy.eligibility import eligibility
from agents.policy.rules import Policy
from agents.run.record import Run, RunStatus, StepStatus
from agents.run.results import tally
from agents.run.unreplicated import unreplicated_writes
from agents.schedules.model import Schedule
from agents.store import LockInfo, ManualLock
from bot.slack import blocks as bk
from bot.slack.judgment_blocks import judgment_blocks

Block = bk.Block
Rules = Callable[[str | None], Policy]
"""The policy of a run's service (every layer): each run is shown under its own rules."""

MAX_HOME_BLOCKS = 100
MAX_PENDING = 12
MAX_ACTIVE = 10
MAX_HOLDS = 5
MAX_RECENT = 10
MAX_ENVIRONMENTS = 25
MAX_SCHEDULES = 15
LINE_LIMIT = 250


@dataclass(frozen=True)
class HomeData:
    """Everything one user's Home shows, read at one moment."""

    user: str
    now: float
    pending: list[Run] = field(default_factory=list)
    """Runs this user may approve now (most recent first)."""
    mine: list[Run] = field(default_factory=list)
    """This user's own plans waiting for others' approval (not already in ``pending``)."""
    active: list[Run] = field(default_factory=list)
    """Approved runs not finished yet: queued, running, rolling back."""
    recent: list[Run] = field(default_factory=list)
    """Finished runs this user requested or approved."""
    environments: list[str] = field(default_factory=list)
    """Environment labels (``api/production`` in an organisation of several services, the
    services the user owns first); ``locks``, ``deployed`` and ``held`` are keyed by them."""
    locks: dict[str, LockInfo] = field(default_factory=dict)
    schedules: list[tuple[Schedule, datetime | None]] | None = None
    """Each schedule with its next fire time (None while paused); None: not available."""
    deployed: dict[str, Where] = field(default_factory=dict)
    """What history says each environment runs."""
    held: dict[str, ManualLock] = field(default_factory=dict)
    """Environments locked by a person (``deckhand lock``)."""
    deciding: set[str] = field(default_factory=set)
    """Runs holding at a go/no-go this user may decide (they alone get its buttons)."""


def home_view(data: HomeData, rules: Policy | Rules) -> dict[str, Any]:
    """The ``home`` view for ``views.publish``; ``rules``: each run's service's policy (or
    one policy for every run)."""
    policy: Rules = rules if callable(rules) else (lambda _service: rules)
    blocks: list[Block] = [
        bk.header("deckhand"),
        bk.context(f"Updated {_clock(data.now)} · `/deploy REQUEST` starts a deploy · "
                   f"`/deckhand help` lists everything"),
    ]
    blocks += _pending_blocks(data, policy)
    blocks += _hold_blocks(data)
    blocks += _titled("📝 Your plans waiting for approval",
                      [_mine_line(r, policy(r.service), data.now) for r in data.mine],
                      limit=MAX_PENDING,
                      empty="None of your plans is waiting.", hint="`deckhand runs`")
    blocks += _titled("🔄 In progress", [_active_line(r, data.now) for r in data.active],
                      limit=MAX_ACTIVE, empty="Nothing is running.", hint="`deckhand runs`")
    blocks += _titled("🗂️ Your recent runs", [_recent_line(r, data.now) for r in data.recent],
                      limit=MAX_RECENT, empty="You have no finished runs yet.",
                      hint="`deckhand runs`")
    blocks += _titled("🌐 Environments", [_env_line(e, data.locks.get(e), data.deployed.get(e))
                                         + _held_line(data.held.get(e))
                                         for e in data.environments],
                      limit=MAX_ENVIRONMENTS, empty="No environments configured.",
                      hint="`deckhand runs`")
    blocks += _schedule_blocks(data.schedules)
    return {"type": "home", "blocks": blocks[:MAX_HOME_BLOCKS]}


# -- sections ----------------------------------------------------------------------------


def _pending_blocks(data: HomeData, policy: Rules) -> list[Block]:
    blocks: list[Block] = [{"type": "divider"},
                           bk.section(f"*🕐 Waiting for your approval* ({len(data.pending)})")]
    if not data.pending:
        return [*blocks, bk.context("Nothing needs your approval.")]
    for run in data.pending[:MAX_PENDING]:
        blocks.append(bk.section(_pending_text(run, policy(run.service), data.now)))
        blocks.append(_approve_only(run, policy(run.service)))
    hidden = len(data.pending) - MAX_PENDING
    if hidden > 0:
        blocks.append(bk.context(f"…and {hidden} more — see `/deckhand runs` or "
                                 f"`deckhand runs`"))
    return blocks


def _hold_blocks(data: HomeData) -> list[Block]:
    """Runs holding at a go/no-go: the thread's own message and buttons (the click is judged
    by the same rules; anyone else is told privately), so a decision is not hunted for."""
    held = [(run, run.awaiting) for run in data.active if run.awaiting is not None]
    if not held:
        return []
    blocks: list[Block] = [{"type": "divider"},
                           bk.section(f"*⏸️ Waiting for a go/no-go* ({len(held)})")]
    for run, hold in held[:MAX_HOLDS]:
        shown = judgment_blocks(run.id, hold)
        if run.id not in data.deciding:  # scoped as Approve is: no buttons that refuse
            shown = [b for b in shown if b.get("type") != "actions"]
            shown.append(bk.context("Someone who may decide it will; see its thread."))
        blocks += shown
    if len(held) > MAX_HOLDS:
        blocks.append(bk.context(f"…and {len(held) - MAX_HOLDS} more — see `deckhand runs`"))
    return blocks


def _pending_text(run: Run, policy: Policy, now: float) -> str:
    answer = eligibility(run, policy, now=now)
    have = len(run.approvals)
    where = ", ".join(run.scopes)
    return bk.trim(f"*{bk.shown(run.goal, 300)}*\n`{short_id(run.id)}` · plan "
                   f"v{run.plan_version} · {where} · "
                   f"requested by {bk.mention(run.requested_by, run.requested_via)} "
                   f"{_ago(run.created_at, now)} · "
                   f"{have}/{have + answer.remaining} approvals, from "
                   f"{bk.notice(answer.who())} · Modify or Reject in its thread",
                   LINE_LIMIT * 2)


def _mine_line(run: Run, policy: Policy, now: float) -> str:
    """One of the user's own plans: what, where, how many approvals are still needed."""
    answer = eligibility(run, policy, now=now)  # the one answer: never names the requester
    need, who = answer.remaining, answer.who()  # where self-approval is off
    return bk.trim(f"*{bk.shown(run.goal, 200)}* · `{short_id(run.id)}` · "
                   f"{', '.join(run.scopes) or 'local'} · waiting {_ago(run.created_at, now)}"
                   f" · needs {need} more approval{'s' if need != 1 else ''} from "
                   f"{bk.notice(who)}", LINE_LIMIT)


def _approve_only(run: Run, policy: Policy) -> Block:
    """The plan message's Approve button (same action and value; its confirm dialog too)."""
    actions = bk.approval_actions(run, policy)
    approve = [e for e in actions["elements"] if e["action_id"] == bk.ActionId.APPROVE]
    return {**actions, "elements": approve}


def _titled(title: str, lines: list[str], *, limit: int, empty: str, hint: str) -> list[Block]:
    blocks: list[Block] = [{"type": "divider"}, bk.section(f"*{title}* ({len(lines)})")]
    if not lines:
        return [*blocks, bk.context(empty)]
    shown = [bk.trim(line, LINE_LIMIT) for line in lines[:limit]]
    blocks.append(bk.section("\n".join(shown)))
    if len(lines) > limit:
        blocks.append(bk.context(f"…and {len(lines) - limit} more — see {hint}"))
    return blocks


def _schedule_blocks(schedules: list[tuple[Schedule, datetime | None]] | None) -> list[Block]:
    if schedules is None:
        return [{"type": "divider"}, bk.section("*⏰ Schedules*"),
                bk.context("Schedules are not available in this build.")]
    lines = [_schedule_line(s, nxt) for s, nxt in schedules]
    return _titled("⏰ Schedules", lines, limit=MAX_SCHEDULES, empty="No schedules. "
                   "Add one with `/deckhand schedule add`.", hint="`deckhand schedules list`")


# -- lines -------------------------------------------------------------------------------


def _active_line(run: Run, now: float) -> str:
    done = sum(1 for s in run.steps.values() if s.status.done)
    running = [s for s in run.steps.values() if s.status is StepStatus.RUNNING]
    now_doing = ", ".join(_running_step(s.id, run) for s in running[:3])
    state = run.status.value.replace("_", " ")
    parts = [f"{bk.RUN_EMOJI.get(run.status, '')} `{short_id(run.id)}` *{state}* — "
             f"{bk.shown(run.goal, 300)}",
             f"{done}/{len(run.steps)} steps"]
    if now_doing:
        parts.append(f"now: {now_doing}")
    if run.started_at:
        parts.append(f"{now - run.started_at:.0f}s")
    if run.paused is not None:
        parts.append(bk.pause_text(run.paused))
    who = bk.mention(run.requested_by, run.requested_via)
    return " · ".join(parts) + f" · {who}" + _unreplicated(run)


def _running_step(step_id: str, run: Run) -> str:
    hosts = tally(run.steps[step_id])
    if hosts.total <= 1:
        return f"`{step_id}`"
    return f"`{step_id}` {hosts.describe()}"


def _recent_line(run: Run, now: float) -> str:
    took = f" in {run.duration:.0f}s" if run.duration is not None else ""
    state = run.status.value.replace('_', ' ')
    return (f"{bk.RUN_EMOJI.get(run.status, '')} `{short_id(run.id)}` {state}{took}"
            f" — {bk.shown(run.goal, 300)} · {_ago(run.finished_at or run.created_at, now)}"
            + _unreplicated(run))


def _unreplicated(run: Run) -> str:
    writes = unreplicated_writes(run)
    return f" · :warning: not on a replica: {bk.escape(', '.join(writes))}" if writes else ""


def _env_line(environment: str, lock: LockInfo | None, deployed: Where | None) -> str:
    live = ""
    if deployed is not None and deployed.hosts:
        live = f" · runs `{bk.escape(deployed.version or 'unknown')}`"
        live += f" ⚠️ {len(deployed.drift)} host(s) differ" if deployed.drift else ""
    if lock is None:
        return f"🟢 *{environment}* — free{live}"
    return (f"🔒 *{environment}* — locked by `{short_id(lock.run_id)}` (worker {lock.worker}, "
            f"since {_clock(lock.since)}){live}")


def _held_line(held: ManualLock | None) -> str:
    """A lock by hand, after the environment's line: who, since when, why."""
    if held is None:
        return ""
    return (f"\n    ✋ held by {bk.mention(held.holder, held.via)} since "
            f"{_clock(held.since)}{_until(held)}: {bk.escape(bk.trim(held.reason, 120))}")


def _until(held: ManualLock) -> str:
    return "" if held.until is None else f", until {_clock(held.until)}"


def _schedule_line(schedule: Schedule, next_fire: datetime | None) -> str:
    flags = " · auto" if schedule.auto else ""
    when = "⏸️ paused" if schedule.paused else (
        f"next {schedule.local(next_fire)}" if next_fire else "no further runs")
    troubles = "".join(f"\n    {bk.shown(line, 500)}" for line in schedule_flags(schedule))
    return (f"⏰ `{short_id(schedule.id)}` {schedule.spec} → {schedule.request} · {when}{flags}"
            f"{troubles}")


def _clock(at: float) -> str:
    """A time Slack shows in the viewer's own time zone (the fallback is the server's)."""
    fallback = time.strftime("%H:%M:%S", time.localtime(at))
    return f"<!date^{int(at)}^{{time_secs}}|{fallback}>"


def _ago(at: float, now: float) -> str:
    seconds = max(0, int(now - at))
    if seconds < 90:
        return f"{seconds}s ago"
    if seconds < 5400:
        return f"{seconds // 60}m ago"
    if seconds < 129600:
        return f"{seconds // 3600}h ago"
    return f"{seconds // 86400}d ago"


def in_progress(run: Run) -> bool:
    """Approved and not finished: what the Home lists under "In progress"."""
    return run.status in (RunStatus.APPROVED, RunStatus.QUEUED, RunStatus.RUNNING,
                          RunStatus.ROLLING_BACK)
