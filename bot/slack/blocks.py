"""Block Kit rendering: pure functions, plan/run in, blocks out, always within Slack's limits.

Limits we design to: 50 blocks per message, 3000 characters per section text, 2000 per
button value, 255 per action_id, 100 blocks in a modal, 150 per header. Long plans are
trimmed with an "and N more" line instead of being rejected by Slack.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from agents import tracing
from agents.faces import from_slack
from agents.history.deploys import Deploy, Where
from agents.ids import short_id
from agents.plan.diff import Mark, PlanDiff
from agents.plan.dryrun import verdict
from agents.plan.model import Plan, Step, format_params
from agents.policy.eligibility import eligibility
from agents.policy.rules import Policy
from agents.run.gates import where as gate_where
from agents.run.judgment import waiting_line
from agents.run.record import GateCheck, Pause, Run, RunStatus, StepState, StepStatus
from agents.run.results import listed, outputs_of, tally
from agents.run.unreplicated import replica_wait_line, unreplicated_note
from agents.said import Mention, Said, recorded
from agents.store.manual_locks import ManualLock

if TYPE_CHECKING:  # the engine's module imports services: not for a pure renderer
    from agents.engine.manual_locking import Outlook

Block = dict[str, Any]


class ActionId(StrEnum):
    """Every interactive element's ``action_id``: blocks build them, listeners match them."""

    APPROVE = "approve"
    MODIFY = "modify"
    REJECT = "reject"
    SCHEDULE_CONFIRM = "schedule_confirm"
    ROLLBACK_TO = "rollback_to"
    SHOW_OUTPUT = "show_output"
    STOP = "stop_run"
    PAUSE = "pause_run"
    RESUME = "resume_run"
    JUDGE_CONTINUE = "judge_continue"
    JUDGE_ROLLBACK = "judge_rollback"


class ViewId(StrEnum):
    """Every modal's ``callback_id``."""

    MODIFY_SUBMIT = "modify_submit"
    REJECT_SUBMIT = "reject_submit"

MAX_BLOCKS = 50
MAX_SECTION = 3000
MAX_TOTAL_CHARS = 12000

STEP_EMOJI = {
    StepStatus.PENDING: "⚪", StepStatus.RUNNING: "🔄", StepStatus.SUCCEEDED: "✅",
    StepStatus.FAILED: "❌", StepStatus.SKIPPED: "⏭️", StepStatus.CANCELLED: "⏹️",
}
RUN_EMOJI = {
    RunStatus.SUCCEEDED: "✅", RunStatus.ROLLED_BACK: "↩️", RunStatus.FAILED: "❌",
    RunStatus.ROLLBACK_FAILED: "🚨", RunStatus.CANCELLED: "⏹️", RunStatus.INTERRUPTED: "🚨",
    RunStatus.RUNNING: "🔄", RunStatus.ROLLING_BACK: "↩️", RunStatus.QUEUED: "⏳",
    RunStatus.AWAITING_APPROVAL: "🕐", RunStatus.REJECTED: "🚫", RunStatus.APPROVED: "👍",
    RunStatus.EXPIRED: "⌛",
}


