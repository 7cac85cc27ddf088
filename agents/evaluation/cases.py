"""Evaluation cases: requests with hand-written gold plans, loaded from YAML and checked.

Two sets are bundled next to this module: ``cases.yml``, written for examples/deckhand.yml,
and ``starter_cases.yml``, for the config ``deckhand init`` writes; without ``--cases FILE``
the first whose tools the config has is used. Every problem in a file is
reported at once, each with its line, its path into the file and the case it belongs to.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agents.config import Config
from tools.errors import ConfigError, Problem
from tools.yamlsrc import Located, load_yaml, load_yaml_file

Kind = Literal["single", "chain", "fanout", "fanin", "refuse"]
Where = tuple[str | int, ...]
WHAT = "cases file"


class GoldStep(BaseModel):
    """One step a good plan has; ``id`` only names it for ``depends_on``."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    tool: str = Field(min_length=1)
    params: dict[str, Any] = Field(default_factory=dict)
    depends_on: list[str] = Field(default_factory=list)


class Case(BaseModel):
    """A request and the plan a good planner makes for it (none for ``kind: refuse``)."""

    model_config = ConfigDict(extra="forbid")

    request: str = Field(min_length=1)
    kind: Kind
    name: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9-]{0,59}$")
    """Lower-case letters, digits and dashes: recordings are files named after it."""
    steps: list[GoldStep] = Field(default_factory=list)
    rollback: list[GoldStep] = Field(default_factory=list)
    reason: str = ""
    min_node_f1: float = Field(default=1.0, ge=0.0, le=1.0)
    """Node F1 a plan needs to count as right (1.0: exactly the gold steps)."""
    min_edge_f1: float = Field(default=1.0, ge=0.0, le=1.0)
    """Edge F1 a plan needs to count as right (1.0: exactly the gold dependencies)."""

    @property
    def label(self) -> str:
        """The case's name: given, or the request as a slug (recordings are filed by it)."""
        return self.name or slug(self.request)

    @property
    def refuse(self) -> bool:
        return self.kind == "refuse"

    def gold_steps(self) -> list[dict[str, Any]]:
        return [s.model_dump() for s in self.steps]


class CasesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cases: list[Case] = Field(min_length=1)


def slug(text: str, limit: int = 60) -> str:
    """Lower-case words joined by dashes, e.g. ``deploy-v2-3-1-to-staging``."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit].rstrip("-") or "case"


BUNDLED = {"cases.yml": "examples/deckhand.yml",
           "starter_cases.yml": "the config `deckhand init` writes"}
"""The bundled cases files, each with the config it was written for."""
NAMED = {"examples": "cases.yml", "starter": "starter_cases.yml",
         "phrasings": "phrasings_cases.yml"}
"""``--cases NAME``: a bundled set by name (an installed deckhand has no checkout to point
at). ``phrasings``: 46 natural requests for the config ``deckhand init`` writes."""


def bundled_text(name: str = "cases.yml") -> str:
    """A bundled cases file's text (shipped as package data)."""
    return (resources.files("agents.evaluation") / name).read_text("utf-8")


def load_cases(path: Path | None = None, *, config: Config | None = None) -> list[Case]:
    """The cases in ``path`` (a file, or a bundled set's name in :data:`NAMED`; when None:
    the bundled set whose tools ``config`` has).

    With ``config``, gold steps must name tools it defines (so cases and tools.yml agree).

    Raises:
        ConfigError: every problem, one line each, naming line, path and case.
    """
    if path is None:
        doc, cases = _bundled_for(config)
    elif not path.exists() and str(path) in NAMED:  # a file of that name would win
        doc, cases = _read(partial(_load_bundled, NAMED[str(path)]))
    else:
        doc, cases = _read(lambda: load_yaml_file(path))
    found = [_problem(doc, cases, where, message)
             for where, message in _gold_problems(cases, config)]
    if found:
        raise ConfigError(found, what=WHAT)
    return cases


def _read(load: Callable[[], Located]) -> tuple[Located, list[Case]]:
    try:
        doc = load()
    except ConfigError as exc:  # unreadable, or not YAML
        raise ConfigError(exc.problems, what=WHAT) from exc
    if doc.problems:
        raise ConfigError(doc.problems, what=WHAT)
    try:
        return doc, CasesFile.model_validate(doc.data).cases
    except ValidationError as exc:
        raise ConfigError(_pydantic_problems(doc, exc), what=WHAT) from exc


