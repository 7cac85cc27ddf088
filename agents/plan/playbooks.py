"""The deterministic planner: playbooks in the config match a request and fill a plan template.

No LLM is needed. A playbook has regular expressions with named groups (``version``,
``environment``...) and a plan template whose strings use ``{group}`` placeholders.
The filled plan still goes through the same validation as any other plan.
"""

from __future__ import annotations

import difflib
import re
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agents.errors import NoPlanFound, PlanInvalid
from agents.plan.model import PLACEHOLDER, Plan, PlannerInfo, RollbackStep, Step
from tools.regex import compile_safe

_TARGET = re.compile(r"\b(?:to|in|on|of)\s+(\w+)\W*$", re.IGNORECASE)
"""The environment a request names at its end ("... to mars"), to name it when unknown."""


class Playbook(BaseModel):
    """A named request pattern and the plan it produces."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,62}$")
    description: str = ""
    match: list[str] = Field(min_length=1)
    examples: list[str] = Field(default_factory=list)
    defaults: dict[str, str] = Field(default_factory=dict)
    goal: str
    steps: list[Step] = Field(min_length=1)
    rollback: list[RollbackStep] = Field(default_factory=list)

    @field_validator("match")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            compile_safe(pattern, ignore_case=True)  # ValueError names the problem
        return patterns

    def groups_for(self, request: str) -> dict[str, str] | None:
        """The named groups of the first pattern that matches ``request`` in full.

        Matching ignores case, so the captured values are lower-cased too: ``DEPLOY V2.3.1``
        then plans exactly what ``deploy v2.3.1`` does instead of failing a version pattern.
        """
        for pattern in self.match:
            found = compile_safe(pattern, ignore_case=True).fullmatch(request.strip())
            if found:
                values = dict(self.defaults)
                values.update({k: v.lower() for k, v in found.groupdict().items()
                               if v is not None})
                return values
        return None

    def instantiate(self, values: dict[str, str], *, requested_by: str) -> Plan:
        started = time.perf_counter()
        body = {
            "goal": _fill(self.goal, values),
            "steps": [_fill(s.model_dump(exclude_none=True), values) for s in self.steps],
            "rollback": [_fill(r.model_dump(), values) for r in self.rollback],
        }
        latency = (time.perf_counter() - started) * 1000
        info = PlannerInfo(name=f"playbook {self.name}", latency_ms=latency)
        try:
            return Plan.model_validate({**body, "requested_by": requested_by, "planner": info})
        except ValidationError as exc:  # e.g. a 10,000-digit version makes too long a goal
            raise PlanInvalid([f"playbook {self.name}: {_where(e['loc'])}{e['msg']}"
                               for e in exc.errors()[:10]]) from None


class PlaybookPlanner:
    """Plans a request with the first playbook that matches it."""

    def __init__(self, playbooks: list[Playbook], *, environments: list[str] | None = None,
                 redact: Callable[[str], str] = lambda text: text):
        self.playbooks, self.redact = playbooks, redact
        self.environments = environments or []

    def match(self, request: str) -> tuple[Playbook, dict[str, str]] | None:
        for playbook in self.playbooks:
            values = playbook.groups_for(request)
            if values is not None:
                return playbook, values
        return None

    def plan(self, request: str, *, requested_by: str) -> Plan:
        """The plan for ``request``; NoPlanFound (listing what can be asked) if none matches."""
        found = self.match(request)
        if found is None:
            raise NoPlanFound(self.help_text(request))
        playbook, values = found
        unknown = self._unknown_environment(values.get("environment"))
        if unknown:
            raise NoPlanFound(unknown)
        return playbook.instantiate(values, requested_by=requested_by)

    def _unknown_environment(self, name: str | None) -> str | None:
        """Name an environment the inventory lacks, with the known ones (None if fine)."""
        if name is None or not self.environments or name.lower() in self.environments:
            return None
        return (f"unknown environment {name!r}; known environments: "
                f"{', '.join(self.environments)}")

    def modify(self, plan: Plan, instruction: str, *, requested_by: str) -> Plan:
        """Playbooks cannot follow free-text instructions; say what works instead."""
        raise NoPlanFound("changing a plan with an instruction needs the LLM planner "
                          "(set OPENAI_API_KEY); edit the plan as YAML instead")

    def help_text(self, request: str) -> str:
        """Why nothing matched: an unknown environment named, then the closest playbooks.
        The request is echoed redacted and cut (help is shown to users)."""
        shown = self.redact(request.strip())
        shown = shown if len(shown) <= 80 else shown[:79] + "…"
        found = _TARGET.search(request.strip())
        unknown = self._unknown_environment(found.group(1) if found else None)
        lines = [f"I don't know how to plan {shown!r}."]
        if unknown:
            lines[0] += f" It names an {unknown}."
        lines.append("Closest requests I know:" if self.playbooks else "No playbooks are set up.")
        for playbook in self.closest(request):
            example = playbook.examples[0] if playbook.examples else playbook.match[0]
            lines.append(f"  • {example} — {playbook.description or playbook.name}")
        return "\n".join(lines)

    def closest(self, request: str, *, limit: int = 5) -> list[Playbook]:
        """The playbooks whose examples look most like ``request``, best first."""
        def score(playbook: Playbook) -> float:
            texts = playbook.examples or [playbook.name]
            return max(difflib.SequenceMatcher(None, request.lower(), t.lower()).ratio()
                       for t in texts)

        return sorted(self.playbooks, key=score, reverse=True)[:limit]


def _where(loc: tuple[int | str, ...]) -> str:
    return ".".join(map(str, loc)) + ": " if loc else ""


def _fill(value: Any, values: dict[str, str]) -> Any:
    """Replace ``{name}`` in every string of ``value`` (``${steps...}`` refs are left alone)."""
    if isinstance(value, str):
        return PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), value)
    if isinstance(value, dict):
        return {k: _fill(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, values) for v in value]
    return value
