"""Running cases through a planner configuration: one Outcome per case.

Each case is timed with the injected clock, its model traffic (tokens, a missing recording)
is read from the configuration's transport, and the plan that came back is validated and
scored. A planner's refusal is an outcome, not an error: only a bug escapes. A model that
gave no answer (ModelError: down, timed out, a wrong name) is "no answer", with the reason,
never a refusal; repairs are counted from what happened, a plan or not.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from agents.config import Config
from agents.errors import ModelError, NoPlanFound, PlanError, PlannerError
from agents.evaluation.cases import Case
from agents.evaluation.planners import Subject
from agents.evaluation.scoring import Outcome, Refusal, score
from agents.plan.model import Plan
from agents.plan.validation import validate_plan

Clock = Callable[[], float]
REASON_CHARS = 200


def run_cases(subject: Subject, cases: list[Case], config: Config, *,
              clock: Clock = time.perf_counter) -> list[Outcome]:
    """Every case through ``subject``, in order."""
    return [evaluate(subject, case, config, clock=clock) for case in cases]


def evaluate(subject: Subject, case: Case, config: Config, *,
             clock: Clock = time.perf_counter) -> Outcome:
    """What ``subject`` does with ``case``."""
    outcome = Outcome(case.label, case.kind, min_node_f1=case.min_node_f1,
                      min_edge_f1=case.min_edge_f1)
    traffic = subject.traffic
    if traffic is not None:
        traffic.begin(case.label)
    started = clock()
    try:
        plan: Plan | None = subject.plan(case.request)
    except PlanError as exc:
        plan = None
        _refused(outcome, _category(exc), str(exc))
        outcome.repairs = exc.repairs if isinstance(exc, PlannerError) else 0
    outcome.latency_ms = (clock() - started) * 1000
    if traffic is not None:
        usage = traffic.usage.get(case.label)
        outcome.input_tokens = usage.input_tokens if usage else 0
        outcome.output_tokens = usage.output_tokens if usage else 0
        if case.label in traffic.misses:
            _refused(outcome, "no recording", traffic.misses[case.label])
            return outcome
    if plan is not None:
        outcome.repairs = plan.planner.repairs
        outcome.valid = _valid(outcome, plan, config)
        score(outcome, case, plan, config)
    return outcome


def _category(exc: PlanError) -> Refusal:
    if isinstance(exc, NoPlanFound):
        return "declined"
    if isinstance(exc, ModelError):
        return "no answer"
    return "planner error" if isinstance(exc, PlannerError) else "invalid"


def _refused(outcome: Outcome, refusal: Refusal, message: str) -> None:
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    outcome.refusal, outcome.reason = refusal, " | ".join(lines[:2])[:REASON_CHARS]


def _valid(outcome: Outcome, plan: Plan, config: Config) -> bool:
    try:
        validate_plan(plan, config.catalog, config.inventory, config.policy)
    except PlanError as exc:
        _refused(outcome, "invalid", str(exc).splitlines()[-1])
        return False
    return True
