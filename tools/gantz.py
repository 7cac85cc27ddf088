"""gantz-style tool files (``tools: [{name, description, parameters: [...], script: {shell}}]``)
converted into catalog tools.

Each ``{{param}}`` becomes a deckhand placeholder, so its value is validated against the
parameter's schema and delivered as a variable by ``Catalog.render`` — never substituted
raw. The same shell parser as tools.yml (``tools.shell``) refuses a placeholder wherever no
value is safe ('…', quoted heredocs, comments, eval, sh -c, arithmetic…), with its line in
the script. Such tools change hosts (``mutates: true``)
unless the file says otherwise: fail closed. Whatever cannot be converted is reported,
with why, instead of being guessed at.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from pydantic import ValidationError

from tools.catalog import ParamSpec, Tool
from tools.shell import refusals_in

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
TYPES = {"string": "string", "integer": "integer", "boolean": "boolean"}
KEPT = ("mutates", "idempotent", "rollback", "target", "timeout", "retries", "outputs")
"""deckhand fields a gantz entry may set directly."""


def is_gantz(raw: Any) -> bool:
    """gantz files list their tools; deckhand's tools.yml maps names to tools."""
    return isinstance(raw, list)


class Unconverted(NamedTuple):
    """Why entry ``entry`` cannot be converted; ``line`` is a line of its script, if known."""

    entry: int
    why: str
    line: int | None = None


def convert(raw: list[Any]) -> tuple[dict[str, Tool], list[Unconverted]]:
    """The tools that convert, and why for every entry that does not."""
    tools: dict[str, Tool] = {}
    problems: list[Unconverted] = []
    for index, entry in enumerate(raw):
        try:
            tool = convert_one(entry)
        except (ValueError, ValidationError) as exc:
            refused = refusals_in(exc)
            problems += [Unconverted(index, r.describe("script"), r.line)
                         for _, r in refused] or [Unconverted(index, _reason(exc))]
            continue
        if tool.name in tools:
            problems.append(Unconverted(index, f"tool {tool.name!r} is defined twice"))
        tools[tool.name] = tool
    return tools, problems


def convert_one(entry: Any) -> Tool:
    if not isinstance(entry, dict):
        raise ValueError("each tool must be a mapping")
    params = {p["name"]: _param(p) for p in _parameters(entry)}
    command = _command(_script(entry), set(params))
    kept = {k: entry[k] for k in KEPT if k in entry}
    return Tool.model_validate({"name": entry.get("name"), "description":
                                entry.get("description") or "", "command": command,
                                "params": params, "mutates": True, **kept})


def _parameters(entry: dict[str, Any]) -> list[dict[str, Any]]:
    params = entry.get("parameters") or []
    if not isinstance(params, list) or not all(isinstance(p, dict) and p.get("name")
                                               for p in params):
        raise ValueError("parameters must be a list of mappings with a name")
    return params


def _param(raw: dict[str, Any]) -> ParamSpec:
    kind = str(raw.get("type", "string"))
    if kind not in TYPES:
        raise ValueError(f"parameter {raw['name']!r}: type {kind!r} is not supported "
                         f"(use {', '.join(TYPES)})")
    spec = {k: raw[k] for k in ("description", "default", "enum", "pattern") if k in raw}
    return ParamSpec.model_validate({"type": TYPES[kind], "required":
                                     bool(raw.get("required", True)), **spec})


def _script(entry: dict[str, Any]) -> str:
    script = entry.get("script")
    shell = script.get("shell") if isinstance(script, dict) else None
    if not isinstance(shell, str) or not shell.strip():
        raise ValueError("only `script: {shell: ...}` tools can be converted")
    return shell


def _command(script: str, params: set[str]) -> str:
    """The deckhand template: literal braces escaped, ``{{p}}`` turned into ``{p}``."""
    out, last = [], 0
    for match in PLACEHOLDER.finditer(script):
        name = match.group(1)
        if name not in params:
            raise ValueError(f"script uses {{{{{name}}}}}, which is not a declared parameter")
        out += [_escape(script[last:match.start()]), "{" + name + "}"]
        last = match.end()
    out.append(_escape(script[last:]))
    return "".join(out)


def _escape(literal: str) -> str:
    return literal.replace("{", "{{").replace("}", "}}")


def _reason(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'tool'}: {e['msg']}"
                         for e in exc.errors())
    return str(exc)
