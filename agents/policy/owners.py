"""A service's owners (docs/services.md 1.3): who may approve its runs, within the
environment's rules — one more policy layer every approver must satisfy.

Written as Slack ids (``owners: {users: […], groups: […]}``, CODEOWNERS-style) or read at
load from a Backstage ``catalog-info.yaml`` next to the service's file (``owners: {catalog:
catalog-info.yaml}``, no network): its ``spec.owner`` entity reference
(``group:default/team-api``; kind defaults to Group, namespace to the entity's) is mapped to
Slack ids by the organisation's ``owners_map``. An owner the map lacks is a problem at its
file:line, never "anyone".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agents.policy.rules import Approvers
from tools.errors import ConfigError, Problem
from tools.yamlsrc import Located, load_yaml

GROUP_ID = re.compile(r"^S[A-Z0-9]{2,}$")
"""A Slack user group (subteam) id; any other id or name is a user."""
DOCUMENT_BREAK = re.compile(r"^---\s*$", re.MULTILINE)


class Owners(BaseModel):
    """The ``owners`` section as written."""

    model_config = ConfigDict(extra="forbid")

    users: list[str] = Field(default_factory=list)
    groups: list[str] = Field(default_factory=list)
    catalog: str | None = Field(default=None, min_length=1, description="a Backstage "
                                "catalog-info.yaml, relative to the service's file")


@dataclass(frozen=True)
class Resolved:
    """Who owns the service, and where that is written (for ``policy explain``)."""

    approvers: Approvers
    source: str


def entity_ref(text: str, *, namespace: str = "default") -> str:
    """A Backstage owner reference in full, lowercased: ``team-api`` ->
    ``group:default/team-api`` (refs compare case-insensitively)."""
    kind, _, rest = text.rpartition(":") if ":" in text else ("group", "", text)
    space, _, name = rest.rpartition("/") if "/" in rest else (namespace, "", rest)
    return f"{kind.strip().lower()}:{space.strip().lower()}/{name.strip().lower()}"


def resolve(owners: Owners, *, where: str, base: Path, owners_map: dict[str, list[str]],
            short: Callable[[str], str] = str) -> tuple[Resolved | None, list[Problem]]:
    """The owners' approvers (None: a problem said why). ``where`` names the ``owners``
    section; ``base`` is the service file's directory, which ``catalog`` is relative to;
    ``short`` shortens a location for display."""
    if not (owners.users or owners.groups or owners.catalog):
        return None, [Problem(where, "names no owner: list users or groups, or give a "
                                     "catalog file (delete `owners` for no owners rule)")]
    users, groups = list(owners.users), list(owners.groups)
    sources: list[str] = [where.split(" ")[0]]
    problems: list[Problem] = []
    if owners.catalog is not None:
        found, at, problems = _catalog_owner(base / owners.catalog, where)
        for slack_id in owners_map.get(found, []) if found else []:
            (groups if GROUP_ID.match(slack_id) else users).append(slack_id)
        if found and found not in owners_map:
            problems.append(Problem(at, f"owner {found!r} is not in owners_map (known: "
                            f"{', '.join(sorted(owners_map)) or 'none'}): map it to Slack "
                            f"user or group ids in the main config"))
        sources.append(f"{short(at).split(' ')[0]} ({found})")
    if problems:
        return None, problems
    return Resolved(Approvers(users=users, groups=groups), "owners: " + ", ".join(sources)), []


def _catalog_owner(path: Path, where: str) -> tuple[str | None, str, list[Problem]]:
    """The full owner reference in the catalog file, where it is, and any problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, where, [Problem(where, f"cannot read the catalog file {path}: {exc}")]
    try:
        documents = _documents(text, str(path))
    except ConfigError as exc:
        return None, where, list(exc.problems)
    owned = [(doc, doc.data["spec"]["owner"]) for doc in documents if _owner_of(doc.data)]
    if len(owned) != 1:
        how = "no entity with spec.owner" if not owned else "several entities with spec.owner"
        return None, where, [Problem(where, f"{path} has {how}: give one component's "
                                            f"catalog file")]
    doc, owner = owned[0]
    metadata = doc.data.get("metadata")
    space = metadata.get("namespace") if isinstance(metadata, dict) else None
    return (entity_ref(owner, namespace=str(space or "default")), doc.where(("spec", "owner")),
            [])


def _owner_of(data: Any) -> bool:
    spec = data.get("spec") if isinstance(data, dict) else None
    return isinstance(spec, dict) and isinstance(spec.get("owner"), str) \
        and bool(spec["owner"].strip())


def _documents(text: str, source: str) -> list[Located]:
    """Every YAML document of ``text`` (catalog files often hold several), each parsed with
    the file's own line numbers."""
    out, start = [], 0
    for brk in [*DOCUMENT_BREAK.finditer(text), None]:
        end = brk.start() if brk else len(text)
        lines_before = text.count("\n", 0, start)
        doc = load_yaml("\n" * lines_before + text[start:end], source)
        if doc.data is not None:
            out.append(doc)
        start = brk.end() if brk else end
    return out
