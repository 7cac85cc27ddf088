"""A run's timeline as a PNG Gantt chart: one bar per step, or per host where a step fanned out.

The critical path is drawn dark with a black edge, failed steps red and marked, rollback steps
orange and hatched, cancelled steps grey. Sized for Slack: 900 px wide with large type, so it
stays legible when Slack shows the preview at about half size.

Rendering uses matplotlib's object API on the Agg canvas (no pyplot global state), so it is
safe to call from worker threads.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from agents.ids import short_id
from agents.plan.model import Plan
from agents.run.record import Phase, Run, StepState, StepStatus

WIDTH_IN, DPI = 6.0, 150
ROW_IN, CHROME_IN = 0.3, 1.4
MAX_ROWS = 40
LABEL_CHARS = 26
COLORS = {"critical": "#1f4e89", "step": "#8fb4dc", "failed": "#d62728",
          "rollback": "#f28e2b", "cancelled": "#9e9e9e"}


@dataclass(frozen=True)
class Bar:
    """One drawn bar: seconds from the run's start, and how it is styled."""

    label: str
    step_id: str
    host: str | None
    phase: Phase
    start: float
    end: float
    status: StepStatus
    critical: bool = False

    @property
    def kind(self) -> str:
        """How the bar is styled: critical, step, failed, cancelled or rollback."""
        if self.phase is Phase.ROLLBACK:
            return "rollback"
        if self.status is StepStatus.FAILED:
            return "failed"
        if self.status is StepStatus.CANCELLED:
            return "cancelled"
        return "critical" if self.critical else "step"


@dataclass(frozen=True)
class Row:
    """One line of the chart: its bars (none for a step that never ran)."""

    label: str
    bars: tuple[Bar, ...]
    note: str = ""


@dataclass(frozen=True)
class Timeline:
    """The rendered picture and what it shows."""

    png: bytes
    width: int
    height: int
    rows: tuple[Row, ...]
    hidden_rows: int = 0

    @property
    def bars(self) -> list[Bar]:
        """Every bar drawn, top to bottom."""
        return [b for r in self.rows for b in r.bars]

    def save(self, path: Path) -> None:
        """Write the PNG to ``path``."""
        path.write_bytes(self.png)


def timeline_rows(plan: Plan, run: Run) -> list[Row]:
    """The chart's rows: plan steps in the order they started, then rollback steps."""
    origin = run.started_at or run.created_at
    end = run.finished_at or max((_end(s) or origin for s in run.steps.values()), default=origin)
    durations = {s: st.duration or 0.0 for s, st in run.steps.items()}
    critical = set(plan.critical_path(durations)[0])
    order = {s.id: i for i, s in enumerate(plan.steps) if s.id in run.steps}
    steps = sorted(order, key=lambda s: (run.steps[s].started_at or float("inf"), order[s]))
    rows = [r for s in steps for r in _rows(s, run.steps[s], Phase.PLAN,
                                            origin, end, s in critical)]
    for step in plan.rollback:
        state = run.rollback.get(step.id)
        if state is not None and state.started_at is not None:
            rows += _rows(step.id, state, Phase.ROLLBACK, origin, end, False)
    return rows


def _rows(step_id: str, state: StepState, phase: Phase, origin: float, end: float,
          critical: bool) -> list[Row]:
    prefix = "↩ " if phase is Phase.ROLLBACK else ""
    if state.started_at is None:
        return [Row(_label(prefix + step_id), (), note=state.status.value)]
    if len(state.hosts) <= 1:
        bar = Bar(prefix + step_id, step_id, None, phase, state.started_at - origin,
                  (_end(state) or end) - origin, state.status, critical)
        return [Row(_label(bar.label), (bar,))]
    rows = []
    for host in state.hosts.values():
        started = host.started_at if host.started_at is not None else state.started_at
        finished = host.finished_at or _end(state) or end
        bar = Bar(f"{prefix}{step_id} · {host.host}", step_id, host.host, phase,
                  started - origin, finished - origin, host.status, critical)
        rows.append(Row(_label(bar.label), (bar,)))
    return rows


def _end(state: StepState) -> float | None:
    return state.finished_at


def _label(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def render_timeline(plan: Plan, run: Run) -> Timeline:
    """Draw the run's timeline and return it as PNG bytes with the rows it shows."""
    rows = timeline_rows(plan, run)
    shown, hidden = rows[:MAX_ROWS], max(0, len(rows) - MAX_ROWS)
    figure = Figure(figsize=(WIDTH_IN, CHROME_IN + ROW_IN * max(len(shown), 1)), dpi=DPI,
                    layout="constrained")
    canvas = FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    span = _draw(axes, shown)
    _decorate(axes, shown, span, plan, run, hidden)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    width, height = canvas.get_width_height()
    return Timeline(buffer.getvalue(), int(width), int(height), tuple(shown), hidden)


def _draw(axes: Axes, rows: list[Row]) -> float:
    """Bars and notes; returns the time span drawn, in seconds."""
    span = max((b.end for r in rows for b in r.bars), default=1.0) or 1.0
    for index, row in enumerate(rows):
        for bar in row.bars:
            width = max(bar.end - bar.start, span * 0.006)  # instant steps stay visible
            axes.barh(index, width, left=bar.start, height=0.62,
                      color=COLORS[bar.kind], edgecolor="black" if bar.critical else "none",
                      linewidth=1.4, hatch="//" if bar.kind == "rollback" else None)
            if bar.kind in ("failed", "cancelled"):
                axes.text(bar.start + width + span * 0.01, index,
                          f"✗ {bar.status.value}", va="center", fontsize=8,
                          color=COLORS[bar.kind], fontweight="bold")
        if not row.bars:
            axes.text(0, index, f"  {row.note}", va="center", fontsize=8,
                      color="#777777", style="italic")
    return span


def _decorate(ax: Axes, rows: list[Row], span: float, plan: Plan, run: Run,
              hidden: int) -> None:
    ax.set_yticks(range(len(rows)), [r.label for r in rows], fontsize=9)
    ax.invert_yaxis()
    ax.set_xlim(0, span * 1.18)
    ax.set_xlabel("seconds since the run started"
                  + (f"  (+{hidden} more rows not shown)" if hidden else ""), fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    title = f"{short_id(run.id)} · {run.status.value.replace('_', ' ')} · {plan.goal}"
    ax.set_title(title if len(title) <= 60 else title[:59] + "…",
                 fontsize=11, loc="left", fontweight="bold")
    kinds = {b.kind for r in rows for b in r.bars}
    names = {"critical": "critical path", "step": "step", "failed": "failed",
             "rollback": "rollback", "cancelled": "cancelled"}
    handles = [Patch(facecolor=COLORS[k], edgecolor="black" if k == "critical" else "none",
                     hatch="//" if k == "rollback" else None, label=names[k])
               for k in names if k in kinds]
    if handles and ax.figure is not None:  # below the chart, so it never hides a bar
        ax.figure.legend(handles=handles, loc="outside lower center", ncols=len(handles),
                         fontsize=8, frameon=False)


def save_timeline(plan: Plan, run: Run, path: Path) -> Timeline:
    """Render the timeline and write the PNG to ``path``."""
    timeline = render_timeline(plan, run)
    timeline.save(path)
    return timeline
