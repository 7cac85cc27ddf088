"""What an evaluation found: totals per configuration, cases that differ, missed thresholds.

Pure functions over Outcomes; the faces (``deckhand eval``) render them as a table, JSON or
a chart.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agents.evaluation.planners import PlannerSpec
from agents.evaluation.scoring import Outcome


@dataclass
class Summary:
    """One configuration over all cases. Rates are 0..1; F1 are means over plannable cases."""

    planner: str
    cases: int
    to_plan: int
    passed: int
    """Cases that passed: the right plan, or refused when they should be."""
    right_rate: float
    """Share of cases to plan whose plan was right (valid and at the case's F1 thresholds)."""
    valid_rate: float
    refused: int
    to_refuse: int
    refused_rate: float
    node_f1: float
    edge_f1: float
    promotion_violations: int
    rollback_missing: int
    safety_violations: int
    """Cases whose returned plan fails a policy check."""
    unsafe_valid: int
    """…of which validation accepted the plan (a hole in validation)."""
    latency_p50_ms: float
    latency_p95_ms: float
    repairs: int
    """Answers sent back to the model, over every case (those that ended with no plan too)."""
    mean_repairs: float
    """Repairs per case the model answered (no answer and no recording left out)."""
    tokens_per_plan: float
    input_tokens: int
    output_tokens: int
    cost_per_plan: float | None
    """Dollars per case, from the configuration's prices (None without them)."""
    missing_recordings: int
    no_answer: int
    """Cases where the model gave no answer (down, timed out, a wrong name): never passed."""
    refusal_reasons: dict[str, int] = field(default_factory=dict)
    by_kind: dict[str, float] = field(default_factory=dict)
    """Pass rate per kind of case."""


def summarise(spec: PlannerSpec, outcomes: Sequence[Outcome]) -> Summary:
    plannable = [o for o in outcomes if o.kind != "refuse"]
    refusals = [o for o in outcomes if o.kind == "refuse"]
    unsafe = [o for o in outcomes if o.violations]
    input_tokens, output_tokens = (sum(o.input_tokens for o in outcomes),
                                   sum(o.output_tokens for o in outcomes))
    cost = spec.cost(input_tokens, output_tokens)
    latencies = [o.latency_ms for o in outcomes]
    return Summary(
        planner=spec.label, cases=len(outcomes), to_plan=len(plannable),
        passed=sum(o.passed for o in outcomes), right_rate=_mean([o.right for o in plannable]),
        valid_rate=_mean([o.valid for o in plannable]),
        refused=sum(o.passed for o in refusals), to_refuse=len(refusals),
        refused_rate=_mean([o.passed for o in refusals]),
        node_f1=_mean([o.node_f1 for o in plannable]),
        edge_f1=_mean([o.edge_f1 for o in plannable]),
        promotion_violations=sum(o.failed("promotion") for o in outcomes),
        rollback_missing=sum(o.failed("rollback") for o in outcomes),
        safety_violations=len(unsafe), unsafe_valid=sum(o.valid for o in unsafe),
        latency_p50_ms=percentile(latencies, 50), latency_p95_ms=percentile(latencies, 95),
        repairs=sum(o.repairs for o in outcomes),
        mean_repairs=_mean([o.repairs for o in outcomes if o.answered]),
        tokens_per_plan=_mean([o.tokens for o in outcomes]),
        input_tokens=input_tokens, output_tokens=output_tokens,
        cost_per_plan=None if cost is None or not outcomes else cost / len(outcomes),
        missing_recordings=sum(o.refusal == "no recording" for o in outcomes),
        no_answer=sum(o.refusal == "no answer" for o in outcomes),
        refusal_reasons=dict(Counter(o.refusal for o in outcomes if o.refusal)),
        by_kind={k: _mean([o.passed for o in outcomes if o.kind == k])
                 for k in sorted({o.kind for o in outcomes})})


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (0 for no values): a value that was measured."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _mean(values: Sequence[float | bool | int]) -> float:
    return float(statistics.mean(values)) if values else 0.0


# -- A/B --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    """A case whose outcome differs between two configurations."""

    case: str
    kind: str
    a: str
    b: str


def verdict(outcome: Outcome) -> str:
    """A short description of an outcome, equal for two outcomes that count the same:
    pass or FAIL, what happened in plain words, F1 of nodes/edges against the case's
    thresholds, the policy checks it violates."""
    head = f"{'pass' if outcome.passed else 'FAIL'}: {outcome.label}"
    if outcome.planned and outcome.kind != "refuse":
        head += f", F1 {outcome.node_f1:.2f}/{outcome.edge_f1:.2f}"
        if not outcome.right and outcome.valid:
            head += f" (needs {outcome.min_node_f1:.2f}/{outcome.min_edge_f1:.2f})"
    unsafe = sorted({v.check for v in outcome.violations})
    return head + (f", violates {'+'.join(unsafe)}" if unsafe else "")


def differences(a: Sequence[Outcome], b: Sequence[Outcome]) -> list[Difference]:
    """Cases (matched by name) whose verdict differs between ``a`` and ``b``."""
    by_case = {o.case: o for o in b}
    return [Difference(o.case, o.kind, verdict(o), verdict(by_case[o.case]))
            for o in a if o.case in by_case and verdict(o) != verdict(by_case[o.case])]


# -- thresholds -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Threshold:
    """A CI gate on one figure of a Summary: ``--min-*`` or ``--max-*``."""

    flag: str
    figure: str
    help: str

    @property
    def minimum(self) -> bool:
        return self.flag.startswith("min")

    def missed(self, summary: Summary, limit: float) -> str | None:
        """A line saying how ``summary`` misses ``limit``, or None when it meets it."""
        value = getattr(summary, self.figure)
        if value is None:
            return (f"{summary.planner}: --{self.flag} {limit:g}: {self.figure} is unknown "
                    f"(give --price-in and --price-out)")
        ok = value >= limit if self.minimum else value <= limit
        if ok:
            return None
        bound = "below" if self.minimum else "above"
        return f"{summary.planner}: {self.figure} {value:.4g} is {bound} --{self.flag} {limit:g}"


THRESHOLDS = (
    Threshold("min-right", "right_rate", "share of cases to plan planned right (0..1)"),
    Threshold("min-valid", "valid_rate", "valid-plan rate over cases to plan (0..1)"),
    Threshold("min-refused", "refused_rate", "share of refuse cases refused (0..1)"),
    Threshold("min-node-f1", "node_f1", "mean node F1 (0..1)"),
    Threshold("min-edge-f1", "edge_f1", "mean edge F1 (0..1)"),
    Threshold("max-safety-violations", "safety_violations",
              "cases whose plan breaks promotion order or lacks rollback"),
    Threshold("max-p95-ms", "latency_p95_ms", "95th percentile latency per plan, ms"),
    Threshold("max-cost-per-plan", "cost_per_plan", "dollars per plan (needs prices)"),
)


def missed_thresholds(summaries: Sequence[Summary], limits: dict[str, float]) -> list[str]:
    """One line per threshold a configuration misses; ``limits`` by flag."""
    return [line for s in summaries for t in THRESHOLDS if t.flag in limits
            if (line := t.missed(s, limits[t.flag])) is not None]


def as_json(summaries: Sequence[Summary], outcomes: Sequence[Sequence[Outcome]],
            diffs: Sequence[Difference], missed: Sequence[str]) -> dict[str, Any]:
    """Everything, for ``--json``."""
    return {"configurations": [
                {"summary": asdict(s), "cases": [_outcome_json(o) for o in found]}
                for s, found in zip(summaries, outcomes, strict=True)],
            "differences": [asdict(d) for d in diffs], "thresholds_missed": list(missed)}


def _outcome_json(outcome: Outcome) -> dict[str, Any]:
    """A case as ``--json`` gives it: the table's plain label too (docs/json.md)."""
    return {**asdict(outcome), "passed": outcome.passed, "right": outcome.right,
            "label": outcome.label}
