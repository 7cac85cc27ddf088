"""The tool catalog: what deckhand may run, loaded from tools.yml.

A tool is a command template plus a parameter schema. What a tool may do (whether it
mutates, how it is rolled back, where it runs) is decided here by the operator, never
by a planner. Parameter values only reach a shell through :meth:`Catalog.render`, after
schema validation, as data: ``tools.shell`` parses each command template once (a template
that puts a placeholder where no value is safe is refused at load) and delivers every value
as a variable assigned from a quoted literal, never as shell source.
"""

from __future__ import annotations

import difflib
import re
import string
from collections.abc import Callable, Collection
from enum import StrEnum
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from tools.errors import ParamError, UnknownTool
from tools.gates import GATE_TEMPLATE_FIELDS, SAFE_VALUE, GateSpec, PrometheusGate
from tools.regex import compile_safe
from tools.shell import ShellCommand, ValueRefused, option_problem
from tools.shell import parse as parse_shell

ParamValue = str | int | bool

# Control characters (newlines included) and Unicode line/paragraph separators are never
# valid in a parameter, whatever the tool's own pattern says.
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u0085\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# A parameter may instead refer to an output of an earlier step: ${steps.build.artifact}
OUTPUT_REF = re.compile(r"^\$\{steps\.([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\}$")
NAME = r"^[a-z][a-z0-9_]{0,62}$"


class ParamType(StrEnum):
    STRING = "string"
    INTEGER = "integer"
    BOOLEAN = "boolean"


class ParamSpec(BaseModel):
    """The schema of one tool parameter."""

    model_config = ConfigDict(extra="forbid")

    type: ParamType = ParamType.STRING
    description: str = ""
    required: bool = True
    default: ParamValue | None = None
    enum: list[str | int] | None = None
    pattern: str | None = None
    max_length: int = Field(default=200, ge=1, le=4000)
    minimum: int | None = None
    maximum: int | None = None
    secret: bool = Field(default=False, description="the default is never shown to a planner")
    code: bool = Field(default=False, description=(
        "the value is a script the operator trusts to run (sh -c 'eval \"$1\"' sh {x}): "
        "the only way a value may be code; never for a parameter a plan fills from a request"))

    @field_validator("pattern")
    @classmethod
    def _pattern_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            compile_safe(value)  # ValueError names the problem
        return value

    @property
    def admits_options(self) -> bool:
        """Whether a value may start with ``-`` where it begins an argument: only when the
        operator said so, by a pattern, an enum or a negative minimum."""
        return (self.pattern is not None
                or any(str(e).startswith("-") for e in self.enum or ())
                or (self.minimum is not None and self.minimum < 0))

    def check(self, value: Any) -> str | None:
        """Return why ``value`` breaks this schema, or None when it is valid."""
        if self.type is ParamType.BOOLEAN:
            return None if isinstance(value, bool) else "must be true or false"
        if self.type is ParamType.INTEGER:
            return self._check_integer(value)
        return self._check_string(value)

    def _check_integer(self, value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int):
            return "must be an integer"
        if self.minimum is not None and value < self.minimum:
            return f"must be >= {self.minimum}"
        if self.maximum is not None and value > self.maximum:
            return f"must be <= {self.maximum}"
        if self.enum is not None and value not in self.enum:
            return f"must be one of {self.enum}"
        return None

    def _check_string(self, value: Any) -> str | None:
        if not isinstance(value, str):
            return "must be a string"
        if _CONTROL.search(value):
            return "must not contain control characters or line breaks"
        if len(value) > self.max_length:
            return f"is longer than {self.max_length} characters"
        if self.enum is not None and value not in self.enum:
            return f"must be one of {', '.join(map(str, self.enum))}"
        # RE2: linear time, and \d, \w are ASCII (no look-alike digits from other scripts)
        if self.pattern is not None and not compile_safe(self.pattern).fullmatch(value):
            return f"{value!r} does not match the pattern {self.pattern}"
        return None


class ToolSuccess(BaseModel):
    """What success means for a tool; plans may add to it, never relax it."""

    model_config = ConfigDict(extra="forbid")

    exit_code: int = 0
    output_pattern: str | None = Field(default=None, max_length=500,
                                       description="regex a line of output must match")

    @field_validator("output_pattern")
    @classmethod
    def _pattern_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            compile_safe(value)
        return value


