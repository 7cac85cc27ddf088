"""Rich tables for ``deckhand eval``: per case, totals, differences, quality from real use."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import astuple

from rich.table import Table
from rich.text import Text

from agents.evaluation.planners import PlannerSpec
from agents.evaluation.quality import Maker, Tally
from agents.evaluation.report import Difference, Summary, verdict
from agents.evaluation.scoring import Outcome


def cases_table(spec: PlannerSpec, outcomes: Sequence[Outcome]) -> Table:
    """One row per case: result, F1, policy checks, latency, tokens and cost (the reasons
    are in case_notes)."""
    table = Table(title=f"Cases: {spec.label} (F1 of nodes and edges)")
    table.add_column("case", max_width=28, overflow="fold")
    for name, width in [("kind", 6), ("result", 10), ("node", 4), ("edge", 4), ("policy", 6),
                        ("ms", 3), *([("tokens", 6)] if spec.uses_model else [])]:
        table.add_column(name, min_width=width)
    for o in outcomes:
        f1s = ([f"{o.node_f1:.2f}", f"{o.edge_f1:.2f}"] if o.planned and o.kind != "refuse"
               else ["-", "-"])
        table.add_row(Text(o.case), o.kind, _result(o), *f1s, _policy(o), f"{o.latency_ms:.0f}",
                      *([_tokens(spec, o)] if spec.uses_model else []))
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
    table = Table(title="Cases side by side (F1 of nodes/edges)")
    table.add_column("case", max_width=28, overflow="fold")
    table.add_column("kind", min_width=6)
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
        ("passed", lambda s: f"{s.passed} of {s.cases}"),
        ("right plans", lambda s: f"{round(s.right_rate * s.to_plan)} of {s.to_plan}"),
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
        ("repairs (per case answered)", lambda s: f"{s.repairs} ({s.mean_repairs:.2f})"),
        ("no answer (model failed)", lambda s: _count(s.no_answer)),
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


def quality_table(found: Mapping[Maker, Tally], days: float) -> Table:
    """Real use, one column per maker (planner, prompt version, model): what people and runs
    did with its plans (``agents.evaluation.quality``)."""
    table = Table("", *(" ".join(filter(None, astuple(m))) for m in found),
                  title=f"Plans in real use, last {days:g} days")
    rows: list[tuple[str, Callable[[Tally], str]]] = [
        ("runs", lambda t: str(t.outcomes["planned"])),
        *((name, _share_of(outcome)) for name, outcome in QUALITY_ROWS),
        ("plan-diff changes per modified plan", lambda t: f"{t.changes_per_modified:.1f}"),
    ]
    for name, cell in rows:
        table.add_row(name, *(cell(t) for t in found.values()))
    return table


QUALITY_ROWS = [("approved unchanged", "approved_unchanged"), ("modified", "modified"),
                ("rejected", "rejected"), ("replanned while running", "replanned"),
                ("succeeded", "succeeded"), ("failed", "failed"),
                ("rolled back", "rolled_back")]


def _share_of(outcome: str) -> Callable[[Tally], str]:
    return lambda t: _share(t.outcomes[outcome], t.outcomes["planned"])


def _result(outcome: Outcome) -> Text:
    return Text(outcome.label, style="green" if outcome.passed else "bold red")


def _tokens(spec: PlannerSpec, outcome: Outcome) -> str:
    cost = spec.cost(outcome.input_tokens, outcome.output_tokens)
    return f"{outcome.tokens}" + (f" ${cost:.4g}" if cost is not None else "")


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