def _load_bundled(name: str) -> Located:
    return load_yaml(bundled_text(name), f"bundled {name}")


def _bundled_for(config: Config | None) -> tuple[Located, list[Case]]:
    """The first bundled set whose tools ``config`` has; one line, not one per step, when
    none fits."""
    missing: dict[str, list[str]] = {}
    for name in BUNDLED:
        doc, cases = _read(partial(_load_bundled, name))
        used = {s.tool for case in cases for s in [*case.steps, *case.rollback]}
        missing[name] = sorted(used - set(config.catalog.tools)) if config else []
        if not missing[name]:
            return doc, cases
    assert config is not None  # without a config every bundled set fits
    tried = "; ".join(f"{name} (for {BUNDLED[name]}) needs {', '.join(tools)}"
                      for name, tools in missing.items())
    raise ConfigError([Problem("bundled cases", f"none fits {config.path}: {tried}. Pass "
                               f"your own cases with --cases FILE (start from a copy of "
                               f"one of them)")], what=WHAT)


def _pydantic_problems(doc: Located, exc: ValidationError) -> list[Problem]:
    data = doc.data.get("cases") if isinstance(doc.data, dict) else None
    raw = data if isinstance(data, list) else []
    out = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        label = _raw_label(raw, loc)
        message = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
        out.append(Problem(doc.where(loc) + (f" ({label})" if label else ""), message))
    return out


def _raw_label(raw: list[Any], loc: Where) -> str:
    """The case a pydantic error belongs to, named as best the raw data allows."""
    if len(loc) < 2 or loc[0] != "cases" or not isinstance(loc[1], int) or loc[1] >= len(raw):
        return ""
    item = raw[loc[1]]
    if not isinstance(item, dict):
        return f"case {loc[1]}"
    name, request = item.get("name"), item.get("request")
    return str(name) if name else slug(request) if isinstance(request, str) else f"case {loc[1]}"


def _problem(doc: Located, cases: list[Case], where: Where, message: str) -> Problem:
    return Problem(f"{doc.where(where)} ({cases[int(where[1])].label})", message)


def _gold_problems(cases: list[Case], config: Config | None) -> list[tuple[Where, str]]:
    """What pydantic cannot see: gold plans that contradict their kind or themselves."""
    out: list[tuple[Where, str]] = []
    seen: dict[str, int] = {}
    for index, case in enumerate(cases):
        at: Where = ("cases", index)
        if case.label in seen:
            out.append(((*at, "request"), f"same name as case {seen[case.label]}; give one "
                                          f"of them a `name:` (recordings are filed by it)"))
        seen.setdefault(case.label, index)
        out += [((*at, *where), message) for where, message in _case_problems(case, config)]
    return out


def _case_problems(case: Case, config: Config | None) -> list[tuple[Where, str]]:
    if case.refuse and (case.steps or case.rollback):
        return [(("steps",), "a refuse case has no gold plan; drop its steps and rollback")]
    if not case.refuse and not case.steps:
        return [(("steps",), "a case that should be planned needs its gold steps "
                             "(or `kind: refuse`)")]
    out: list[tuple[Where, str]] = []
    for part in ("steps", "rollback"):
        steps: list[GoldStep] = getattr(case, part)
        ids = [s.id for s in steps]
        for i, step in enumerate(steps):
            if step.id in ids[:i]:
                out.append(((part, i, "id"), f"duplicate step id {step.id!r}"))
            out += [((part, i, "depends_on"), f"depends on {dep!r}, which is not a step of "
                                               f"this case") for dep in step.depends_on
                    if dep not in ids]
            if config is not None and step.tool not in config.catalog.tools:
                out.append(((part, i, "tool"), f"unknown tool {step.tool!r} in "
                                               f"{config.path.name}: write cases for this "
                                               f"config (--cases FILE), or pass the config the "
                                               f"cases were written for (--config)"))
    return out


def spread(cases: list[Case], limit: int) -> list[Case]:
    """``limit`` cases taken from each kind in turn, so every kind is represented."""
    by_kind: dict[str, list[Case]] = {}
    for case in cases:
        by_kind.setdefault(case.kind, []).append(case)
    picked: list[Case] = []
    for row in range(max((len(v) for v in by_kind.values()), default=0)):
        picked += [group[row] for group in by_kind.values() if row < len(group)]
    return picked[:limit]