class Tool(BaseModel):
    """One operation deckhand can run: a command template and what it is allowed to do."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME)
    description: str = Field(min_length=1, max_length=500)
    params: dict[str, ParamSpec] = Field(default_factory=dict)
    """Before ``command``: the command's check reads which parameters are ``code``."""
    command: str | None = Field(default=None, min_length=1)
    gate: GateSpec | None = None
    """Instead of a command: a check deckhand evaluates itself (tools.gates)."""
    check: str | None = Field(default=None, min_length=1)
    """A command with the same parameters that verifies the tool could run (dry runs)."""
    target: str = "local"
    timeout: float = Field(default=300.0, gt=0, le=86400)
    retries: int = Field(default=0, ge=0, le=10)
    retry_backoff: float = Field(default=1.0, ge=0, le=600)
    mutates: bool = False
    idempotent: bool = False
    rollback: str | None = None
    outputs: dict[str, str] = Field(default_factory=dict)
    success: ToolSuccess = Field(default_factory=ToolSuccess)
    approval: Literal["required", "none"] = "required"
    """``none``: a one-step plan of this tool runs at once. Only for tools that merely read."""

    @field_validator("command", "check")
    @classmethod
    def _shell_safe(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:  # ShellRefused names each unsafe placeholder, line, context
            params: dict[str, ParamSpec] = info.data.get("params") or {}
            parse_shell(value, code=_code_params(params))
        return value

    @field_validator("target")
    @classmethod
    def _target_form(cls, value: str) -> str:
        if value in ("local", "environment") or re.fullmatch(r"group:[\w.-]+", value):
            return value
        raise ValueError("target must be 'local', 'environment' or 'group:NAME'")

    @field_validator("outputs")
    @classmethod
    def _outputs_compile(cls, value: dict[str, str]) -> dict[str, str]:
        for key, pattern in value.items():
            if not re.fullmatch(NAME, key):
                raise ValueError(f"output name {key!r} must match {NAME}")
            if compile_safe(pattern).groups != 1:
                raise ValueError(f"output {key!r}: pattern needs exactly one capture group")
        return value

    @model_validator(mode="after")
    def _command_or_gate(self) -> Tool:
        if (self.command is None) == (self.gate is None):
            raise ValueError("a tool has either a command or a gate (not both, not neither)")
        if self.gate is not None and (self.mutates or self.rollback):
            raise ValueError("a gate only reads: it cannot mutate or have a rollback")
        return self

    @model_validator(mode="after")
    def _gate_fits_its_timeout(self) -> Tool:
        # sampling waits count-1 intervals: past the timeout the gate always fails, and
        # its message would blame the data
        gate = self.gate
        if isinstance(gate, PrometheusGate) and gate.count > 1 \
                and (gate.count - 1) * gate.interval >= self.timeout:
            raise ValueError(
                f"count {gate.count} samples {gate.interval:g}s apart take "
                f"{(gate.count - 1) * gate.interval:g}s, not within the gate's timeout "
                f"{self.timeout:g}s: it could never pass; raise timeout, or sample less")
        return self

    @model_validator(mode="after")
    def _approval_only_when_read_only(self) -> Tool:
        if self.approval == "none" and self.mutates:
            raise ValueError("approval: none is only for tools that do not mutate")
        return self

    @model_validator(mode="after")
    def _environment_param(self) -> Tool:
        # A tool that runs on an environment's hosts is told which one by `environment`.
        if self.target == "environment" and "environment" not in self.params:
            self.params["environment"] = ParamSpec(description="environment to run on")
        return self

    @property
    def templates(self) -> dict[str, str]:
        """The template strings this tool fills: its command, or its gate's fields."""
        if self.gate is None:
            checked = {"check": self.check} if self.check else {}
            return {"command": self.command or "", **checked}
        return {k: v for k, v in self.gate.model_dump().items()
                if k in GATE_TEMPLATE_FIELDS and isinstance(v, str)}

    @property
    def placeholders(self) -> list[str]:
        """Names used in the templates, e.g. ``version`` or ``host.dir``."""
        return [f for text in self.templates.values()
                for _, f, _, _ in string.Formatter().parse(text) if f is not None]


class Catalog:
    """All tools by name, with parameter validation and safe command rendering."""

    def __init__(self, tools: dict[str, Tool]):
        self.tools = tools

    def __contains__(self, name: object) -> bool:
        return name in self.tools

    @property
    def undo_tools(self) -> set[str]:
        """Tools that are another tool's rollback: running one is itself the remedy."""
        return {t.rollback for t in self.tools.values() if t.rollback}

    def get(self, name: str) -> Tool:
        """The tool called ``name``; UnknownTool (with a suggestion) if there is none."""
        try:
            return self.tools[name]
        except KeyError:
            raise UnknownTool(unknown_tool_message(name, list(self.tools))) from None

    def param_problems(self, tool: Tool, params: dict[str, Any], *,
                       unchecked: Collection[str] = ()) -> list[str]:
        """Every way ``params`` breaks ``tool``'s schema (empty when valid).

        Values of the form ``${steps.ID.OUTPUT}`` are accepted here; they are resolved
        and checked against the schema when the step runs. Values of ``unchecked`` keys
        are not literal yet (a playbook template's placeholders): only their names count.
        """
        problems = [f"unknown parameter {k!r} for tool {tool.name}" for k in params
                    if k not in tool.params]
        for key, spec in tool.params.items():
            if key not in params:
                if spec.required and spec.default is None:
                    problems.append(f"missing required parameter {key!r}")
                continue
            value = params[key]
            if key in unchecked or (isinstance(value, str) and OUTPUT_REF.match(value)):
                continue
            reason = spec.check(value) or self._option_problem(tool, key, spec, value)
            if reason:
                problems.append(f"parameter {key!r} {reason}")
        return problems

    @staticmethod
    def _option_problem(tool: Tool, key: str, spec: ParamSpec, value: Any) -> str | None:
        """A value the command would read as an option (refused before a plan is shown;
        ``ShellTemplate.fill`` refuses it again when the step runs)."""
        if tool.command is None or spec.admits_options or not isinstance(value, str | int):
            return None
        try:
            leading = parse_shell(tool.command, code=_code_params(tool.params)).leading
        except ValueError:
            return None  # a refused template is reported where the tool is loaded
        return option_problem(str(value)) if key in leading else None

    def with_defaults(self, tool: Tool, params: dict[str, Any]) -> dict[str, ParamValue]:
        """``params`` plus the tool's defaults for anything left out."""
        full = {k: s.default for k, s in tool.params.items() if s.default is not None}
        full.update(params)
        return full

    def render(self, tool: Tool, params: dict[str, Any], *, host_vars: dict[str, Any],
               config_vars: dict[str, Any]) -> str:
        """What runs for one invocation: the shell source (values delivered as variables,
        see :meth:`command`), or for a gate its filled spec as JSON.

        Raises ParamError if a parameter is invalid or a placeholder has no value.
        """
        if tool.gate is not None:
            full = self._valid(tool, params)
            scopes = {"host": host_vars, "vars": config_vars}
            return _render_gate(tool, tool.gate, full, scopes)
        return self.command(tool, params, host_vars=host_vars, config_vars=config_vars).source

    def command(self, tool: Tool, params: dict[str, Any], *, host_vars: dict[str, Any],
                config_vars: dict[str, Any]) -> ShellCommand:
        """The typed shell command for one invocation of a command tool (secrets known,
        so ``shown()`` masks them)."""
        full = self._valid(tool, params)
        scopes = {"host": host_vars, "vars": config_vars}
        template = parse_shell(tool.command or "", code=_code_params(tool.params))
        values = {f: _lookup(f, full, scopes, tool.name) for f in template.fields}
        secret = frozenset(k for k, spec in tool.params.items() if spec.secret)
        options = frozenset(k for k, spec in tool.params.items() if spec.admits_options)
        try:
            return template.fill(values, secret=secret, options=options)
        except ValueRefused as exc:
            raise ParamError(f"tool {tool.name}: {exc}") from exc

    def _valid(self, tool: Tool, params: dict[str, Any]) -> dict[str, ParamValue]:
        full = self.with_defaults(tool, params)
        problems = self.param_problems(tool, full)
        if problems:
            raise ParamError(f"tool {tool.name}: " + "; ".join(problems))
        return full


def _code_params(params: dict[str, ParamSpec]) -> frozenset[str]:
    """Parameters the operator declared trusted scripts (``code: true``)."""
    return frozenset(k for k, spec in params.items() if spec.code)


def _fill(template: str, value_of: Callable[[str], str]) -> str:
    out: list[str] = []
    for literal, field, _, _ in string.Formatter().parse(template):
        out.append(literal)
        if field is not None:
            out.append(value_of(field))
    return "".join(out)


def _render_gate(tool: Tool, gate: GateSpec, params: dict[str, Any],
                 scopes: dict[str, dict[str, Any]]) -> str:
    """The gate with its templates filled, as JSON (what the gate runner evaluates).

    Plan parameters go into URLs and queries, so each must be a plain token
    (``SAFE_VALUE``); operator-written vars are used as they are.
    """
    def value_of(field: str) -> str:
        value = str(_lookup(field, params, scopes, tool.name))
        if "." not in field and not SAFE_VALUE.fullmatch(value):
            raise ParamError(f"tool {tool.name}: {field}={value!r} cannot go into a gate "
                             f"(letters, digits and _.:@+- only)")
        return value

    filled = {k: _fill(v, value_of) for k, v in tool.templates.items()}
    return gate.model_copy(update=filled).model_dump_json(by_alias=True)


def unknown_tool_message(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return f"unknown tool {name!r}.{hint} Known tools: {', '.join(sorted(known))}"


def _lookup(field: str, params: dict[str, Any], scopes: dict[str, dict[str, Any]],
            tool: str) -> Any:
    scope, _, key = field.partition(".")
    if key and scope in scopes:
        if key in scopes[scope]:
            return scopes[scope][key]
        raise ParamError(f"tool {tool}: template needs {{{field}}} but it is not set")
    if field in params:
        return params[field]
    raise ParamError(f"tool {tool}: template needs {{{field}}} but it has no value")