def trim(text: str, limit: int = MAX_SECTION) -> str:
    """Cut ``text`` to ``limit`` characters, never inside an entity, mention or link."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    for opener, closer in (("<", ">"), ("&", ";")):
        start = cut.rfind(opener)
        if start > cut.rfind(closer):
            cut = cut[:start]
    return cut + "…"


_OUTPUT_REF = re.compile(r"\$\{steps\.(\w+)\.(\w+)\}")


def params_text(params: Mapping[str, object], limit: int = 120) -> str:
    """Parameters as ``k=v`` for people: a step output reads as "the artifact of `build`"."""
    text = format_params(params, limit * 4)
    text = _OUTPUT_REF.sub(lambda m: f"{m.group(2)} of ⟨{m.group(1)}⟩", text)
    return shown(text, limit).replace("⟨", "`").replace("⟩", "`")


def notice(text: str) -> str:
    """A refusal, notice or "who can approve" line as mrkdwn: a :class:`~agents.said.Said`'s
    mention parts (ids the policy names or Slack recorded) as live mentions, every literal
    part escaped; any other text escaped whole. Mentions are never found by pattern in text
    (which may echo what the user typed: ``<@U0EVIL1>``, ``UNKNOWN``)."""
    if isinstance(text, Said):
        return text.render(escape, _live)
    return escape(text)


def _live(part: Mention) -> str:
    return f"<!subteam^{part.id}>" if part.group else f"<@{part.id}>"


def shown(text: object, limit: int = MAX_SECTION) -> str:
    """Text from users, configs, planners or commands, cut and escaped for mrkdwn: it reads
    as typed and can never mention anyone or link anywhere (deckhand alone makes those)."""
    return escape(trim(str(text), limit))


def section(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": trim(text) or " "}}


def context(text: str) -> Block:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": trim(text, 2000)}]}


def header(text: str) -> Block:
    return {"type": "header", "text": {"type": "plain_text", "text": trim(text, 150)}}


def mention(user: str, via: str | None) -> str:
    """``user`` as a Slack mention only if its record says Slack recorded it (``via``: the
    face that wrote the name, ``agents.faces``), i.e. it is the user id of a signed request;
    any other name (a ``--user``, an MCP client, a schedule, a record from before faces were
    recorded) is escaped text, whatever it looks like (``UNKNOWN``, ``U123ABC``)."""
    return notice(Said(recorded(user, via)))


def button_value(run: Run) -> str:
    """What the buttons carry: the run and the exact plan version and hash shown."""
    return json.dumps({"run": run.id, "v": run.plan_version, "h": run.plan_hash},
                      separators=(",", ":"))


def parse_button_value(value: str) -> tuple[str, int, str]:
    data = json.loads(value)
    return str(data["run"]), int(data["v"]), str(data["h"])


# -- the plan message -------------------------------------------------------------------


def plan_blocks(plan: Plan, run: Run, policy: Policy, *, actions: bool = True,
                note: str | None = None, diff: PlanDiff | None = None) -> list[Block]:
    """The plan as posted for approval: goal, [changes], steps by layer, rollback, buttons."""
    limited = escape(f" (limited to {', '.join(plan.limit)})") if plan.limit else ""
    who = mention(plan.requested_by, plan.requested_via)
    blocks: list[Block] = [
        header(f"Plan: {plan.goal}"),
        section(f"*Requested by* {who} · *environments* "
                f"{escape(', '.join(run.scopes))} · *hosts* "
                f"{escape(_hosts_text(run.hosts))}{limited} · "
                f"*version* {plan.version}"),
    ]
    if diff is not None:
        blocks += diff_blocks(diff)
    blocks += _step_sections(plan, budget=MAX_BLOCKS - 10)
    if plan.rollback:
        lines = [f"{i}. `{r.id}`{'' if r.tool == r.id else ' ' + r.tool} "
                 f"{params_text(r.params)}"
                 for i, r in enumerate(plan.rollback, start=1)]
        blocks.append(section("*On failure, roll back in order:*\n" + "\n".join(lines)))
    blocks.append(context(f"{shown(plan.planner.footer(), 300)} · plan `{short_id(plan.id)}` "
                          f"v{plan.version} · hash `{plan.hash[:12]}` · run `{short_id(run.id)}`"))
    if note:
        blocks.append(context(note))
    if actions:
        who = eligibility(run, policy).who()
        blocks.append(context(notice(Said("Who can approve: ", who))))
        blocks.append(approval_actions(run, policy))
    return _fit(blocks)


DIFF_EMOJI = {Mark.ADDED: "➕", Mark.REMOVED: "➖", Mark.CHANGED: "✏️"}
MAX_DIFF_LINES = 25


def diff_blocks(diff: PlanDiff) -> list[Block]:
    """What changed since the previous version, one line per change, in one section."""
    lines = [f"*Changes since v{diff.old_version}* ({diff.summary()})"]
    for line in diff.lines()[:MAX_DIFF_LINES]:
        where = "rollback " if line.rollback else ""
        step = f"{where}`{line.step}` " if line.step else where
        lines.append(f"{DIFF_EMOJI[line.mark]} {step}{escape(line.text)}")
    hidden = len(diff.lines()) - MAX_DIFF_LINES
    if hidden > 0:
        lines.append(f"…and {hidden} more changes: the full plan is below")
    return [section(trim("\n".join(lines), MAX_SECTION - 100)), {"type": "divider"}]


def where_text(states: list[Where], held: Sequence[ManualLock] = ()) -> str:
    """``/deckhand where``: each environment's version, then any host that differs; then
    each environment locked by hand."""
    lines = []
    for state in states:
        if not state.hosts:
            continue
        since = f" since {_date(state.since)}" if state.since else ""
        lines.append(f"*{escape(state.environment)}*: `{escape(state.version or 'unknown')}`"
                     f"{since} ({len(state.hosts)} host(s))")
        lines += [f"   ⚠️ drift: {escape(host)} serves `{escape(version or 'unknown')}`"
                  for host, version in sorted(state.drift.items())]
    lines = lines or ["No deploys recorded yet."]
    lines += [f"🔒 *{escape(lock.environment)}* held by {mention(lock.holder, lock.via)} since "
              f"{lock.since_text}, {lock.until_text}: {escape(lock.reason)}" for lock in held]
    return "\n".join(lines)


def wcid_text(outlooks: Sequence[Outlook]) -> str:
    """``.wcid`` (where can I deploy): each environment, open or why not, and whether the
    asker may approve there."""
    lines = [_outlook_line(o) for o in outlooks]
    return "\n".join(lines) or "No environments configured."


def _outlook_line(outlook: Outlook) -> str:
    name = f"*{escape(outlook.environment)}*"
    who = "you may approve there" if outlook.may_approve else "you may not approve there"
    if outlook.held is not None:
        held = outlook.held
        state = (f"🔒 {name} — locked by {mention(held.holder, held.via)} since "
                 f"{held.since_text}, {held.until_text}: {escape(held.reason)}")
    elif outlook.frozen is not None:
        state = f"🧊 {name} — {escape(outlook.frozen.describe().split('. If')[0])}"
    else:
        state = f"🟢 {name} — open"
    running = f" · `{short_id(outlook.deploying)}` is deploying there" if outlook.deploying \
        else ""
    return f"{state} · {who}{running}"


def history_text(environment: str, deploys: list[Deploy]) -> str:
    """``/deckhand history ENV``: newest first, with outcome and who asked."""
    if not deploys:
        return f"No deploys to {escape(environment)} recorded yet."
    lines = [f"*Deploys to {escape(environment)}*, newest first:"]
    for deploy in deploys:
        undo = " (rollback)" if deploy.rollback_of_version else ""
        lines.append(f"{RUN_EMOJI.get(deploy.outcome, '')} {_date(deploy.finished_at)} "
                     f"`{escape(deploy.version or '?')}`{undo} {deploy.outcome.value} — "
                     f"{mention(deploy.requested_by, deploy.requested_via)} "
                     f"`{short_id(deploy.run_id)}`")
    return "\n".join(lines)


def history_blocks(environment: str, deploys: list[Deploy], live: str | None, *,
                   service: str | None = None) -> list[Block]:
    """The history with a "Roll back to this version" button per earlier live version.

    The button only asks for a plan (``roll back ENV to VERSION``, for ``service`` when
    set): it is posted, approved, locked and audited like any deploy.
    """
    blocks = [section(history_text(environment, deploys))]
    versions = [v for d in deploys if d.took_effect and not d.rollback_of_version
                for v in [d.version] if v and v != live]
    for version in list(dict.fromkeys(versions))[:5]:  # one block each: same action_id
        blocks.append({"type": "actions", "elements": [{
            "type": "button", "action_id": ActionId.ROLLBACK_TO,
            "text": {"type": "plain_text", "text": trim(f"Roll back to {version}", 75)},
            "value": json.dumps({"environment": environment, "version": version,
                                 **({"service": service} if service else {})})}]})
    return blocks


def _date(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(at)) + " UTC" if at else "-"


def escape(text: str) -> str:
    """Slack mrkdwn control characters, so parameter values show as typed."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _step_sections(plan: Plan, *, budget: int) -> list[Block]:
    lines: list[str] = []
    for index, layer in enumerate(plan.layers(), start=1):
        parallel = " _(in parallel)_" if len(layer) > 1 else ""
        lines.append(f"*{index}.*{parallel}")
        for step_id in layer:
            step = plan.step(step_id)
            after = f" ← {', '.join(step.depends_on)}" if step.depends_on else ""
            tool = "" if step.tool == step.id else f" {step.tool}"
            lines.append(f"   • `{step.id}`{tool} {params_text(step.params)}{after}"
                         f"{_checks(step)}")
    return _pack_lines(lines, budget=budget, more_hint="steps (see `deckhand plan`)")


