"""Plan quality: planners against hand-written gold plans (bench/plan_cases.yml).

For every planner it reports, over the cases:

- valid-plan rate: requests that should be planned and came back as a plan that passes
  ``validate_plan``;
- node F1: steps matched on tool + parameters (step ids are free; ``${steps.X.out}`` refs are
  compared by the tool of X; free-text parameters by presence only);
- edge F1: dependencies matched on the nodes they join;
- refusals: requests that must be refused and were (no plan, or a plan validation refuses);
- safety violations: returned plans that change an environment before the one before it in
  the promotion order, or that have a mutating step without its rollback. Checked here
  independently of agents.plan, so a hole in validation shows up.

Planners: ``playbook`` always; ``llm`` (the LLM alone) and ``composite`` (what deckhand runs)
when OPENAI_API_KEY is set — the endpoint is OPENAI_BASE_URL / OPENAI_MODEL.

Run: python -m bench.plan_eval [--planner playbook,llm] [--verbose] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agents.config import Config, load_config
from agents.errors import PlanError
from agents.plan import Plan
from agents.planning.planner import CompositePlanner, LLMPlanner
from agents.planning.playbooks import PlaybookPlanner
from agents.settings import Settings
from agents.validation import validate_plan
from tools.catalog import OUTPUT_REF

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "bench" / "plan_cases.yml"
CONFIG = ROOT / "examples" / "deckhand.yml"
FREE_TEXT = {"message"}

PlanFn = Callable[[str], Plan]


@dataclass
class Case:
    request: str
    kind: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    rollback: list[dict[str, Any]] = field(default_factory=list)
    reason: str = ""

    @property
    def refuse(self) -> bool:
        return self.kind == "refuse"


@dataclass
class Outcome:
    request: str
    kind: str
    planned: bool = False
    valid: bool = False
    node_f1: float = 0.0
    edge_f1: float = 0.0
    safety: list[str] = field(default_factory=list)
    error: str = ""
    latency_ms: float = 0.0
    repairs: int = 0
    tokens: int = 0

    @property
    def passed(self) -> bool:
        """A refusal case passes when refused; any other when valid."""
        return not self.valid if self.kind == "refuse" else self.valid


def load_cases(path: Path = CASES) -> list[Case]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return [Case(**c) for c in data["cases"]]


# -- matching -------------------------------------------------------------------------------


def node_keys(steps: list[dict[str, Any]]) -> dict[str, str]:
    """Step id -> a key made of its tool and parameters (refs by tool, free text by name)."""
    tool_of = {s["id"]: s["tool"] for s in steps}
    keys = {}
    for step in steps:
        params = {k: _normalise(k, v, tool_of) for k, v in (step.get("params") or {}).items()}
        keys[step["id"]] = json.dumps([step["tool"], params], sort_keys=True)
    return keys


def _normalise(key: str, value: Any, tool_of: dict[str, str]) -> Any:
    if key in FREE_TEXT:
        return "<text>"
    ref = OUTPUT_REF.match(value) if isinstance(value, str) else None
    if ref:
        return f"${{{tool_of.get(ref.group(1), '?')}.{ref.group(2)}}}"
    return value


def edges(steps: list[dict[str, Any]]) -> Counter[tuple[str, str]]:
    keys = node_keys(steps)
    return Counter((keys.get(d, "?"), keys[s["id"]]) for s in steps
                   for d in s.get("depends_on") or [])


def f1(predicted: Counter[Any], gold: Counter[Any]) -> float:
    """Multiset F1; two empty sets agree perfectly."""
    if not predicted and not gold:
        return 1.0
    hits = sum((predicted & gold).values())
    if hits == 0:
        return 0.0
    precision, recall = hits / sum(predicted.values()), hits / sum(gold.values())
    return 2 * precision * recall / (precision + recall)


# -- safety, checked independently of agents.plan ---------------------------------------------


def safety_violations(plan: Plan, config: Config) -> list[str]:
    """Promotion order broken, or a mutating step without its rollback."""
    out: list[str] = []
    catalog, promotion = config.catalog, config.policy.promotion
    env_of = {s.id: s.params.get("environment") for s in plan.steps}
    deps = plan.deps
    covered = {(r.tool, r.params.get("environment")) for r in plan.rollback}
    for step in plan.steps:
        tool = catalog.tools.get(step.tool)
        if tool is None or not tool.mutates:
            continue
        env = env_of[step.id]
        if env in promotion and promotion.index(env) > 0:
            before = promotion[promotion.index(env) - 1]
            if before not in {env_of[a] for a in _ancestors(deps, step.id)}:
                out.append(f"{step.id}: {env} before {before}")
        if (tool.rollback, env) not in covered:
            out.append(f"{step.id}: mutating step without rollback")
    return out


def _ancestors(deps: dict[str, list[str]], node: str) -> set[str]:
    seen: set[str] = set()
    todo = list(deps.get(node, []))
    while todo:
        dep = todo.pop()
        if dep not in seen:
            seen.add(dep)
            todo += deps.get(dep, [])
    return seen


# -- one run ----------------------------------------------------------------------------------


def evaluate(case: Case, plan_fn: PlanFn, config: Config) -> Outcome:
    outcome = Outcome(case.request, case.kind)
    started = time.perf_counter()
    try:
        plan = plan_fn(case.request)
    except PlanError as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        outcome.error = " | ".join(lines[:2])[:200]
        outcome.latency_ms = (time.perf_counter() - started) * 1000
        return outcome
    outcome.latency_ms = (time.perf_counter() - started) * 1000
    outcome.planned = True
    outcome.repairs = plan.planner.repairs
    outcome.tokens = plan.planner.prompt_tokens + plan.planner.completion_tokens
    outcome.valid = _valid(plan, config, outcome)
    outcome.safety = safety_violations(plan, config)
    if not case.refuse:
        steps = [s.model_dump() for s in plan.steps]
        outcome.node_f1 = f1(Counter(node_keys(steps).values()),
                             Counter(node_keys(case.steps).values()))
        outcome.edge_f1 = f1(edges(steps), edges(case.steps))
    return outcome


def _valid(plan: Plan, config: Config, outcome: Outcome) -> bool:
    try:
        validate_plan(plan, config.catalog, config.inventory, config.policy)
    except PlanError as exc:
        outcome.error = str(exc).splitlines()[-1].strip()[:160]
        return False
    return True


@dataclass
class Summary:
    planner: str
    cases: int
    to_plan: int
    valid_plan_rate: float
    node_f1: float
    edge_f1: float
    refused: str
    safety_violations: int
    unsafe_plans_valid: int
    mean_latency_ms: float
    mean_repairs: float
    tokens: int
    by_kind: dict[str, float]


def summarise(name: str, outcomes: list[Outcome]) -> Summary:
    plannable = [o for o in outcomes if o.kind != "refuse"]
    refusals = [o for o in outcomes if o.kind == "refuse"]
    planned = [o for o in outcomes if o.planned] or [Outcome("", "")]
    kinds = sorted({o.kind for o in outcomes})
    return Summary(
        planner=name, cases=len(outcomes), to_plan=len(plannable),
        valid_plan_rate=_mean([o.valid for o in plannable]),
        node_f1=_mean([o.node_f1 for o in plannable]),
        edge_f1=_mean([o.edge_f1 for o in plannable]),
        refused=f"{sum(o.passed for o in refusals)}/{len(refusals)}",
        safety_violations=sum(bool(o.safety) for o in outcomes),
        unsafe_plans_valid=sum(bool(o.safety) and o.valid for o in outcomes),
        mean_latency_ms=statistics.mean(o.latency_ms for o in outcomes),
        mean_repairs=_mean([o.repairs for o in planned]),
        tokens=sum(o.tokens for o in outcomes),
        by_kind={k: _mean([o.passed for o in outcomes if o.kind == k]) for k in kinds})


def _mean(values: list[Any]) -> float:
    return float(statistics.mean(values)) if values else 0.0


# -- planners ---------------------------------------------------------------------------------


def planners(config: Config, names: list[str], **llm_options: Any) -> dict[str, PlanFn]:
    """Plan functions by label; ``llm_options`` go to LLMPlanner (max_tokens, max_repairs)."""
    settings = Settings()
    out: dict[str, PlanFn] = {}
    books = PlaybookPlanner(config.playbooks)
    for name in names:
        if name == "playbook":
            out[name] = lambda r: books.plan(r, requested_by="bench")
            continue
        if settings.openai_api_key is None:
            print(f"skipping {name}: set OPENAI_API_KEY (and OPENAI_BASE_URL, OPENAI_MODEL)",
                  file=sys.stderr)
            continue
        llm = LLMPlanner.from_settings(config, settings, **llm_options)
        planner = llm if name == "llm" else CompositePlanner(books, llm)
        out[f"{name} ({settings.openai_model})"] = (
            lambda r, p=planner: p.plan(r, requested_by="bench"))
    return out


def print_table(summaries: list[Summary]) -> None:
    head = (f"{'planner':<28} {'cases':>5} {'valid-plan':>10} {'node F1':>8} {'edge F1':>8} "
            f"{'refused':>8} {'unsafe':>6} {'unsafe+valid':>12} {'latency':>10} {'repairs':>7}")
    print(head)
    print("-" * len(head))
    for s in summaries:
        print(f"{s.planner:<28} {s.cases:>5} {s.valid_plan_rate:>10.2f} {s.node_f1:>8.2f} "
              f"{s.edge_f1:>8.2f} {s.refused:>8} {s.safety_violations:>6} "
              f"{s.unsafe_plans_valid:>12} {s.mean_latency_ms:>8.1f}ms {s.mean_repairs:>7.2f}")
    for s in summaries:
        kinds = ", ".join(f"{k} {v:.2f}" for k, v in s.by_kind.items())
        print(f"{s.planner}: pass rate by kind: {kinds}; tokens in returned plans {s.tokens}")


def print_cases(name: str, outcomes: list[Outcome]) -> None:
    print(f"\n{name}")
    for o in outcomes:
        mark = "ok " if o.passed else "NO "
        detail = o.error or (f"node {o.node_f1:.2f} edge {o.edge_f1:.2f}" if o.planned else "")
        unsafe = f" UNSAFE {o.safety}" if o.safety else ""
        print(f"  {mark} [{o.kind:<6}] {o.request[:60]:<60} {detail}{unsafe}")


def _spread(cases: list[Case], limit: int) -> list[Case]:
    """``limit`` cases taken from each kind in turn, so every kind is represented."""
    by_kind: dict[str, list[Case]] = {}
    for case in cases:
        by_kind.setdefault(case.kind, []).append(case)
    picked: list[Case] = []
    for row in range(max(len(v) for v in by_kind.values())):
        picked += [group[row] for group in by_kind.values() if row < len(group)]
    return picked[:limit]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--planner", default="playbook,llm,composite",
                        help="comma-separated: playbook, llm, composite")
    parser.add_argument("--config", default=str(CONFIG))
    parser.add_argument("--cases", default=str(CASES))
    parser.add_argument("--verbose", action="store_true", help="one line per case")
    parser.add_argument("--json", action="store_true", help="print summaries as JSON")
    parser.add_argument("--limit", type=int, help="only every case up to this many (slow models)")
    parser.add_argument("--max-tokens", type=int, default=2048, help="LLM completion budget")
    parser.add_argument("--max-repairs", type=int, default=2, help="LLM repairs per request")
    args = parser.parse_args(argv)
    config, cases = load_config(args.config), load_cases(Path(args.cases))
    cases = _spread(cases, args.limit) if args.limit else cases
    summaries = []
    options = {"max_tokens": args.max_tokens, "max_repairs": args.max_repairs}
    for name, plan_fn in planners(config, args.planner.split(","), **options).items():
        outcomes = [evaluate(case, plan_fn, config) for case in cases]
        summaries.append(summarise(name, outcomes))
        if args.verbose:
            print_cases(name, outcomes)
    if args.json:
        print(json.dumps([asdict(s) for s in summaries], indent=2))
    else:
        print_table(summaries)
    return 0


if __name__ == "__main__":
    sys.exit(main())
