"""The plan artifact: models, canonical hash, graph views, and validation.

A plan is data, not prose. It is validated against the live catalog, inventory and policy
before anyone sees it, and every edit produces a new version with a new hash.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agents import graph
from agents.errors import PlanInvalid
from agents.ids import new_id
from agents.policy import Policy
from tools.catalog import NAME, OUTPUT_REF, Catalog, ParamValue, Tool, unknown_tool_message
from tools.inventory import Inventory

MAX_STEPS = 60


class Success(BaseModel):
    """How the executor decides a step succeeded (checked deterministically)."""

    model_config = ConfigDict(extra="forbid")

    exit_code: int = 0
    output_pattern: str | None = Field(default=None, max_length=200,
                                       description="regex that must match a line of output")


class Step(BaseModel):
    """One tool invocation in the plan, run once its dependencies succeeded."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=NAME)
    tool: str = Field(max_length=64)
    params: dict[str, ParamValue] = Field(default_factory=dict, max_length=20)
    depends_on: list[str] = Field(default_factory=list, max_length=MAX_STEPS)
    description: str = Field(default="", max_length=300)
    success: Success | None = None


class RollbackStep(BaseModel):
    """A step run, in order, after a failure or cancellation."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=NAME)
    tool: str = Field(max_length=64)
    params: dict[str, ParamValue] = Field(default_factory=dict, max_length=20)
    description: str = Field(default="", max_length=300)


class PlannerInfo(BaseModel):
    """Which planner produced the plan, and what it cost."""

    name: str = "playbook"
    model: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: float = 0.0
    repairs: int = 0
    note: str = ""
    traceparent: str | None = None
    """The trace the plan was made in (agents.tracing): its run continues it."""

    def footer(self) -> str:
        if self.model is None:
            return f"planned by {self.name} in {self.latency_ms:.0f} ms"
        tokens = self.prompt_tokens + self.completion_tokens
        repairs = f", {self.repairs} repair(s)" if self.repairs else ""
        return f"planned by {self.model} · {tokens} tokens · {self.latency_ms:.0f} ms{repairs}"


class Plan(BaseModel):
    """A goal, its steps with dependencies, and the rollback to run if it fails."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(default_factory=lambda: new_id("plan"))
    version: int = 1
    goal: str = Field(min_length=1, max_length=500)
    steps: list[Step] = Field(min_length=1, max_length=MAX_STEPS)
    rollback: list[RollbackStep] = Field(default_factory=list, max_length=20)
    requested_by: str = "unknown"
    planner: PlannerInfo = Field(default_factory=PlannerInfo)
    created_at: float = Field(default_factory=time.time)

    @property
    def hash(self) -> str:
        """sha256 of the canonical content (goal, steps, rollback). Approvals bind to it."""
        body = self.model_dump(include={"goal", "steps", "rollback"}, mode="json")
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    @property
    def all_steps(self) -> list[Step | RollbackStep]:
        """Plan steps, then rollback steps."""
        return [*self.steps, *self.rollback]

    @property
    def deps(self) -> dict[str, list[str]]:
        return {s.id: list(s.depends_on) for s in self.steps}

    def step(self, step_id: str) -> Step:
        return next(s for s in self.steps if s.id == step_id)

    def layers(self) -> list[list[str]]:
        """Steps grouped so that each group can run in parallel once earlier ones are done."""
        return graph.layers(self.deps)

    def critical_path(self, durations: Mapping[str, float]) -> tuple[list[str], float]:
        return graph.critical_path(self.deps, durations)

    def environments(self) -> list[str]:
        """Environments the plan's steps name, in first-use order."""
        seen: dict[str, None] = {}
        for step in self.all_steps:
            env = step.params.get("environment")
            if isinstance(env, str):
                seen.setdefault(env, None)
        return list(seen)

    def revised(self, **changes: Any) -> Plan:
        """A new version of this plan (same id) with ``changes`` applied."""
        data = self.model_dump()
        data.update(changes, version=self.version + 1, created_at=time.time())
        return Plan.model_validate(data)


def format_params(params: Mapping[str, object], limit: int = 60) -> str:
    """Parameters on one line (``k=v k=v``), cut to ``limit`` characters."""
    text = " ".join(f"{k}={v}" for k, v in params.items())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def validate_plan(plan: Plan, catalog: Catalog, inventory: Inventory, policy: Policy) -> None:
    """Raise PlanInvalid listing every problem with the plan (each naming its step)."""
    problems = PlanChecker(plan, catalog, inventory, policy).problems()
    if problems:
        raise PlanInvalid(problems)