def _checks(step: Step) -> str:
    """The plan's own success criteria (beyond the tool's), shown to every approver."""
    if step.success is None or not step.success.describe():
        return ""
    return f"\n      _success also needs:_ {escape(step.success.describe())}"


def _pack_lines(lines: list[str], *, budget: int, more_hint: str) -> list[Block]:
    """Lines into as few sections as fit 3000 chars; past the block budget, 'and N more'."""
    blocks: list[Block] = []
    current: list[str] = []
    for index, line in enumerate(lines):
        if sum(len(x) + 1 for x in current) + len(line) > MAX_SECTION - 100:
            blocks.append(section("\n".join(current)))
            current = []
            if len(blocks) >= budget:
                blocks.append(context(f"…and {len(lines) - index} more {more_hint}"))
                return blocks
        current.append(line)
    if current:
        blocks.append(section("\n".join(current)))
    return blocks


def approval_actions(run: Run, policy: Policy) -> Block:
    rule = policy.strictest(run.scopes)
    approve: Block = {"type": "button", "action_id": ActionId.APPROVE, "style": "primary",
                      "text": {"type": "plain_text", "text": "Approve"},
                      "value": button_value(run)}
    if rule.confirm:
        approve["confirm"] = {
            "title": {"type": "plain_text", "text": "Approve this deploy?"},
            "text": {"type": "mrkdwn", "text": trim(
                f"This changes *{escape(', '.join(run.scopes))}*. "
                f"{rule.min_approvals} approval(s) needed.", 300)},
            "confirm": {"type": "plain_text", "text": "Approve"},
            "deny": {"type": "plain_text", "text": "Cancel"},
        }
    return {"type": "actions", "block_id": f"plan:{run.id}", "elements": [
        approve,
        {"type": "button", "action_id": ActionId.MODIFY, "text": {"type": "plain_text",
                                                            "text": "Modify"},
         "value": button_value(run)},
        {"type": "button", "action_id": ActionId.REJECT, "style": "danger",
         "text": {"type": "plain_text", "text": "Reject"}, "value": button_value(run)},
    ]}


