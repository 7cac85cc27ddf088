"""Rich tables for ``deckhand eval``: per case, totals, differences, quality from real use."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.table import Table
from rich.text import Text

from agents.evaluation.planners import PlannerSpec
from agents.evaluation.real_use import Quality
from agents.evaluation.report import Difference, Summary, verdict
from agents.evaluation.scoring import Outcome


def cases_table(spec: PlannerSpec, outcomes: Sequence[Outcome]) -> Table:
    """One row per case: result, F1, policy checks, latency, tokens, cost (why: case_notes)."""
    costs, tokens = spec.cost(0, 0) is not None, spec.uses_model
    table = Table(title=f"Cases: {spec.label}")
    _column(table, "case", max_width=22)
    for name in ("kind", "result", "node F1", "edge F1", "policy", "ms",
                 *(["tokens"] if tokens else []), *(["cost $"] if costs else [])):
        table.add_column(name, no_wrap=True, min_width=len(name))
    for o in outcomes:
        f1s = ([f"{o.node_f1:.2f}", f"{o.edge_f1:.2f}"] if o.planned and o.kind != "refuse"
               else ["-", "-"])
        cost = spec.cost(o.input_tokens, o.output_tokens)
        table.add_row(Text(o.case), o.kind, _result(o), *f1s, _policy(o), f"{o.latency_ms:.0f}",
                      *([str(o.tokens)] if tokens else []),
                      *([f"{cost:.5f}"] if cost is not None else []))
    return table


def case_notes(outcomes: Sequence[Outcome]) -> list[str]:
    """Why each case that was refused or broke a policy check went that way, a line each."""
    out = []
    for o in outcomes:
        why = [f"{o.refusal}: {o.reason}"] if o.refusal else []
        why += [f"{v.check} ✗ {v}" for v in o.violations]
        if why:
            out.append(f"{'pass' if o.passed else 'FAIL'} {o.case}: {'; '.join(why)}")
    return out


def compare_table(labels: Sequence[str], a: Sequence[Outcome], b: Sequence[Outcome],
                  diffs: Sequence[Difference]) -> Table:
    """Both configurations' verdict per case, differing rows marked."""
    differing = {d.case for d in diffs}
    table = Table(title="Cases side by side")
    _column(table, "case", max_width=28)
    table.add_column("kind", no_wrap=True, min_width=6)
    table.add_column(f"A: {labels[0]}")
    table.add_column(f"B: {labels[1]}")
    table.add_column("", no_wrap=True)
    for left, right in zip(a, b, strict=True):
        mark = Text("differs", style="bold yellow") if left.case in differing else Text("")
        table.add_row(Text(left.case), left.kind, _verdict(left), _verdict(right), mark)
    return table


def summary_table(summaries: Sequence[Summary]) -> Table:
    """One row per figure, one column per configuration (fits a narrow terminal)."""
    table = Table("", *(s.planner for s in summaries), title="Totals")
    rows: list[tuple[str, Callable[[Summary], str | Text]]] = [
        ("cases", lambda s: str(s.cases)),
        ("valid-plan rate", lambda s: f"{s.valid_rate:.2f} of {s.to_plan}"),
        ("refused", lambda s: f"{s.refused}/{s.to_refuse}"),
        ("node F1", lambda s: f"{s.node_f1:.2f}"),
        ("edge F1", lambda s: f"{s.edge_f1:.2f}"),
        ("promotion order broken", lambda s: _count(s.promotion_violations)),
        ("rollback missing", lambda s: _count(s.rollback_missing)),
        ("unsafe plans validation let pass", lambda s: _count(s.unsafe_valid)),
        ("latency p50 / p95 ms", lambda s: f"{s.latency_p50_ms:.1f} / {s.latency_p95_ms:.1f}"),
        ("tokens per plan", lambda s: f"{s.tokens_per_plan:.0f}"),
        ("cost per plan $", lambda s: "-" if s.cost_per_plan is None
         else f"{s.cost_per_plan:.5f}"),
        ("repairs per plan", lambda s: f"{s.mean_repairs:.2f}"),
        ("refusal reasons", _reasons),
        ("pass rate by kind", lambda s: ", ".join(f"{k} {v:.2f}" for k, v in s.by_kind.items())),
    ]
    for name, cell in rows:
        table.add_row(name, *(cell(s) for s in summaries))
    return table


def _reasons(summary: Summary) -> str:
    found = sorted(summary.refusal_reasons.items())
    return ", ".join(f"{n} {why}" for why, n in found) or "none"


def differences_table(labels: Sequence[str], diffs: Sequence[Difference]) -> Table:
    table = Table("case", "kind", f"A: {labels[0]}", f"B: {labels[1]}",
                  title=f"Cases whose outcome differs: {len(diffs)}")
    for d in diffs:
        table.add_row(Text(d.case), d.kind, Text(d.a), Text(d.b))
    return table


def quality_table(found: Sequence[Quality], days: float) -> Table:
    """Real use per group: what people and runs did with the plans."""
    columns = list(found[0].group) if found else ["planner"]
    table = Table(*columns, "runs", "approved unchanged", "modified (diff lines)", "rejected",
                  "replanned", "failed", "rolled back",
                  title=f"Plans in real use, last {days:g} days")
    for q in found:
        table.add_row(*(Text(v) for v in q.group.values()), str(q.runs),
                      _share(q.approved_unchanged, q.runs),
                      f"{_share(q.modified, q.runs)} ({q.lines_per_modified:.1f})",
                      _share(q.rejected, q.runs), _share(q.replanned, q.runs),
                      _share(q.failed, q.runs), _share(q.rolled_back, q.runs))
    return table


def _result(outcome: Outcome) -> Text:
    return Text("pass", style="green") if outcome.passed else Text("FAIL", style="bold red")


def _verdict(outcome: Outcome) -> Text:
    return Text(verdict(outcome), style="green" if outcome.passed else "red")


def _policy(outcome: Outcome) -> Text:
    if not outcome.planned:
        return Text("-", style="dim")
    broken = sorted({v.check for v in outcome.violations})
    return Text(" ".join(f"{c} ✗" for c in broken), style="bold red") if broken else Text("ok")


def _count(n: int) -> Text:
    return Text(str(n), style="bold red" if n else "")


def _share(n: int, total: int) -> str:
    return f"{n} ({n / total:.0%})" if total else "0"


def _column(table: Table, name: str, *, max_width: int) -> None:
    """A column whose long text is cut with an ellipsis rather than wrapped over rows."""
    table.add_column(name, no_wrap=True, overflow="ellipsis", max_width=max_width)
