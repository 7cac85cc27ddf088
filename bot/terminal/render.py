"""Rich renderables for the terminal: plan tables, live run status, summaries. Pure functions."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from agents.ids import short_id
from agents.plan import Plan, format_params
from agents.plan_diff import Mark, PlanDiff
from agents.runs import Run, RunStatus, StepState, StepStatus

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


def plan_table(plan: Plan) -> Group:
    """The plan as a table: steps with layers (steps in one layer run in parallel), rollback."""
    table = Table(title=f"{plan.goal}  (plan {short_id(plan.id)} v{plan.version}, "
                        f"hash {plan.hash[:12]})", title_justify="left")
    for column in ("layer", "step", "tool", "params", "after"):
        table.add_column(column, overflow="fold")
    for index, layer in enumerate(plan.layers(), start=1):
        mark = f"{index} ∥" if len(layer) > 1 else str(index)
        for step_id in layer:
            step = plan.step(step_id)
            table.add_row(mark, step.id, step.tool, format_params(step.params),
                          ", ".join(step.depends_on) or "—")
    parts: list[Table | Text] = [table]
    if plan.rollback:
        parts.append(_rollback_table(plan))
    parts.append(Text(f"requested by {plan.requested_by} · {plan.planner.footer()}", "dim"))
    return Group(*parts)


def _rollback_table(plan: Plan) -> Table:
    table = Table(title="on failure, roll back in this order", title_justify="left")
    for column in ("#", "step", "tool", "params"):
        table.add_column(column)
    for index, step in enumerate(plan.rollback, start=1):
        table.add_row(str(index), step.id, step.tool, format_params(step.params))
    return table


def status_table(plan: Plan, run: Run) -> Table:
    """Live status: one row per step (and rollback step), with hosts, duration and note."""
    color = RUN_STYLE.get(run.status, "bold")
    title = Text(f"run {short_id(run.id)} — {run.status.value}", color)
    table = Table(title=title, title_justify="left")
    for column in ("", "step", "hosts", "time", "note"):
        table.add_column(column, overflow="fold")
    for step in plan.steps:
        table.add_row(*_status_row(step.id, run.steps[step.id]))
    for undo in plan.rollback:
        state = run.rollback[undo.id]
        if state.status is not StepStatus.PENDING or run.status is RunStatus.ROLLING_BACK:
            table.add_row(*_status_row(f"↩ {undo.id}", state))
    return table


def _status_row(label: str, state: StepState) -> tuple[Text, str, str, str, str]:
    symbol, style = STATUS_STYLE[state.status]
    done = sum(1 for h in state.hosts.values() if h.status is StepStatus.SUCCEEDED)
    hosts = f"{done}/{len(state.hosts)}" if state.hosts else ""
    duration = f"{state.duration:.1f}s" if state.duration is not None else ""
    return Text(symbol, style), label, hosts, duration, state.error or ""


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
    if run.changed_hosts:
        lines.append((f"  hosts changed: {', '.join(run.changed_hosts)}", ""))
    if run.approvals:
        lines.append((f"  approved by {', '.join(a.user for a in run.approvals)}", ""))
    text = Text()
    for content, style in lines:
        text.append(content + "\n", style)
    return text


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