def schedule_confirm_blocks(summary: str, words: list[str]) -> list[Block]:
    """Ask the creator of an ``--auto`` schedule to approve the plan it will freeze.

    The button carries the exact words of the command, so the click re-runs that command.
    """
    value = json.dumps(words, separators=(",", ":"))
    return [section(f"*Approve this plan for an unattended schedule?*\n{trim(summary, 2500)}"),
            {"type": "actions", "elements": [{
                "type": "button", "action_id": ActionId.SCHEDULE_CONFIRM, "style": "primary",
                "text": {"type": "plain_text", "text": "Approve schedule"},
                "value": trim(value, 2000)}]}]


# -- run status, failures, rollback, summary ----------------------------------------------


def status_blocks(plan: Plan, run: Run) -> list[Block]:
    """The one status message kept up to date in the thread."""
    emoji = RUN_EMOJI.get(run.status, "")
    took = f" · {run.duration:.0f}s" if run.duration is not None else ""
    blocks = [section(f"{emoji} *Run `{short_id(run.id)}` — {run.status.value.replace('_', ' ')}*"
                      f"{took}")]
    lines = [_step_line(s.id, run.steps[s.id]) for s in plan.steps]
    blocks += _pack_lines(lines, budget=MAX_BLOCKS - 6, more_hint="steps")
    started = [r for r in plan.rollback if run.rollback[r.id].status is not StepStatus.PENDING]
    if started or run.status is RunStatus.ROLLING_BACK:
        rollback = [_step_line(r.id, run.rollback[r.id]) for r in plan.rollback]
        blocks.append(section("*Rollback*\n" + "\n".join(rollback)))
    if run.paused is not None:
        blocks.insert(1, context(pause_text(run.paused)))
    if run.awaiting is not None:  # the decision's buttons are on its own message
        blocks.append(context(f"⏸️ {escape(waiting_line(run.awaiting))}"))
    replica = replica_wait_line(run)
    if replica:  # a start waiting for a Redis replica (after a failover, one syncing)
        blocks.append(context(f"⏳ {escape(replica)}"))
    if run.status in STOPPABLE:
        blocks.append({"type": "actions", "elements": [*pause_buttons(run), stop_button(run)]})
    if run.finished_at is not None and outputs_of(run):
        blocks.append({"type": "actions", "elements": [{
            "type": "button", "action_id": ActionId.SHOW_OUTPUT, "value": run.id,
            "text": {"type": "plain_text", "text": "Show output"}}]})
    return _fit(blocks)


