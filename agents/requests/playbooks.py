"""The deterministic planner: playbooks in the config match a request and fill a plan template.

No LLM is needed. A playbook has regular expressions with named groups (``version``,
``environment``...) and a plan template whose strings use ``{group}`` placeholders.
The filled plan still goes through the same validation as any other plan.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agents.errors import NoPlanFound, PlanInvalid
from agents.plan.model import PLACEHOLDER, Plan, PlannerInfo, RollbackStep, Step
from agents.requests.explicit import choose
from agents.requests.phrasing import DEFAULT_TYPES, CaptureError, CaptureType, Phrasing
from agents.requests.suggest import explain
from tools.regex import compile_safe


class Playbook(BaseModel):
    """A named request pattern and the plan it produces."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,62}$")
    description: str = ""
    match: list[str] = Field(min_length=1)
    examples: list[str] = Field(default_factory=list)
    defaults: dict[str, str] = Field(default_factory=dict)
    types: dict[str, CaptureType] = Field(default_factory=dict)
    """How captured groups are read (``version`` and ``environment`` are typed by name)."""
    goal: str
    steps: list[Step] = Field(min_length=1)
    rollback: list[RollbackStep] = Field(default_factory=list)

    @field_validator("match")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            compile_safe(pattern, ignore_case=True)  # ValueError names the problem
        return patterns

    def groups_for(self, request: str,
                   phrasing: Phrasing | None = None) -> dict[str, Any] | None:
        """The typed values of the first pattern that matches ``request`` in full.

        The request is read as people say it (``agents.requests.phrasing``): filler dropped,
        versions in one form, aliases as their environment. Matching ignores case; captured
        values keep theirs ("say Hello World" says "Hello World"). Raises CaptureError when
        a captured value is not of its type ("count lots").
        """
        phrasing = phrasing or Phrasing()
        for text in phrasing.variants(request):
            for pattern in self.match:
                found = compile_safe(pattern, ignore_case=True).fullmatch(text)
                if found:
                    return self._typed({k: v for k, v in found.groupdict().items()
                                        if v is not None}, phrasing)
        return None

    @property
    def template_texts(self) -> list[str]:
        """The goal and each step as text, where ``{placeholders}`` are filled."""
        return [self.goal, *(s.model_dump_json() for s in [*self.steps, *self.rollback])]

    def type_of(self, name: str) -> CaptureType:
        return self.types.get(name) or DEFAULT_TYPES.get(name, "string")

    def _typed(self, captured: dict[str, str], phrasing: Phrasing) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name, raw in {**self.defaults, **captured}.items():
            values[name] = phrasing.convert(name, self.type_of(name), raw)
        return values

    def instantiate(self, values: dict[str, Any], *, requested_by: str, note: str = ""
                    ) -> Plan:
        started = time.perf_counter()
        body = {
            "goal": _fill(self.goal, values),
            "steps": [_fill(s.model_dump(exclude_none=True), values) for s in self.steps],
            "rollback": [_fill(r.model_dump(), values) for r in self.rollback],
        }
        latency = (time.perf_counter() - started) * 1000
        info = PlannerInfo(name=f"playbook {self.name}", latency_ms=latency, note=note)
        try:
            return Plan.model_validate({**body, "requested_by": requested_by, "planner": info})
        except ValidationError as exc:  # e.g. a 10,000-digit version makes too long a goal
            raise PlanInvalid([f"playbook {self.name}: {_where(e['loc'])}{e['msg']}"
                               for e in exc.errors()[:10]]) from None


class PlaybookPlanner:
    """Plans a request with the first playbook that matches it."""

    def __init__(self, playbooks: list[Playbook], *, environments: list[str] | None = None,
                 redact: Callable[[str], str] = lambda text: text,
                 phrasing: Phrasing | None = None):
        self.playbooks, self.redact = playbooks, redact
        self.phrasing = phrasing or Phrasing(tuple(environments or ()))
        self.environments = list(self.phrasing.environments)

    def match(self, request: str) -> tuple[Playbook, dict[str, Any]] | None:
        """The first playbook matching ``request`` and its typed values; NoPlanFound when a
        captured value is not of its type (the message names it)."""
        for playbook in self.playbooks:
            try:
                values = playbook.groups_for(request, self.phrasing)
            except CaptureError as exc:
                raise NoPlanFound(f"{playbook.name}: {exc}") from None
            if values is not None:
                return playbook, values
        return None

    def plan(self, request: str, *, requested_by: str,
             params: Mapping[str, str] | None = None) -> Plan:
        """The plan for ``request``; NoPlanFound (listing what can be asked) if none matches.
        ``params`` are set explicitly (``-e key=value``, see agents.requests.explicit)."""
        found = self._found(request, params)
        unknown = None if found is None else self._unknown_environment(
            found[1].get("environment"))
        if found is None or unknown:
            # only when nothing plans as typed: a near miss of a verb or an environment
            fixed, notes = self.phrasing.corrected(request)
            retry = self._found(fixed, params) if notes else None
            if retry is None or self._unknown_environment(retry[1].get("environment")):
                raise NoPlanFound(unknown or self.help_text(request))
            playbook, values = retry
            return playbook.instantiate(values, requested_by=requested_by,
                                        note="; ".join(notes))
        playbook, values = found
        return playbook.instantiate(values, requested_by=requested_by)

    def _found(self, request: str, params: Mapping[str, str] | None
               ) -> tuple[Playbook, dict[str, Any]] | None:
        if params:
            return choose(self.playbooks, request, params, self.phrasing)
        return self.match(request)

    def _unknown_environment(self, name: Any) -> str | None:
        """Name an environment the inventory lacks, with the known ones (None if fine)."""
        if not isinstance(name, str) or not self.environments \
                or self.phrasing.environment(name) is not None:
            return None
        return (f"unknown environment {name!r}; known environments: "
                f"{self.phrasing.describe_known()}{self.phrasing.did_you_mean(name)}")

    def modify(self, plan: Plan, instruction: str, *, requested_by: str) -> Plan:
        """Playbooks cannot follow free-text instructions; say what works instead."""
        raise NoPlanFound("changing a plan with an instruction needs the LLM planner "
                          "(set OPENAI_API_KEY); edit the plan as YAML instead")

    def help_text(self, request: str) -> str:
        """Why nothing matched: what was understood, then the closest requests that would
        run as typed, each asking for a piece the request lacked. The request is echoed
        redacted and cut (help is shown to users)."""
        return explain(request, self.playbooks, self.phrasing, redact=self.redact)

def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _where(loc: tuple[int | str, ...]) -> str:
    return ".".join(map(str, loc)) + ": " if loc else ""


def _fill(value: Any, values: dict[str, Any]) -> Any:
    """Replace ``{name}`` in every string of ``value`` (``${steps...}`` refs are left alone).
    A string that is one placeholder takes the typed value itself (``"{n}"`` → 3)."""
    if isinstance(value, str):
        whole = PLACEHOLDER.fullmatch(value)
        if whole and whole.group(1) in values:
            return values[whole.group(1)]
        return PLACEHOLDER.sub(lambda m: _text(values.get(m.group(1), m.group(0))), value)
    if isinstance(value, dict):
        return {k: _fill(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, values) for v in value]
    return value
