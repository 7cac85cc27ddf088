"""What the LLM planner is told, and the wire models it must answer with.

The prompt is built from the live config, so what the model is told cannot drift from what
validation accepts: tools (descriptions, parameter schemas, targets, mutates/rollback),
environments and hosts, policy rules, and the playbooks as worked examples. The wording is
not here: it is in the versioned templates of ``agents/prompts/`` (see
``agents.prompts.templates``), which these functions fill with that config.

Order matters for prompt caching: the system message is a stable prefix (the same bytes for
every request against one config); the request, the plan to change or the run record come
last, in the user message.

The wire models obey OpenAI strict structured-output rules (every field required, nullable
where optional, no extra properties, bounded arrays and strings). ``Plan.params`` is a free
dict, which strict mode cannot express, so on the wire parameters are ``{name, value}`` pairs.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.config import Config
from agents.errors import PlanInvalid
from agents.plan.model import MAX_REQUEST, Plan, RollbackStep, Step
from agents.prompts.templates import PromptSet
from agents.requests.playbooks import Playbook
from agents.run.record import Run, StepStatus
from tools.catalog import NAME, ParamSpec, Tool

MAX_WIRE_STEPS = 30
MAX_WIRE_ROLLBACK = 10
MAX_REQUEST_CHARS = MAX_REQUEST
TAIL_LINES = 20
MAX_REFUSED_CHARS = 4000

_DECLINE = json.dumps({"cannot_plan": "no tool runs arbitrary shell commands or deletes logs",
                       "goal": "", "steps": [], "rollback": []}, separators=(",", ":"))
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_THINK = re.compile(r"^\s*<think>.*?</think>", re.S)  # reasoning models served by vLLM, Ollama


class WireParam(BaseModel):
    """One parameter of a step: strict mode has no free-form maps, so a name/value pair."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=64, description="a parameter name of the step's tool")
    value: Annotated[str, Field(max_length=500)] | int | bool = Field(
        description='the value; or "${steps.STEP_ID.OUTPUT}" for an output of an earlier step')


class WireSuccess(BaseModel):
    model_config = ConfigDict(extra="forbid")

    exit_code: int | None = Field(description="null: the tool's own exit code (a plan cannot "
                                              "change what success means, only add a pattern)")
    output_pattern: str | None = Field(max_length=200,
                                       description="regex (RE2) a line of output must also "
                                                   "match, or null")


class WireStep(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=NAME, max_length=63, description="unique snake_case step id")
    tool: str = Field(max_length=64, description="a tool name from the catalog")
    params: list[WireParam] = Field(max_length=20)
    depends_on: list[Annotated[str, Field(max_length=63)]] = Field(
        max_length=20, description="ids of steps that must succeed before this one starts")
    description: str = Field(max_length=200, description="one short line for humans")
    success: WireSuccess | None = Field(description="null: the tool's own checks only")


class WireRollbackStep(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=NAME, max_length=63, description="unique snake_case step id")
    tool: str = Field(max_length=64, description="a tool name from the catalog")
    params: list[WireParam] = Field(max_length=20)
    description: str = Field(max_length=200, description="one short line for humans")


class WirePlan(BaseModel):
    """What the model answers for a new request or a change to a plan."""

    model_config = ConfigDict(extra="forbid")

    cannot_plan: str | None = Field(
        max_length=300, description="null; or, when the request cannot be done with these "
                                    "tools and rules, why not (then steps and rollback are empty)")
    goal: str = Field(max_length=300, description="what the plan achieves, one line")
    steps: list[WireStep] = Field(max_length=MAX_WIRE_STEPS)
    rollback: list[WireRollbackStep] = Field(max_length=MAX_WIRE_ROLLBACK)


class WireReplan(BaseModel):
    """What the model answers after a step failed: the steps still to run, or roll back."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["continue", "rollback"] = Field(
        description="continue with revised remaining steps, or rollback to undo the changes")
    reason: str = Field(max_length=300, description="why, in one line for the team")
    steps: list[WireStep] = Field(max_length=MAX_WIRE_STEPS,
                                  description="the steps still to run (empty for rollback)")
    rollback: list[WireRollbackStep] = Field(max_length=MAX_WIRE_ROLLBACK)


# -- schema -------------------------------------------------------------------------------


@functools.cache
def _strict_json(model: type[BaseModel]) -> str:
    """A wire model's strict schema, made once (pydantic and the inlining take ~10 ms;
    ``check`` asks for every service's, the LLM planner for every request)."""
    raw: dict[str, Any] = model.model_json_schema()
    defs = raw.pop("$defs", {})
    return json.dumps(_strictify(_inline(raw, defs)))