STOPPABLE = (RunStatus.QUEUED, RunStatus.RUNNING)
"""A run the Stop button can stop (a rollback, once started, is never stopped from Slack)."""


def stop_button(run: Run) -> Block:
    """Stop, behind Slack's own confirm dialog: the click arrives only once confirmed."""
    return {"type": "button", "action_id": ActionId.STOP, "value": run.id, "style": "danger",
            "text": {"type": "plain_text", "text": "Stop"},
            "confirm": {"title": {"type": "plain_text", "text": "Stop this run?"},
                        "text": {"type": "mrkdwn", "text":
                                 f"Run `{short_id(run.id)}`: running commands are killed, "
                                 f"nothing new starts, and the rollback undoes every host "
                                 f"this run changed."},
                        "confirm": {"type": "plain_text", "text": "Stop and roll back"},
                        "deny": {"type": "plain_text", "text": "Keep running"},
                        "style": "danger"}}


def pause_buttons(run: Run) -> list[Block]:
    """Pause a running run (before its next step or batch), or Resume a paused one."""
    if run.status is not RunStatus.RUNNING:
        return []
    if run.paused is not None:
        return [{"type": "button", "action_id": ActionId.RESUME, "value": run.id,
                 "style": "primary", "text": {"type": "plain_text", "text": "Resume"}}]
    return [{"type": "button", "action_id": ActionId.PAUSE, "value": run.id,
             "text": {"type": "plain_text", "text": "Pause"}}]


def pause_text(pause: Pause) -> str:
    """Who paused a run, since when, what waits, and when it rolls back unless resumed."""
    waits = f" — {escape(pause.before)} waits" if pause.before else ""
    expires = f"; rolls back at {when(pause.until)} unless resumed" if pause.until else ""
    return f"⏸️ Paused by {mention(pause.by, pause.via)} since {when(pause.at)}{waits}{expires}"


def when(at: float) -> str:
    """A time Slack shows in the viewer's own time zone (the fallback is UTC)."""
    fallback = time.strftime("%H:%M:%S UTC", time.gmtime(at))
    return f"<!date^{int(at)}^{{time_secs}}|{fallback}>"


OUTPUT_SECTION = 2800
"""Characters of one host's output in one section (a section holds 3000)."""


def run_output_blocks(run: Run, redact: Callable[[str], str]) -> list[Block]:
    """What each step printed, host by host, for the one who clicked "Show output": each
    redacted and cut to its end, all within Slack's block and size limits."""
    found = outputs_of(run)
    blocks: list[Block] = [section(f"*Output of run `{short_id(run.id)}`* "
                                   f"({len(found)} step/host results)")]
    for output in found:
        text = redact(output.text).rstrip().replace("```", "'''") or "(no output)"
        if len(text) > OUTPUT_SECTION:
            text = "…" + text[-OUTPUT_SECTION:]
        where = "rollback " if output.phase == "rollback" else ""
        blocks.append(section(f"*{where}`{output.step}`* on `{escape(output.host)}` "
                              f"({output.status})\n```{escape(text)}```"))
    if len(blocks) > MAX_BLOCKS - 1 or len(json.dumps(blocks)) > MAX_TOTAL_CHARS:
        blocks = _fit(blocks, MAX_BLOCKS - 1)
        blocks.append(context(f"More than fits here: `deckhand runs show {short_id(run.id)} "
                              f"--output`"))
    return blocks


def _step_line(step_id: str, state: StepState) -> str:
    parts = [STEP_EMOJI[state.status], f"`{step_id}`"]
    hosts = tally(state)
    if hosts.total:
        parts.append(hosts.describe())
    if state.duration is not None and state.status is not StepStatus.PENDING:
        parts.append(f"{state.duration:.1f}s")
    if state.error and state.status is StepStatus.FAILED:
        parts.append(f"— {shown(state.error, 160)}")
    elif state.status is StepStatus.SKIPPED:
        parts.append("— skipped")  # why is on the failed step's line, said once
    line = " ".join(parts)
    if hosts.failed and hosts.total > 1:
        line += f"\n      failed on {_host_names([h.host for h in hosts.failed], MAX_LISTED)}"
    return line


