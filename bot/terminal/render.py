"""Rich renderables for the terminal: plan tables, live run status, summaries. Pure functions."""

from __future__ import annotations

import time
from collections.abc import Mapping

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from agents.ids import short_id
from agents.plan.diff import Mark, PlanDiff
from agents.plan.model import Plan, PlannerInfo, RollbackStep, Step, format_params
from agents.plan.targets import PlanTargets
from agents.run.record import Run, RunStatus, StepState, StepStatus
from agents.run.results import listed, tally
from agents.run.unreplicated import replica_wait_line

STATUS_STYLE = {
    StepStatus.PENDING: ("·", "dim"),
    StepStatus.RUNNING: ("▶", "bold yellow"),
    StepStatus.SUCCEEDED: ("✓", "green"),
    StepStatus.FAILED: ("✗", "bold red"),
    StepStatus.SKIPPED: ("-", "dim"),
    StepStatus.CANCELLED: ("■", "magenta"),
}

RUN_STYLE = {
    RunStatus.SUCCEEDED: "bold green",
    RunStatus.ROLLED_BACK: "bold yellow",
    RunStatus.FAILED: "bold red",
    RunStatus.ROLLBACK_FAILED: "bold red",
    RunStatus.CANCELLED: "magenta",
    RunStatus.INTERRUPTED: "bold red",
}


def plan_table(plan: Plan, targets: PlanTargets) -> Group:
    """The plan as a table: steps with layers (steps in one layer run in parallel), where
    each runs, rollback, and every environment and host the plan can touch."""
    table = Table(title=Text(f"{plan.goal}  (plan {short_id(plan.id)} v{plan.version}, "
                             f"hash {plan.hash[:12]})"), title_justify="left")
    table.add_column("layer", no_wrap=True)
    longest_id = max(len(s.id) for s in plan.steps)
    table.add_column("step · tool · where · after", min_width=longest_id,
                     max_width=max(longest_id, 26))
    table.add_column("params", min_width=_longest_word(plan), overflow="fold")
    for index, layer in enumerate(plan.layers(), start=1):
        mark = f"{index} ∥" if len(layer) > 1 else str(index)
        for step_id in layer:
            step = plan.step(step_id)
            table.add_row(mark, _step_cell(step.id, step.tool, step.depends_on,
                                           targets.of(step.id).describe()),
                          _params_cell(step))
    parts: list[Table | Text] = [table]
    if plan.rollback:
        parts.append(_rollback_table(plan, targets))
    limited = f" (--limit {','.join(plan.limit)})" if plan.limit else ""
    parts.append(Text(f"touches: {', '.join(targets.scopes)} · hosts "
                      f"{', '.join(targets.hosts) or 'none'}{limited}", "bold"))
    parts.append(Text(f"requested by {plan.requested_by} · {plan.planner.footer()}", "dim"))
    return Group(*parts)


def _step_cell(step_id: str, tool: str, after: list[str], where: str) -> Text:
    """Step id, then its tool, where it runs and its dependencies on a dim line: several
    columns in one, so the table fits 80 columns without breaking a word. Text, not
    markup: a plan's ``[/x]`` is shown as written."""
    cell = Text(step_id, "bold")
    cell.append(f"\n{tool} · {where}" + (f" · after {', '.join(after)}" if after else ""),
                "dim")
    return cell


def _params_cell(step: Step) -> Text:
    """The parameters, then any success checks the plan adds (approvers must see them)."""
    cell = Text(format_params(step.params, PARAMS_LIMIT))
    if _checks(step):
        cell.append(f"\nchecks: {_checks(step)}", "yellow")
    return cell


def _checks(step: Step | RollbackStep) -> str:
    """The success checks a plan adds to its tool's own (shown to approvers)."""
    return step.success.describe() if isinstance(step, Step) and step.success else ""


PARAMS_LIMIT = 400
"""Params are shown whole up to here; the table wraps them between ``k=v`` pairs."""


def _longest_word(plan: Plan) -> int:
    """The widest ``k=v`` pair (capped), so the params column never breaks one mid-word."""
    words = [w for s in plan.all_steps for w in format_params(s.params, PARAMS_LIMIT).split()]
    return min(max((len(w) for w in words), default=6), 40)


