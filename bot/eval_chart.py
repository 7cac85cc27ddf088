"""``deckhand eval --chart out.png``: the quality figures of each configuration as grouped bars.

Drawn with matplotlib's object API on the Agg canvas (no pyplot state), like bot.timeline.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from agents.evaluation.report import Summary

FIGURES = (("right", "right_rate", "to_plan"), ("valid", "valid_rate", "to_plan"),
           ("refused", "refused_rate", "to_refuse"), ("node F1", "node_f1", "to_plan"),
           ("edge F1", "edge_f1", "to_plan"))
"""(label, Summary figure, the Summary count it is a share or mean over)."""
COLORS = ("#1f4e89", "#f28e2b", "#59a14f", "#9e9e9e")
WIDTH_IN, HEIGHT_IN, DPI = 7.0, 3.6, 150


def save_chart(summaries: Sequence[Summary], path: Path) -> Path:
    """Write the chart as PNG to ``path`` (one bar group per figure, one bar per config)."""
    chart_figure(summaries).savefig(path, format="png", dpi=DPI)
    return path


def chart_figure(summaries: Sequence[Summary]) -> Figure:
    """The chart, drawn but not saved: axis labels, and each figure's denominator under it."""
    figure = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    width = 0.8 / max(1, len(summaries))
    for i, summary in enumerate(summaries):
        values = [float(getattr(summary, name)) for _, name, _ in FIGURES]
        xs = [x + i * width for x in range(len(FIGURES))]
        bars = axes.bar(xs, values, width, label=summary.planner,
                        color=COLORS[i % len(COLORS)])
        axes.bar_label(bars, fmt="%.2f", fontsize=7, padding=2)
    axes.set_xticks([x + width * (len(summaries) - 1) / 2 for x in range(len(FIGURES))],
                    [_tick(label, over, summaries) for label, _, over in FIGURES])
    axes.set_ylim(0, 1.35)  # room above full bars and their labels for the legend
    axes.set_yticks([i / 5 for i in range(6)])  # the scale is 0..1; no tick above it
    axes.set_ylabel("share of cases (rates) or mean F1, 0 to 1")
    axes.set_xlabel("figure (n = the cases it is over)")
    axes.set_title(f"Plan quality over {summaries[0].cases if summaries else 0} cases")
    axes.legend(loc="upper center", fontsize=8, ncol=max(1, len(summaries)), frameon=False)
    return figure


def _tick(label: str, over: str, summaries: Sequence[Summary]) -> str:
    counts = sorted({int(getattr(s, over)) for s in summaries})
    return f"{label}\nn = {'/'.join(map(str, counts)) or 0}"
