"""Prompt templates: files in ``agents/planning/prompts/``, each with a name, the placeholders
it must keep, and a version — the first 12 hex digits of the sha256 of its bytes.

An operator may replace a template from the config (``planner.prompts: {plan: my-plan.txt}``);
the replacement is versioned the same way, so every plan says which text asked for it.

Substitution is one pass over ``{{name}}`` placeholders — no expressions, no eval, no
template engine: a value that itself holds ``{{tools}}`` (a user's request) is inserted as
written, never expanded. A template must keep its required placeholders and may use only the
ones declared here (``SLOTS``): an unknown ``{{x}}`` would reach the model verbatim.

What one operation sends (``OPERATIONS``: the system message, its user message, the repair
message) is versioned as a whole: a plan records ``plan@<version>``, and that version changes
when any template it was asked with changes.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
MAX_TEMPLATE_BYTES = 64 * 1024
BUILT_IN = "built-in"


@dataclass(frozen=True)
class Slots:
    """The placeholders a template must keep, and those it may leave out."""

    required: frozenset[str]
    optional: frozenset[str] = frozenset()


SLOTS: dict[str, Slots] = {
    "system": Slots(frozenset({"policy", "tools", "inventory", "format"}),
                    frozenset({"examples"})),
    "plan": Slots(frozenset({"request"})),
    "modify": Slots(frozenset({"plan", "change"}), frozenset({"version"})),
    "replan": Slots(frozenset({"plan", "record"}), frozenset({"version"})),
    "repair": Slots(frozenset({"problems"})),
}
"""Every template by name (the file is ``prompts/NAME.txt``)."""

OPERATIONS: dict[str, tuple[str, ...]] = {
    "plan": ("system", "plan", "repair"),
    "modify": ("system", "modify", "repair"),
    "replan": ("system", "replan", "repair"),
}
"""What the planner asks, and the templates each conversation is built from."""


class TemplateRefused(ValueError):
    """A template file cannot be used; the message names the template and what is wrong."""


@dataclass(frozen=True)
class Template:
    """One template: its text, its version and where it came from."""

    name: str
    text: str
    version: str
    source: str = BUILT_IN

    def render(self, **values: str) -> str:
        """The text with each ``{{name}}`` replaced, in one pass (values are never scanned)."""
        return PLACEHOLDER.sub(lambda m: values[m.group(1)], self.text)


def parse_template(name: str, data: bytes, source: str = BUILT_IN) -> Template:
    """A template from its file's bytes; TemplateRefused names each problem.

    The version hashes the bytes as stored; one trailing newline (editors add it) is not
    part of the text sent.
    """
    _known(name)
    if len(data) > MAX_TEMPLATE_BYTES:
        raise TemplateRefused(f"template {name} ({source}) is {len(data)} bytes; at most "
                              f"{MAX_TEMPLATE_BYTES} are accepted")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TemplateRefused(f"template {name} ({source}) is not UTF-8 text") from exc
    problems = placeholder_problems(name, text)
    if problems:
        raise TemplateRefused(f"template {name} ({source}) " + "; ".join(problems))
    version = hashlib.sha256(data).hexdigest()[:12]
    return Template(name, text.removesuffix("\n"), version, source)


def placeholder_problems(name: str, text: str) -> list[str]:
    """Required placeholders the text lost, and placeholders it may not use."""
    used, slots = set(PLACEHOLDER.findall(text)), SLOTS[name]
    out = [f"lost the required placeholder {{{{{slot}}}}}: put it back where that text goes"
           for slot in sorted(slots.required - used)]
    allowed = ", ".join(f"{{{{{s}}}}}" for s in sorted(slots.required | slots.optional))
    out += [f"uses the unknown placeholder {{{{{slot}}}}} (allowed: {allowed})"
            for slot in sorted(used - slots.required - slots.optional)]
    return out


def read_template(name: str, path: Path) -> Template:
    """An operator's replacement for template ``name``, read from ``path``."""
    _known(name)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TemplateRefused(f"template {name}: cannot read {path} "
                              f"({exc.strerror or type(exc).__name__})") from exc
    return parse_template(name, data, str(path))


def _known(name: str) -> None:
    if name not in SLOTS:
        raise TemplateRefused(f"there is no prompt template {name!r} (known: "
                              f"{', '.join(sorted(SLOTS))})")


@functools.cache
def built_in(name: str) -> Template:
    """The template shipped with deckhand (read once per process)."""
    data = resources.files("agents.planning").joinpath("prompts", f"{name}.txt").read_bytes()
    return parse_template(name, data)


class PromptSet:
    """The templates the planner uses: the built-in ones, some replaced by the operator."""

    def __init__(self, overrides: Mapping[str, Template] | None = None):
        self.templates = {name: (overrides or {}).get(name) or built_in(name) for name in SLOTS}

    def render(self, name: str, **values: str) -> str:
        return self.templates[name].render(**values)

    def version(self, operation: str) -> str:
        """The version of what ``operation`` sends: a hash of its templates' versions."""
        parts = "".join(f"{t}={self.templates[t].version}\n" for t in OPERATIONS[operation])
        return hashlib.sha256(parts.encode()).hexdigest()[:12]

    def versions(self) -> dict[str, str]:
        """Each operation's version, e.g. ``{"plan": "3f2a…", "modify": …, "replan": …}``."""
        return {operation: self.version(operation) for operation in OPERATIONS}

    @property
    def overridden(self) -> dict[str, str]:
        """Replaced templates and the file each came from."""
        return {n: t.source for n, t in self.templates.items() if t.source != BUILT_IN}