def _rollback_table(plan: Plan, targets: PlanTargets) -> Table:
    table = Table(title="on failure, roll back in this order", title_justify="left")
    table.add_column("#", no_wrap=True)
    table.add_column("step · tool · where")
    table.add_column("params", overflow="fold")
    for index, step in enumerate(plan.rollback, start=1):
        table.add_row(str(index), _step_cell(step.id, step.tool, [],
                                             targets.of(step.id).describe()),
                      Text(format_params(step.params, PARAMS_LIMIT)))
    return table


def status_table(plan: Plan, run: Run, hosts: Mapping[str, int] | None = None) -> Table:
    """Live status: one row per step (and rollback step), with hosts, duration and note.

    ``hosts``: how many hosts each step targets (Services.host_counts), for ``1/2`` while a
    one-at-a-time rollout has started only the first.
    """
    color = RUN_STYLE.get(run.status, "bold")
    table = Table(title=Text(f"run {short_id(run.id)} — {run.status.value}", color),
                  title_justify="left")
    for column in ("", "step", "hosts", "time"):
        table.add_column(column, no_wrap=True)
    table.add_column("note")
    for state in _states([s.id for s in plan.steps], run.steps, run.plan_version):
        table.add_row(*_status_row(state.id, state, (hosts or {}).get(state.id, 0)))
    for state in _states([r.id for r in plan.rollback], run.rollback, run.plan_version):
        if state.status is not StepStatus.PENDING or run.status is RunStatus.ROLLING_BACK:
            table.add_row(*_status_row(f"↩ {state.id}", state))
    return table


def _states(shown: list[str], states: Mapping[str, StepState],
            version: int) -> list[StepState]:
    """The steps of the plan being shown, then any the run has beside them: a revision
    (replanned after a failure) can drop a step the table shows, or add others."""
    dropped = [StepState(id=sid, status=StepStatus.SKIPPED,
                         error=f"not in plan version {version} (replanned)")
               for sid in shown if sid not in states]
    by_id = {s.id: s for s in dropped} | dict(states)
    return [by_id[sid] for sid in [*shown, *(k for k in states if k not in shown)]]


def live_view(plan: Plan, run: Run, hosts: Mapping[str, int] | None = None,
              hint: str | None = None) -> RenderableType:
    """The live status table, with the pause in force and ``hint`` (which keys do what)
    on a line each below it."""
    lines = [Text(paused_line(run), "bold yellow")] if run.paused is not None else []
    waiting = replica_wait_line(run)
    lines += [Text(f"⏳ {waiting}", "yellow")] if waiting else []
    lines += [Text(hint, "dim")] if hint else []
    table = status_table(plan, run, hosts)
    return Group(table, *lines) if lines else table


def paused_line(run: Run) -> str:
    """Who paused ``run`` and how, since when, what waits, and when it rolls back unless
    resumed ("" when it is not paused): the live table's line and ``runs show``'s."""
    pause = run.paused
    if pause is None:
        return ""
    line = f"⏸ paused by {pause.by} ({pause.via}) since {_hms(pause.at)}"
    line += f" — {pause.before} waits" if pause.before else ""
    line += f"; rolls back at {_hms(pause.until)} unless resumed" if pause.until else ""
    return line


