"""The plan artifact: models, canonical hash, graph views, and validation.

A plan is data, not prose. It is validated against the live catalog, inventory and policy
before anyone sees it, and every edit produces a new version with a new hash.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agents import graph
from agents.ids import new_id
from tools.catalog import NAME, Catalog, ParamValue

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
    edited_by: str | None = None
    """Who edited this version by hand (Modify); the rest describes the original planner."""

    def footer(self) -> str:
        """Who made this version: the planner, and the person who edited it, if anyone."""
        edited = f"edited by {self.edited_by} · " if self.edited_by else ""
        return edited + self._planned()

    def _planned(self) -> str:
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

    def revised(self, **changes: Any) -> Plan:
        """A new version of this plan (same id) with ``changes`` applied."""
        data = self.model_dump()
        data.update(changes, version=self.version + 1, created_at=time.time())
        return Plan.model_validate(data)


def format_params(params: Mapping[str, object], limit: int = 60) -> str:
    """Parameters on one line (``k=v k=v``), cut to ``limit`` characters."""
    text = " ".join(f"{k}={v}" for k, v in params.items())
    return text if len(text) <= limit else text[: limit - 1] + "…"


PLACEHOLDER = re.compile(r"(?<!\$)\{([a-z_][a-z0-9_]*)\}")
"""A playbook template's ``{group}`` placeholder (``${steps...}`` output refs excluded)."""


def is_read_only(plan: Plan, catalog: Catalog) -> bool:
    """Whether ``plan`` is one read-only tool call (e.g. status): no approval needed.

    The over-planning guard: front ends may run such a plan at once. A plan of several
    steps, or with any step whose tool changes hosts (or is unknown), is not.
    """
    if len(plan.steps) != 1 or plan.rollback:
        return False
    tool = catalog.tools.get(plan.steps[0].tool)
    return tool is not None and not tool.mutates