def strict_schema(model: type[BaseModel], *, tools: list[str] | None = None) -> dict[str, Any]:
    """The JSON schema of ``model`` in OpenAI strict form, refs inlined.

    Args:
        model: a wire model.
        tools: if given, ``tool`` fields are restricted to these names.
    """
    schema: dict[str, Any] = json.loads(_strict_json(model))  # a fresh copy: changed below
    if tools:
        _restrict_tools(schema, sorted(tools))
    return schema


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            return _inline(copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]]), defs)
        return {k: _inline(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def _strictify(node: Any) -> Any:
    """Every object closed with all properties required; titles and defaults dropped."""
    if isinstance(node, list):
        return [_strictify(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strictify(v) for k, v in node.items() if k not in ("title", "default")}
    if out.get("type") == "object":
        out["additionalProperties"] = False
        out["required"] = list(out.get("properties", {}))
    return out


def _restrict_tools(node: Any, tools: list[str]) -> None:
    if isinstance(node, dict):
        tool = node.get("properties", {}).get("tool")
        if isinstance(tool, dict):
            tool["enum"] = tools
        for value in node.values():
            _restrict_tools(value, tools)
    elif isinstance(node, list):
        for value in node:
            _restrict_tools(value, tools)


# -- wire <-> plan ------------------------------------------------------------------------


def parse_wire(content: str, model: type[BaseModel]) -> Any:
    """Parse the model's answer (tolerating a code fence, a <think> block or prose around
    one JSON object) into ``model``.

    Raises:
        ValueError: the text is not JSON (json.JSONDecodeError) or breaks the model
            (pydantic.ValidationError).
    """
    text = _unfenced(_THINK.sub("", content).strip())
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        # A model asked in the prompt alone often wraps the object in prose: take the span
        # from the first { to the last } (find/rfind: linear on hostile input).
        start, end = text.find("{"), text.rfind("}")
        if start < 0 or end <= start:
            raise
        data = json.loads(text[start:end + 1])
    return model.model_validate(data)


def _unfenced(text: str) -> str:
    """Without a surrounding code fence. String operations, not a regex: ``\\s*```$`` is
    quadratic on a long run of spaces, and the answer is hostile input."""
    if text.startswith("```"):
        text = text[3:]
        text = text[4:] if text.startswith("json") else text
    if text.endswith("```"):
        text = text[:-3]
    return text.strip()


def wire_params(params: list[WireParam], step_id: str) -> dict[str, Any]:
    """Pairs to a dict; a name given twice is a problem, not silently the last one."""
    out: dict[str, Any] = {}
    for param in params:
        if param.name in out:
            raise PlanInvalid([f"step {step_id}: parameter {param.name!r} is given twice"])
        out[param.name] = param.value
    return out


def wire_steps(steps: list[WireStep]) -> list[dict[str, Any]]:
    return [{"id": s.id, "tool": s.tool, "params": wire_params(s.params, s.id),
             "depends_on": s.depends_on, "description": s.description,
             "success": s.success.model_dump() if s.success else None} for s in steps]


def wire_rollback(steps: list[WireRollbackStep]) -> list[dict[str, Any]]:
    return [{"id": s.id, "tool": s.tool, "params": wire_params(s.params, s.id),
             "description": s.description} for s in steps]


def plan_to_wire(plan: Plan) -> dict[str, Any]:
    """A plan in the shape the model answers with (for examples and for changes)."""
    return {"cannot_plan": None, "goal": plan.goal,
            "steps": [_step_to_wire(s) for s in plan.steps],
            "rollback": [_step_to_wire(r) for r in plan.rollback]}


def _step_to_wire(step: Step | RollbackStep) -> dict[str, Any]:
    out: dict[str, Any] = {"id": step.id, "tool": step.tool,
                           "params": [{"name": k, "value": v} for k, v in step.params.items()]}
    if isinstance(step, Step):
        out["depends_on"] = step.depends_on
    out["description"] = step.description
    if isinstance(step, Step):
        out["success"] = step.success.model_dump() if step.success else None
    return out


# -- which tools a request can need ---------------------------------------------------------

TOOLS_IN_FULL = 40
"""A catalog of at most this many tools is sent whole (the prompt a stable prefix); a larger
one only the tools a request's words name, at most this many, with their undo tools (issue
44: 408 tools made a 174,880-character prompt)."""
_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class ToolChoice:
    """The tools a prompt lists (``sent``, by name) and those it leaves out."""

    sent: list[str]
    left_out: list[str]

    def note(self, limit: int = 20) -> str:
        """What was left out, for the plan's provenance and the log ('' when nothing)."""
        if not self.left_out:
            return ""
        names = ", ".join(self.left_out[:limit])
        more = f" and {len(self.left_out) - limit} more" if len(self.left_out) > limit else ""
        return (f"sent {len(self.sent)} of {len(self.sent) + len(self.left_out)} tools; left "
                f"out: {names}{more}")


def tools_for(config: Config, text: str) -> ToolChoice:
    """The tools ``text`` (a request, with the tools of a plan being changed) can need:
    all of a small catalog; of a large one, those whose name (first) or description shares
    a word with it, plus the tool that undoes each. A text that names none gets them all:
    there is nothing to choose by, and the model must not be left without the tool."""
    tools = config.catalog.tools
    if len(tools) <= TOOLS_IN_FULL:
        return ToolChoice(sorted(tools), [])
    asked = _stems(text, 2)
    by_name = [n for n in sorted(tools) if asked & _stems(n, 2)]
    by_text = [n for n in sorted(tools)
               if n not in by_name and asked & _stems(tools[n].description, 4)]
    chosen = (by_name + by_text)[:TOOLS_IN_FULL]
    if not chosen:
        return ToolChoice(sorted(tools), [])
    undo = {tools[n].rollback for n in chosen if tools[n].rollback in tools}
    sent = sorted({*chosen, *(u for u in undo if u is not None)})
    return ToolChoice(sent, sorted(set(tools) - set(sent)))


_COMMON = frozenset({"to", "on", "in", "of", "the", "and", "for", "an", "is", "at", "by",
                     "it", "or", "with", "from", "this", "that", "please", "then"})


def _stems(text: str, shortest: int) -> set[str]:
    """The words of ``text`` that can choose a tool, each without a plural s and cut to
    five letters (test, tests; deploy, deploys, deployment: one word)."""
    return {(w[:-1] if len(w) > 3 and w.endswith("s") else w)[:5]
            for w in _WORD.findall(text.lower()) if len(w) >= shortest and w not in _COMMON}


# -- the system message (stable prefix) --------------------------------------------------

def system_prompt(config: Config, answer: type[BaseModel],
                  redact: Callable[[str], str] = lambda text: text,
                  tools: ToolChoice | None = None) -> str:
    """The stable system message: the ``system`` template filled with the policy, catalog,
    inventory, examples and answer format of ``config``.

    Built from a redacted view of the catalog (secret defaults never shown), then redacted
    whole again: the model never sees a secret. ``tools``: the part of a large catalog a
    request can need (all of it by default).
    """
    tools = tools or ToolChoice(sorted(config.catalog.tools), [])
    policy = _policy_text(config)
    return redact(config.prompts.render(
        "system", policy=policy + "\n" if policy else "", tools=_tools_text(config, redact, tools),
        inventory=_inventory_text(config), examples=_examples_text(config.playbooks),
        format=_format_text(answer, tools.sent)))


def _policy_text(config: Config) -> str:
    policy, catalog = config.policy, config.catalog
    lines = ["Rules of this team:"]
    if policy.promotion:
        lines.append(f"- Promotion order: {' -> '.join(policy.promotion)}. A step that "
                     f"changes an environment must depend, directly or not, on a step that "
                     f"changed the environment before it in this order, in this same plan.")
    if policy.require_rollback:
        pairs = ", ".join(f"{t.name} -> {t.rollback}" for t in catalog.tools.values()
                          if t.mutates and t.rollback)
        lines.append(f"- Rollback required: every step whose tool changes hosts needs a "
                     f"rollback step using that tool's rollback tool with the same "
                     f"environment ({pairs}).")
    return "\n".join(lines) + "\n" if len(lines) > 1 else ""


def _tools_text(config: Config, redact: Callable[[str], str], tools: ToolChoice) -> str:
    hide = _secret_default(config.secrets, redact)
    blocks = [describe_tool(config.catalog.tools[name], hide) for name in tools.sent]
    more = (f"\n({len(tools.left_out)} other tools of this service are not listed: none of "
            f"them fits this request's words. Use only the tools above.)"
            if tools.left_out else "")
    return "Tools:\n" + "\n".join(blocks) + more


def _secret_default(secrets: list[str], redact: Callable[[str], str]
                    ) -> Callable[[ParamSpec], bool]:
    """Whether a parameter's default must not be shown: marked secret, a configured secret,
    containing one, or shaped like a credential (the redactor would change it)."""
    def hide(spec: ParamSpec) -> bool:
        text = str(spec.default)
        return (spec.secret or redact(text) != text
                or any(s and s in text for s in secrets))
    return hide


def describe_tool(tool: Tool, hide: Callable[[ParamSpec], bool] = lambda spec: spec.secret
                  ) -> str:
    """One tool, as the model needs to know it (never its command template or a secret)."""
    lines = [f"- {tool.name}: {tool.description}", f"  runs on: {_target_text(tool.target)}"]
    if tool.mutates:
        undo = f"; undo with tool {tool.rollback}" if tool.rollback else ""
        lines.append(f"  changes hosts: yes{undo}")
    else:
        lines.append("  changes hosts: no (read-only)")
    if tool.params:
        lines.append("  params:")
        lines += [f"    - {name}: {describe_param(spec, hide_default=hide(spec))}"
                  for name, spec in tool.params.items()]
    else:
        lines.append("  params: none")
    lines.append(f"  success: {_success_text(tool)} (a step may add an output_pattern, "
                 f"never change these)")
    if tool.outputs:
        outs = ", ".join(f'{o} (use as "${{steps.STEP_ID.{o}}}")' for o in tool.outputs)
        lines.append(f"  outputs: {outs}")
    return "\n".join(lines)


def _success_text(tool: Tool) -> str:
    pattern = tool.success.output_pattern
    return f"exit code {tool.success.exit_code}" + (
        f" and a line matching {pattern}" if pattern else "")


def describe_param(spec: ParamSpec, *, hide_default: bool = False) -> str:
    default = "set by the operator" if hide_default else repr(spec.default)
    bits = [spec.type.value, "required" if spec.required and spec.default is None
            else f"optional (default {default})"]
    if spec.enum:
        bits.append("one of: " + ", ".join(map(str, spec.enum)))
    if spec.pattern:
        bits.append(f"pattern {spec.pattern}")
    if spec.minimum is not None or spec.maximum is not None:
        bits.append(f"range {spec.minimum}..{spec.maximum}")
    text = ", ".join(bits)
    return f"{text} — {spec.description}" if spec.description else text


def _target_text(target: str) -> str:
    if target == "environment":
        return "every host of the environment given by its `environment` parameter"
    if target.startswith("group:"):
        return f"every host of group {target[6:]}"
    return "the deckhand host"


def _inventory_text(config: Config) -> str:
    inventory = config.inventory
    lines = ["Environments and their hosts:"]
    for name, env in sorted(inventory.environments.items()):
        lines.append(f"- {name}: {', '.join(env.hosts)}")
    for name, members in sorted(inventory.groups.items()):
        lines.append(f"- group {name}: {', '.join(members)}")
    lines.append("Steps choose an environment, never a single host.")
    return "\n".join(lines) + "\n"


def _examples_text(playbooks: list[Playbook]) -> str:
    blocks = []
    for book in playbooks:
        for example in book.examples[:1]:
            values = book.groups_for(example)
            if values is None:
                continue
            plan = book.instantiate(values, requested_by="example")
            body = json.dumps(plan_to_wire(plan), separators=(",", ":"), ensure_ascii=False)
            blocks.append(f"Request: {example}\nAnswer: {body}")
    blocks.append(f"Request: open a shell on a server and delete the old logs\nAnswer: {_DECLINE}")
    return "Examples:\n" + "\n\n".join(blocks) + "\n"


def _format_text(answer: type[BaseModel], tools: list[str]) -> str:
    schema = strict_schema(answer, tools=tools)
    return ("Answer with one JSON object and nothing else, matching this JSON schema:\n"
            + json.dumps(schema, separators=(",", ":"), ensure_ascii=False))


# -- the user message (variable suffix) ---------------------------------------------------


def clean_text(text: str, limit: int = MAX_REQUEST_CHARS) -> str:
    """User text for the prompt: control characters dropped, length bounded."""
    return _CONTROL.sub(" ", text).strip()[:limit]


def plan_request(prompts: PromptSet, request: str) -> str:
    return prompts.render("plan", request=_quote_block(request, "request"))


def modify_request(prompts: PromptSet, plan: Plan, instruction: str) -> str:
    return prompts.render("modify", version=str(plan.version), plan=_wire_json(plan),
                          change=_quote_block(instruction, "change"))


def replan_request(prompts: PromptSet, plan: Plan, run: Run,
                   redact: Callable[[str], str]) -> str:
    return prompts.render("replan", version=str(plan.version), plan=_wire_json(plan),
                          record=run_record_text(plan, run, redact))


def _wire_json(plan: Plan) -> str:
    return json.dumps(plan_to_wire(plan), separators=(",", ":"), ensure_ascii=False)


def run_record_text(plan: Plan, run: Run, redact: Callable[[str], str]) -> str:
    """Each step's status; for failed steps the error and the last lines of output.

    The executor redacts outputs already; ``redact`` is the second lock on the same door.
    """
    lines = []
    for step in plan.steps:
        state = run.steps.get(step.id)
        status = state.status if state else StepStatus.PENDING
        line = f"- {step.id} ({step.tool}): {status.value}"
        if state and state.outputs:
            line += f"; outputs {redact(json.dumps(state.outputs, ensure_ascii=False))}"
        lines.append(line)
        if state and status is StepStatus.FAILED:
            lines += [redact(text) for text in _failure_lines(state)]
    return "\n".join(lines)


def _failure_lines(state: Any) -> list[str]:
    lines = [f"    error: {clean_text(state.error or 'unknown', 500)}"]
    for host in state.hosts.values():
        tail = [clean_text(t, 300) for t in host.tail.splitlines()[-TAIL_LINES:]]
        lines.append(f"    host {host.host}: exit code {host.exit_code}, last output:")
        lines += [f"      | {t}" for t in tail]
    return lines


def excerpt(content: str, limit: int = MAX_REFUSED_CHARS) -> str:
    """A model's answer cut to ``limit`` characters: sent back for repair (so repairs cannot
    grow without end: a 300 KB answer must not make a 600 KB request) and recorded with the
    plan it became."""
    if len(content) <= limit:
        return content or "(no answer)"
    return f"{content[:limit]}… ({len(content) - limit} more characters cut)"


CHARS_PER_TOKEN = 3.5
"""For estimates only: JSON and English run 3.5-4 characters a token in common tokenizers
(a 174,880-character prompt was about 45k tokens on gemma3); 3.5 errs towards not fitting."""


def estimate_tokens(text: str) -> int:
    """About how many tokens ``text`` is (no tokenizer: that would need the model's files)."""
    return int(-(-len(text) // CHARS_PER_TOKEN))


def largest_plan_prompt(config: Config, redact: Callable[[str], str] = lambda t: t) -> str:
    """The longest prompt a plan request can send: the system message, a request of the
    longest length allowed, a refused answer's excerpt and a repair message."""
    return "\n".join((system_prompt(config, WirePlan, redact),
                      plan_request(config.prompts, "x" * MAX_REQUEST_CHARS),
                      "x" * MAX_REFUSED_CHARS, repair_message(config.prompts, ["x" * 300])))


def repair_message(prompts: PromptSet, problems: list[str]) -> str:
    listed = "\n".join(f"- {clean_text(p, 300)}" for p in problems[:20])
    more = f"\n(and {len(problems) - 20} more)" if len(problems) > 20 else ""
    return prompts.render("repair", problems=listed + more)


def _quote_block(text: str, tag: str) -> str:
    # The closing tag inside user text would end the block early: neutralise it.
    return clean_text(text).replace(f"</{tag}>", f"</ {tag}>")