def _hms(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def _status_row(label: str, state: StepState,
                total: int = 0) -> tuple[Text, Text, str, str, Text]:
    symbol, style = STATUS_STYLE[state.status]
    tallied = tally(state)
    total = max(total, tallied.total)
    hosts = f"{tallied.succeeded}/{total}" if total else ""
    duration = f"{state.duration:.1f}s" if state.duration is not None else ""
    note = Text(state.error or "")
    if tallied.failed and total > 1:
        note.append(f"{' · ' if state.error else ''}failed on {len(tallied.failed)}: "
                    f"{listed([h.host for h in tallied.failed], MAX_LISTED)}", "red")
    return Text(symbol, style), Text(label), hosts, duration, note


MAX_LISTED = 8
"""Host names listed in a note or summary line before "+N more"."""


def summary(plan: Plan, run: Run) -> Text:
    """Final status, wall time, critical path and what changed."""
    durations = {s: st.duration or 0.0 for s, st in run.steps.items()}
    path, length = plan.critical_path(durations)
    lines = [
        (f"{run.status.value.upper()}", RUN_STYLE.get(run.status, "bold")),
        (f"  wall time {run.duration or 0:.1f}s · critical path {length:.1f}s: "
         f"{' → '.join(path)}", ""),
    ]
    if run.reason:
        lines.append((f"  why: {run.reason}", ""))
    lines += [(f"  {line}", "red") for line in _failed_hosts(run)]
    if run.changed_hosts:
        lines.append((f"  hosts changed ({len(run.changed_hosts)}): "
                      f"{listed(run.changed_hosts, MAX_LISTED * 2)}", ""))
    if run.approvals:
        lines.append((f"  approved by {', '.join(a.user for a in run.approvals)}", ""))
    text = Text()
    for content, style in lines:
        text.append(content + "\n", style)
    return text


def _failed_hosts(run: Run) -> list[str]:
    """One line per step that failed on some of several hosts: which, up to a bound, and
    why on the first (the others usually fail alike; ``runs show`` has each one's note)."""
    lines = []
    states = [("", s) for s in run.steps.values()] + [("↩ ", s) for s in run.rollback.values()]
    for mark, state in states:
        tallied = tally(state)
        if not tallied.failed or tallied.total <= 1:
            continue
        first = tallied.failed[0]
        lines.append(f"{mark}{state.id} failed on {len(tallied.failed)}/{tallied.total} hosts: "
                     f"{listed([h.host for h in tallied.failed], MAX_LISTED * 2)} "
                     f"(first: {first.host}: {(first.error or 'failed')[:200]})")
    return lines


DIFF_STYLE = {Mark.ADDED: "green", Mark.REMOVED: "red", Mark.CHANGED: "yellow"}


def diff_text(diff: PlanDiff) -> Text:
    """What changed since the previous version: one coloured, marked line per change."""
    text = Text(f"changes since v{diff.old_version} ({diff.summary()})\n", "bold")
    for line in diff.lines():
        where = "rollback " if line.rollback else ""
        text.append(f"  {line.mark.value} ", DIFF_STYLE[line.mark])
        if line.step:
            text.append(f"{where}{line.step}", "bold")
            text.append(f"  {line.text}\n")
        else:
            text.append(f"{where}{line.text}\n")
    return text


def provenance_text(plans: list[Plan]) -> Text:
    """What made each version (``deckhand runs show RUN --llm``): planner, prompt and model,
    settings, cost, and the model's answer as recorded (redacted and bounded already)."""
    text = Text()
    for plan in plans:
        info = plan.planner
        text.append(f"v{plan.version}  ", "bold")
        if info.edited_by:
            text.append(f"edited by hand by {info.edited_by}\n")
        elif info.model is None:
            text.append(f"{info.name} · no model · {info.latency_ms:.0f} ms\n")
        else:
            text.append(f"{info.prompt or 'prompt'}@{info.prompt_version or 'not recorded'}\n")
            _llm_lines(text, info)
    return text


def _llm_lines(text: Text, info: PlannerInfo) -> None:
    seed = "none" if info.seed is None else str(info.seed)
    temperature = "not recorded" if info.temperature is None else f"{info.temperature:g}"
    rows = [("model", f"{info.model} (answered: {info.response_model or 'not recorded'})"),
            ("settings", f"temperature {temperature} · seed {seed}"),
            ("tokens", f"{info.prompt_tokens} in · {info.completion_tokens} out"),
            ("latency", f"{info.latency_ms:.0f} ms · {info.repairs} repair(s)")]
    rows += [("note", info.note)] if info.note else []
    for label, value in rows:
        text.append(f"    {label:<9}", "dim")
        text.append(f"{value}\n")
    text.append("    answer\n", "dim")
    for line in (info.answer or "(not recorded)").splitlines():
        text.append(f"      {line}\n")
