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
from dataclasses import dataclass
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)

from agents.ids import new_id
from agents.plan import graph
from tools.catalog import NAME, Catalog, ParamValue, Tool
from tools.regex import compile_safe

MAX_STEPS = 60
MAX_REQUEST = 2000
"""Longest request any front end may plan: what reaches the model is never silently cut."""
ANSWER_LIMIT = 8192
"""Characters of a model's answer kept with the plan it became."""
SERVICE_PATTERN = r"^[a-z][a-z0-9_-]{0,62}$"
"""A service's name (docs/services.md 1.1): no ``:`` or ``/``, so keys and text split."""


class Success(BaseModel):
    """Checks a plan adds to its tool's own (tools.yml ``success``); it can never relax them.

    ``exit_code`` may only restate the tool's exit code; anything else is refused.
    """

    model_config = ConfigDict(extra="forbid")

    exit_code: int | None = Field(default=None, description="null: the tool's exit code")
    output_pattern: str | None = Field(default=None, max_length=200,
                                       description="regex that must match a line of output")

    @field_validator("output_pattern")
    @classmethod
    def _pattern_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            compile_safe(value)  # ValueError: a validation error naming the problem
        return value

    def describe(self) -> str:
        """For approvers, e.g. ``exit 0 · output matches 'ok$'``."""
        parts = [f"exit {self.exit_code}"] if self.exit_code is not None else []
        if self.output_pattern:
            parts.append(f"output matches {self.output_pattern!r}")
        return " · ".join(parts)


@dataclass(frozen=True)
class Criteria:
    """What the executor checks for one step: the tool's exit code, every required pattern."""

    exit_code: int
    patterns: tuple[str, ...] = ()


def success_criteria(tool: Tool, step: Step | RollbackStep) -> Criteria:
    """The tool's own checks plus the plan's extra patterns (a plan only adds, never relaxes)."""
    extra = step.success if isinstance(step, Step) and step.success else Success()
    patterns = (tool.success.output_pattern, extra.output_pattern)
    return Criteria(tool.success.exit_code, tuple(p for p in patterns if p))


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
    """Which planner produced the plan, and what it cost: its provenance.

    A playbook plan has a ``name`` (``playbook NAME``) and a latency only; an LLM plan also
    says which prompt asked (``prompt`` and its content-hash ``prompt_version``, see
    ``agents.prompts.templates``), which model was asked and which answered, with what
    settings, what it cost, and the answer that became the plan (redacted and bounded).
    """

    name: str = "playbook"
    model: str | None = None
    """The model requested (None: no model was involved)."""
    response_model: str | None = None
    """The model the endpoint says answered (a server may resolve an alias)."""
    prompt: str | None = None
    prompt_version: str | None = None
    temperature: float | None = None
    seed: int | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: float = 0.0
    repairs: int = 0
    answer: str | None = None
    """The model's answer that became this plan: redacted, at most ANSWER_LIMIT characters."""
    note: str = ""
    traceparent: str | None = None
    """The trace the plan was made in (agents.tracing): its run continues it."""
    trace_root: dict[str, Any] | None = None
    """The request's root span, reserved at planning and emitted when the run ends
    (``agents.tracing.ROOT``)."""
    edited_by: str | None = None
    """Who edited this version by hand (Modify); the rest describes the original planner."""

    def footer(self) -> str:
        """Who made this version: the planner, and the person who edited it, if anyone."""
        edited = f"edited by {self.edited_by} · " if self.edited_by else ""
        note = f" · {self.note}" if self.note else ""  # e.g. "read 'depoly' as 'deploy'"
        return edited + self._planned() + note

    def provenance(self) -> str:
        """What made the plan, for diffs: ``plan@3f2a1b0c9d8e · gpt-4o`` or ``playbook X``."""
        if self.model is None:
            return self.name
        prompt = f"{self.prompt}@{self.prompt_version}" if self.prompt else self.name
        return f"{prompt} · {self.response_model or self.model}"

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
    requested_via: str | None = None
    """The face that recorded ``requested_by`` (``agents.faces``; set by ``make_plan``):
    only a name from Slack may be shown as a Slack mention. None: from before it was kept."""
    planner: PlannerInfo = Field(default_factory=PlannerInfo)
    created_at: float = Field(default_factory=time.time)
    limit: list[str] = Field(default_factory=list, max_length=50)
    """Hosts, groups or environments the run is narrowed to (``--limit``; agents.plan.limit)."""
    service: str | None = Field(default=None, pattern=SERVICE_PATTERN)
    """The service the plan is for (docs/services.md); None: the legacy service (a config
    without ``services:``). Set by ``make_plan``, never by a planner."""

    @model_serializer(mode="wrap")
    def _without_legacy_service(self, handler: SerializerFunctionWrapHandler) -> Any:
        """A legacy plan is written without ``service``: a previous release (``extra=
        "forbid"``) still reads it, and refuses another service's plan."""
        data = handler(self)
        if self.service is None and isinstance(data, dict):
            data.pop("service", None)
        return data

    @property
    def hash(self) -> str:
        """sha256 of the canonical content (goal, steps, rollback; the limit and the
        service when there are, so existing plans keep their hash). Approvals bind to it."""
        fields = ({"goal", "steps", "rollback"} | ({"limit"} if self.limit else set())
                  | ({"service"} if self.service is not None else set()))
        body = self.model_dump(include=fields, mode="json")
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
        """A new version of this plan (same id) with ``changes`` applied. A new requester
        whose face is not given is of unknown origin (``requested_via`` None)."""
        data = self.model_dump()
        if changes.get("requested_by", self.requested_by) != self.requested_by:
            data["requested_via"] = None
        data.update(changes, version=self.version + 1, created_at=time.time())
        return Plan.model_validate(data)


def format_params(params: Mapping[str, object], limit: int = 60) -> str:
    """Parameters on one line (``k=v k=v``), cut to ``limit`` characters."""
    text = " ".join(f"{k}={v}" for k, v in params.items())
    return text if len(text) <= limit else text[: limit - 1] + "…"


PLACEHOLDER = re.compile(r"(?<!\$)\{([a-z_][a-z0-9_]*)\}")
"""A playbook template's ``{group}`` placeholder (``${steps...}`` output refs excluded)."""


def is_read_only(plan: Plan, catalog: Catalog) -> bool:
    """Whether ``plan`` may run at once, without approval: one call of a tool that tools.yml
    marks ``approval: none`` (e.g. status).

    The over-planning guard answers read-only questions only: a plan of several steps, with
    rollback steps, or whose tool is unknown or not opted out of approval (notifications
    included: they change what people see) is not.
    """
    if len(plan.steps) != 1 or plan.rollback:
        return False
    tool = catalog.tools.get(plan.steps[0].tool)
    return tool is not None and tool.approval == "none" and not tool.mutates