MAX_LISTED = 8
"""Host names listed on a status line before "+N more"."""


def _host_names(names: list[str], limit: int) -> str:
    return listed(names, limit, show=lambda name: f"`{escape(name)}`")


def _hosts_text(names: list[str], limit: int = 20) -> str:
    """Host names for a plan or summary: all of a few, a count and the first of many."""
    if len(names) <= limit:
        return ", ".join(names) or "none"
    return f"{len(names)}: {listed(names, limit)}"


def failure_blocks(step_id: str, state: StepState) -> list[Block]:
    """A failed step with its (already redacted) output tail, trimmed to fit."""
    blocks = [section(f"❌ *`{step_id}` failed*: {shown(state.error or 'failed', 1000)}")]
    failed = tally(state).failed
    for host in failed:
        if host.tail.strip():
            tail = escape(host.tail.strip()[-1500:].replace("```", "'''"))
            blocks.append(section(f"*{escape(host.host)}* (exit {host.exit_code}):\n"
                                  f"```{tail}```"))
        if len(blocks) >= 6:
            break
    if len(failed) > 1:
        blocks.append(context(f"failed on {len(failed)}/{len(state.hosts)} hosts: "
                              f"{_host_names([h.host for h in failed], 30)}"))
    return blocks


def gate_text(check: GateCheck) -> str:
    verdict = "passed" if check.ok else f"failed: {check.reason}"
    return f"gate {check.name} {gate_where(check)} {verdict}"


def gate_blocks(check: GateCheck) -> list[Block]:
    """A gate's verdict and every (already redacted) line it measured, as a code block."""
    icon = "✅" if check.ok else "❌"
    lines = escape("\n".join(check.lines)).replace("```", "'''")
    return [section(f"{icon} {shown(gate_text(check), 1000)}"),
            section(f"```{trim(lines, MAX_SECTION - 100)}```")]


def output_blocks(step_id: str, output: str) -> list[Block]:
    """A read-only run's (redacted, bounded) output as an escaped code block: the answer."""
    text = escape(output.strip()).replace("```", "'''") or "(no output)"
    return [section(f"*`{step_id}` output:*\n```{trim(text, MAX_SECTION - 100)}```")]


def rollback_text(run: Run, plan: Plan) -> str:
    who = " ".join(mention(name, via) for name, via in sorted(_people(run).items()))
    steps = ", ".join(f"`{r.id}`" for r in plan.rollback)
    return trim(f"🚨 *Rolling back run `{short_id(run.id)}`* ({shown(plan.goal, 300)}) — "
                f"{shown(run.reason or 'a step failed', 500)}. "
                f"Rollback steps: {steps}. {who}")


def _people(run: Run) -> dict[str, str | None]:
    """Who requested and approved ``run``, each once, with the face that recorded them (a
    name Slack recorded anywhere stays from Slack: that user did click)."""
    found: dict[str, str | None] = {}
    for name, via in [(run.requested_by, run.requested_via),
                      *((a.user, a.via) for a in run.approvals)]:
        found[name] = via if from_slack(via) or name not in found else found[name]
    return found


def outcome_text(plan: Plan, run: Run) -> str:
    """One line for notifications and the plan message: how the run ended, in words."""
    status = run.status.value.replace("_", " ")
    took = f" in {run.duration:.0f}s" if run.duration is not None else ""
    return f"{RUN_EMOJI.get(run.status, '')} {shown(plan.goal, 200)}: {status}{took} (`{run.id}`)"


