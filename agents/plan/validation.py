"""Plan validation: every rule a plan must pass before anyone sees it, all problems at once.

Kept apart from the models (``agents.plan.model``) because it needs the target resolution
(``agents.plan.targets``), which itself reads the models. The two rules that come from the
team's policy (a rollback for every mutating step, promotion order) read it through
``PlanRules``, which ``agents.policy.rules.Policy`` satisfies: the plan package stays below
the policy package that judges runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from agents.errors import PlanInvalid
from agents.plan import graph
from agents.plan.limit import limit_problems
from agents.plan.model import PLACEHOLDER, Plan, RollbackStep, Step
from agents.plan.targets import resolve, step_targets
from tools.catalog import (
    OUTPUT_REF,
    Catalog,
    ParamSpec,
    ParamType,
    ParamValue,
    Tool,
    unknown_tool_message,
)
from tools.inventory import LOCAL_HOST_NAME, Inventory


class PlanRules(Protocol):
    """What validation reads of the policy (``agents.policy.rules.Policy``)."""

    @property
    def require_rollback(self) -> bool: ...

    @property
    def promotion(self) -> list[str]: ...

    def previous_stage(self, environment: str) -> str | None: ...


def validate_plan(plan: Plan, catalog: Catalog, inventory: Inventory, policy: PlanRules) -> None:
    """Raise PlanInvalid listing every problem with the plan (each naming its step)."""
    problems = PlanChecker(plan, catalog, inventory, policy).problems()
    if problems:
        raise PlanInvalid(problems)




class PlanChecker:
    """Collects every problem with a plan, so the user (or the LLM) can fix them in one go.

    ``templated`` checks a playbook template: values holding ``{placeholders}`` are not
    literal, so only their structure is checked. ``found`` keeps (step id, message) pairs
    so a config check can point at the step's own line.
    """

    def __init__(self, plan: Plan, catalog: Catalog, inventory: Inventory, policy: PlanRules,
                 *, templated: bool = False):
        self.plan, self.catalog, self.inventory, self.policy = plan, catalog, inventory, policy
        self.templated = templated
        self.targets = resolve(plan, catalog, inventory)
        self.found: list[tuple[str, str]] = []

    def problems(self) -> list[str]:
        """Every problem, as ``step ID: message`` lines."""
        return [f"step {step_id}: {message}" for step_id, message in self.check()]

    def check(self) -> list[tuple[str, str]]:
        self.found = []
        self._ids()
        self._tools_and_params()
        graph_ok = self._dependencies()
        self._output_refs(graph_ok)
        self._rollback_coverage()
        if graph_ok:
            self._promotion_order()
        self._limit()
        return self.found

    def _limit(self) -> None:
        """A ``--limit`` may only narrow: unknown names and emptied steps are refused."""
        if not self.plan.limit:
            return
        steps = [(s.id, step_targets(s, self.catalog, self.inventory).hosts,
                  self.targets.of(s.id).hosts) for s in self.plan.steps]
        remote = [(i, b, a) for i, b, a in steps if b != (LOCAL_HOST_NAME,)]
        for step_id, message in limit_problems(self.plan.limit, self.inventory, remote):
            self._add(step_id or "limit", message)

    def _add(self, step_id: str, message: str) -> None:
        if (step_id, message) not in self.found:
            self.found.append((step_id, message))

    def _known(self, step: Step | RollbackStep) -> Tool | None:
        return self.catalog.tools.get(step.tool)

    def _ids(self) -> None:
        seen: set[str] = set()
        for step in self.plan.all_steps:
            if step.id in seen:
                self._add(step.id, "duplicate step id")
            seen.add(step.id)

    def _tools_and_params(self) -> None:
        for step in self.plan.all_steps:
            tool = self._known(step)
            if tool is None:
                self._add(step.id, unknown_tool_message(step.tool, list(self.catalog.tools)))
                continue
            templated = {k for k, v in step.params.items() if self._templated(v)}
            literal = {k: v for k, v in step.params.items() if k not in templated}
            env = None if "environment" in templated else self._environment_problem(tool, literal)
            for problem in self.catalog.param_problems(tool, step.params, unchecked=templated):
                if env is None or "'environment'" not in problem:  # said once, below
                    self._add(step.id, problem)
            if env is not None:
                self._add(step.id, env)
            for problem in _success_problem(step, tool):
                self._add(step.id, problem)

    def _templated(self, value: ParamValue) -> bool:
        return self.templated and isinstance(value, str) and bool(PLACEHOLDER.search(value))

    def _environment_problem(self, tool: Tool, params: Mapping[str, ParamValue]) -> str | None:
        if tool.target != "environment":
            return None
        value = self.catalog.with_defaults(tool, dict(params)).get("environment")
        if isinstance(value, str) and OUTPUT_REF.match(value):
            return "the environment must be named in the plan, not taken from a step's output"
        if not isinstance(value, str) or value in self.inventory.environments:
            return None
        known = ", ".join(sorted(self.inventory.environments)) or "none configured"
        return f"unknown environment {value!r} (known: {known})"

    def _dependencies(self) -> bool:
        """Report dependency problems; whether the graph is sound enough to walk."""
        ids = [s.id for s in self.plan.steps]
        duplicated = {i for i in ids if ids.count(i) > 1}
        for step in self.plan.steps:
            for dep in step.depends_on:
                if dep == step.id and step.id not in duplicated:
                    self._add(step.id, "depends on itself")
                elif dep not in ids:
                    self._add(step.id, f"depends on unknown step {dep!r}")
            if len(set(step.depends_on)) != len(step.depends_on):
                self._add(step.id, "lists a dependency twice")
        if duplicated:
            return False
        cycle = graph.find_cycle(self.plan.deps)
        if cycle and len(cycle) > 2:
            self._add(cycle[0], f"dependency cycle {' -> '.join(cycle)}")
        return cycle is None

    def _output_refs(self, graph_ok: bool) -> None:
        deps = self.plan.deps
        for step in self.plan.steps if graph_ok else []:
            before = graph.ancestors(deps, step.id)
            for key, value in step.params.items():
                ref = OUTPUT_REF.match(value) if isinstance(value, str) else None
                if ref:
                    self._ref_problem(step.id, key, ref.group(1), ref.group(2), before)
        for rb in self.plan.rollback:
            if any(isinstance(v, str) and OUTPUT_REF.match(v) for v in rb.params.values()):
                self._add(rb.id, "rollback steps cannot use outputs of other steps")

    def _ref_problem(self, step_id: str, key: str, source: str, output: str,
                     before: set[str]) -> None:
        if source not in before:
            self._add(step_id, f"parameter {key!r} uses an output of {source!r}, "
                               f"which it does not depend on")
            return
        tool = self.catalog.tools.get(self.plan.step(source).tool)
        if tool is not None and output not in tool.outputs:
            self._add(step_id, f"tool {tool.name} (step {source}) has no output {output!r}")
            return
        consumer = self.catalog.tools.get(self.plan.step(step_id).tool)
        if tool is not None and consumer is not None:
            for problem in _ref_type_problem(key, consumer.params.get(key), tool.name, output):
                self._add(step_id, problem)

    def _rollback_coverage(self) -> None:
        if not self.policy.require_rollback:
            return
        covered = {(r.tool, env) for r in self.plan.rollback
                   for env in self.targets.of(r.id).environments or (None,)}
        for step in self.plan.steps:
            tool, where = self._known(step), self.targets.of(step.id)
            if tool is None or not tool.mutates or where.undo:
                continue
            if tool.rollback is None:
                self._add(step.id, f"tool {tool.name} changes hosts but declares no rollback "
                                   f"tool, and policy requires one")
                continue
            for env in where.environments or (None,):
                known = env is None or env in self.inventory.environments  # else said above
                if known and (tool.rollback, env) not in covered:
                    at = f" for environment {env}" if env else ""
                    self._add(step.id, f"mutating step needs a rollback step using "
                                       f"{tool.rollback}{at}")

    def _promotion_order(self) -> None:
        """A change to an environment must come after (through the DAG) a change — not a
        read-only check — to the environment before it in the promotion order."""
        deps = self.plan.deps
        for step in self.plan.steps:
            before = graph.ancestors(deps, step.id)
            changed = {e for a in before for e in self.targets.of(a).changes}
            for env in self.targets.of(step.id).changes:
                previous = self.policy.previous_stage(env)
                if previous and previous not in changed:
                    self._add(step.id, f"changes {env} without first passing {previous}: no "
                                       f"step it depends on changes {previous} (promotion "
                                       f"order: {' -> '.join(self.policy.promotion)})")



def _ref_type_problem(key: str, spec: ParamSpec | None, source_tool: str,
                      output: str) -> list[str]:
    """An output is a string caught by its tool's pattern; it may feed a constrained parameter
    only of the same name (the operator paired them), so a mismatch fails here, not mid-run."""
    if spec is None:
        return []  # reported as an unknown parameter
    if spec.type is not ParamType.STRING:
        why = f"is {spec.type.value}, but outputs are strings"
    elif (spec.pattern or spec.enum) and key != output:
        why = "has a pattern or allowed values that this output is not declared to meet"
    else:
        return []
    return [f"parameter {key!r} cannot take output {output!r} of tool {source_tool}: it {why}"]


def _success_problem(step: Step | RollbackStep, tool: Tool) -> list[str]:
    """A plan may add an output pattern; the exit code that means success is the tool's."""
    wanted = step.success.exit_code if isinstance(step, Step) and step.success else None
    if wanted is None or wanted == tool.success.exit_code:
        return []
    return [f"success.exit_code {wanted} would relax tool {tool.name}'s check (exit code "
            f"{tool.success.exit_code}); a plan may only add an output_pattern"]
