"""Parameters set explicitly (``deckhand run … -e version=v1.0.3``), not read from words.

With the playbook planner, explicit values fill and override what a pattern captured, and a
request that is just a playbook's name picks that playbook (``run deploy -e version=1.0.3``).
Values go through the same typing as captured ones (and then through the tools' schemas):
``-e`` sets what a phrasing would, never more. A key no playbook template uses is refused
by name, so a typo cannot be silently ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from agents.errors import NoPlanFound, PlanError
from agents.plan.model import PLACEHOLDER
from agents.requests.phrasing import CaptureError, PatternBook, Phrasing, normalize

_KEY = re.compile(r"^[a-z_][a-z0-9_]*$")


def parse_assignments(items: Sequence[str]) -> dict[str, str]:
    """``["version=v1.0.3", "env=prod"]`` → a dict; PlanError naming a malformed item."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not _KEY.match(key.strip()):
            raise PlanError(f"-e {item!r}: write KEY=VALUE, e.g. -e version=v1.0.3 (KEY: "
                            f"lower-case letters, digits, _)")
        out[key.strip()] = value.strip()
    return out


def uses(book: PatternBook) -> set[str]:
    """The placeholders a playbook's plan template fills."""
    return {name for text in book.template_texts for name in PLACEHOLDER.findall(text)}


B = TypeVar("B", bound=PatternBook)


def choose(playbooks: Sequence[B], request: str, params: Mapping[str, str],
           phrasing: Phrasing) -> tuple[B, dict[str, Any]] | None:
    """The playbook for ``request`` with ``params`` applied, typed; None when none fits."""
    named = normalize(request).lower()
    for book in playbooks:
        try:
            captured = book.groups_for(request, phrasing)
        except CaptureError:
            captured = None
        if captured is None and named != book.name:
            continue
        return book, _apply(book, captured or dict(book.defaults), params, phrasing)
    return None


def _apply(book: PatternBook, values: dict[str, Any], params: Mapping[str, str],
           phrasing: Phrasing) -> dict[str, Any]:
    known = uses(book)
    unknown = sorted(set(params) - known)
    if unknown:
        raise NoPlanFound(f"playbook {book.name} has no parameter {unknown[0]!r}; it takes: "
                          f"{', '.join(sorted(known)) or 'none'}")
    out = dict(values)
    for key, raw in params.items():
        try:
            out[key] = phrasing.convert(key, book.type_of(key), raw)
        except CaptureError as exc:
            raise NoPlanFound(f"-e {key}: {exc}") from None
    missing = sorted(known - set(out))
    if missing:
        raise NoPlanFound(f"playbook {book.name} needs {', '.join(missing)}: pass "
                          + " ".join(f"-e {m}=…" for m in missing))
    return out