class PlanChecker:
    """Collects every problem with a plan, so the user (or the LLM) can fix them in one go."""

    def __init__(self, plan: Plan, catalog: Catalog, inventory: Inventory, policy: Policy):
        self.plan, self.catalog, self.inventory, self.policy = plan, catalog, inventory, policy

    def problems(self) -> list[str]:
        out = self._ids()
        out += self._tools_and_params()
        out += self._dependencies()
        if not out:  # the checks below assume a well-formed graph
            out += self._output_refs()
            out += self._rollback_coverage()
            out += self._promotion_order()
        return out

    @property
    def _undo_tools(self) -> set[str]:
        """Tools that are another tool's rollback: running one is itself the remedy, so it
        needs no rollback of its own and may go straight to production."""
        return {t.rollback for t in self.catalog.tools.values() if t.rollback}

    def _ids(self) -> list[str]:
        out, seen = [], set()
        for step in self.plan.all_steps:
            if step.id in seen:
                out.append(f"step {step.id}: duplicate step id")
            seen.add(step.id)
        return out

    def _tools_and_params(self) -> list[str]:
        out = []
        for step in self.plan.all_steps:
            if step.tool not in self.catalog:
                known = list(self.catalog.tools)
                out.append(f"step {step.id}: {unknown_tool_message(step.tool, known)}")
                continue
            tool = self.catalog.get(step.tool)
            out += [f"step {step.id}: {p}" for p in self.catalog.param_problems(tool, step.params)]
            out += self._environment_problem(step.id, tool, step.params)
        return out

    def _environment_problem(self, step_id: str, tool: Tool,
                             params: Mapping[str, ParamValue]) -> list[str]:
        env = params.get("environment")
        if tool.target != "environment" or not isinstance(env, str):
            return []
        if env not in self.inventory.environments:
            known = ", ".join(sorted(self.inventory.environments)) or "none configured"
            return [f"step {step_id}: unknown environment {env!r} (known: {known})"]
        return []

    def _dependencies(self) -> list[str]:
        out = []
        ids = {s.id for s in self.plan.steps}
        for step in self.plan.steps:
            for dep in step.depends_on:
                if dep == step.id:
                    out.append(f"step {step.id}: depends on itself")
                elif dep not in ids:
                    out.append(f"step {step.id}: depends on unknown step {dep!r}")
            if len(set(step.depends_on)) != len(step.depends_on):
                out.append(f"step {step.id}: lists a dependency twice")
        cycle = graph.find_cycle(self.plan.deps)
        if cycle and len(cycle) > 2:
            out.append(f"step {cycle[0]}: dependency cycle {' -> '.join(cycle)}")
        return out

    def _output_refs(self) -> list[str]:
        out = []
        deps = self.plan.deps
        for step in self.plan.steps:
            before = graph.ancestors(deps, step.id)
            for key, value in step.params.items():
                ref = OUTPUT_REF.match(value) if isinstance(value, str) else None
                if ref:
                    out += self._ref_problem(step.id, key, ref.group(1), ref.group(2), before)
        for rb in self.plan.rollback:
            if any(isinstance(v, str) and OUTPUT_REF.match(v) for v in rb.params.values()):
                out.append(f"step {rb.id}: rollback steps cannot use outputs of other steps")
        return out

    def _ref_problem(self, step_id: str, key: str, source: str, output: str,
                     before: set[str]) -> list[str]:
        if source not in before:
            return [f"step {step_id}: parameter {key!r} uses an output of {source!r}, "
                    f"which it does not depend on"]
        tool = self.catalog.get(self.plan.step(source).tool)
        if output not in tool.outputs:
            return [f"step {step_id}: tool {tool.name} (step {source}) has no output {output!r}"]
        return []

    def _rollback_coverage(self) -> list[str]:
        if not self.policy.require_rollback:
            return []
        out = []
        covered = {(r.tool, r.params.get("environment")) for r in self.plan.rollback}
        for step in self.plan.steps:
            tool = self.catalog.get(step.tool)
            if not tool.mutates or tool.name in self._undo_tools:
                continue
            if tool.rollback is None:
                out.append(f"step {step.id}: tool {tool.name} changes hosts but declares no "
                           f"rollback tool, and policy requires one")
            elif (tool.rollback, step.params.get("environment")) not in covered:
                env = step.params.get("environment")
                where = f" for environment {env}" if env else ""
                out.append(f"step {step.id}: mutating step needs a rollback step using "
                           f"{tool.rollback}{where}")
        return out

    def _promotion_order(self) -> list[str]:
        out = []
        deps = self.plan.deps
        env_of = {s.id: s.params.get("environment") for s in self.plan.steps}
        for step in self.plan.steps:
            env = env_of[step.id]
            tool = self.catalog.get(step.tool)
            if not tool.mutates or tool.name in self._undo_tools or not isinstance(env, str):
                continue
            previous = self.policy.previous_stage(env)
            if previous and previous not in {env_of[a] for a in graph.ancestors(deps, step.id)}:
                out.append(f"step {step.id}: changes {env} without first passing {previous} in "
                           f"this plan (promotion order: {' -> '.join(self.policy.promotion)})")
        return out


def is_read_only(plan: Plan, catalog: Catalog) -> bool:
    """Whether ``plan`` is one read-only tool call (e.g. status): no approval needed.

    The over-planning guard: front ends may run such a plan at once. A plan of several
    steps, or with any step whose tool changes hosts (or is unknown), is not.
    """
    if len(plan.steps) != 1 or plan.rollback:
        return False
    tool = catalog.tools.get(plan.steps[0].tool)
    return tool is not None and not tool.mutates