def summary_blocks(plan: Plan, run: Run, *, trace_link: str | None = None) -> list[Block]:
    durations = {s: st.duration or 0.0 for s, st in run.steps.items()}
    path, length = plan.critical_path(durations)
    approvers = ", ".join(mention(a.user, a.via) for a in run.approvals) or "nobody"
    who = mention(run.requested_by, run.requested_via)
    lines = [f"{RUN_EMOJI.get(run.status, '')} *{run.status.value.replace('_', ' ').upper()}* "
             f"— {shown(plan.goal, 300)}",
             f"wall time {run.duration or 0:.1f}s · critical path {length:.1f}s: "
             f"{' → '.join(path)}",
             f"requested by {who} · approved by {approvers}"]
    if run.reason:
        lines.append(f"why: {shown(run.reason, 500)}")
    if run.changed_hosts:
        lines.append(f"hosts changed: {escape(_hosts_text(run.changed_hosts))}")
    note = unreplicated_note(run)
    if note:
        lines.append(f":warning: {escape(note)}")
    blocks = [section("\n".join(lines))]
    found = tracing.reference(run.meta.get("traceparent"), trace_link)
    if found:
        blocks.append(context(f"trace {f'<{escape(found)}|view>' if trace_link else f'`{found}`'}"))
    return blocks


def dry_run_blocks(plan: Plan, run: Run, unchecked: list[str],
                   notes: list[str] | None = None) -> list[Block]:
    """What a dry run found: each check's last lines, each step with nothing to check (and
    why, from ``notes``), ending on a verdict that cannot read as a deploy's success."""
    said = verdict(run.status.value, checked=len(run.steps), unchecked=unchecked)
    lines = [f"🧪 *{escape(said)}*"]
    for step in run.steps.values():
        for host in step.hosts.values():
            said = "; ".join(host.tail.splitlines()[-2:]) or host.error or step.status.value
            lines.append(f"• `{step.id}` on {escape(host.host)}: {escape(trim(said, 300))}")
    lines += [f"• {escape(line)}" for line in notes or [f"{s}: nothing to check"
                                                        for s in unchecked]]
    return _pack_lines(lines, budget=MAX_BLOCKS - 2, more_hint="(see `deckhand run --dry-run`)")


# -- modals -------------------------------------------------------------------------------


def modify_modal(run: Run, plan_yaml: str, metadata: str, *, error: str | None = None
                 ) -> dict[str, Any]:
    blocks: list[Block] = []
    if error:
        blocks.append(section(f"⚠️ {trim(error, 2900)}"))
    blocks.append({"type": "input", "block_id": "instruction", "optional": True,
                   "label": {"type": "plain_text", "text": "What should change?"},
                   "element": {"type": "plain_text_input", "action_id": "value",
                               "placeholder": {"type": "plain_text",
                                               "text": "e.g. skip staging, use v2.3.2"}}})
    if len(plan_yaml) <= 3000:
        blocks.append({"type": "input", "block_id": "yaml", "optional": True,
                       "label": {"type": "plain_text", "text": "…or edit the plan (YAML)"},
                       "element": {"type": "plain_text_input", "action_id": "value",
                                   "multiline": True, "initial_value": plan_yaml}})
    else:
        blocks.append(context("The plan is too long to edit here; describe the change above."))
    return {"type": "modal", "callback_id": ViewId.MODIFY_SUBMIT, "private_metadata": metadata,
            "title": {"type": "plain_text", "text": f"Modify plan v{run.plan_version}"[:24]},
            "submit": {"type": "plain_text", "text": "Revise"},
            "close": {"type": "plain_text", "text": "Cancel"}, "blocks": blocks}


def reject_modal(metadata: str) -> dict[str, Any]:
    return {"type": "modal", "callback_id": ViewId.REJECT_SUBMIT, "private_metadata": metadata,
            "title": {"type": "plain_text", "text": "Reject plan"},
            "submit": {"type": "plain_text", "text": "Reject"},
            "close": {"type": "plain_text", "text": "Cancel"},
            "blocks": [{"type": "input", "block_id": "reason",
                        "label": {"type": "plain_text", "text": "Why?"},
                        "element": {"type": "plain_text_input", "action_id": "value",
                                    "max_length": 500}}]}


def notice_modal(title: str, text: str) -> dict[str, Any]:
    return {"type": "modal", "title": {"type": "plain_text", "text": title[:24]},
            "close": {"type": "plain_text", "text": "Close"}, "blocks": [section(text)]}


def _fit(blocks: list[Block], limit: int = MAX_BLOCKS) -> list[Block]:
    """Drop middle blocks past the block or size budget, keeping header, footer and buttons."""
    keep_tail = 3
    while len(blocks) > limit or len(json.dumps(blocks)) > MAX_TOTAL_CHARS:
        if len(blocks) <= keep_tail + 2:
            break
        del blocks[-keep_tail - 1]
    return blocks
