"""What to say when no playbook matches: what was understood, and requests that would run.

Each suggestion is one of a playbook's examples with the pieces the request did give
(its version, its environment) put in, checked to plan as typed; a piece the request
lacked is asked for ("which version?") rather than silently taken from the example.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agents.requests.phrasing import CaptureError, PatternBook, Phrasing, normalize, version
from tools.regex import compile_safe

_VERSION_IN = re.compile(r"(?<![\w.])v\d+\.\d+\.\d+(?:-[0-9a-z.]+)?(?![\w.])")
_TARGET = re.compile(r"\b(?:to|in|on|of|for|into)\s+([A-Za-z][\w-]*)$", re.IGNORECASE)
"""The place a request names at its end ("... to mars"), to name it when unknown."""
_NOT_PLACES = {"previous", "last", "latest", "it", "them", "all", "everything", "everywhere",
               "before", "there", "here"}
_ASK = {"version": "which version?", "environment": "which environment?"}
_CONTROL = re.compile(r"^(?:cancel|stop|abort|halt|pause|hold|resume|continue|unpause)\b",
                      re.IGNORECASE)
"""Words that act on a run that exists: no new plan is what they ask for."""
_NEGATION = re.compile(r"^(?:don'?t|do not|never|no)\b", re.IGNORECASE)


@dataclass
class Understood:
    """The pieces of a request deckhand could read."""

    version: str | None = None
    environment: str | None = None
    said: str | None = None
    """The word that named ``environment`` when it was an alias."""
    unknown_place: str | None = None
    pieces: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        parts = []
        if self.version:
            parts.append(f"version {self.version}")
        if self.environment:
            alias = f" (you said {self.said!r})" if self.said else ""
            parts.append(f"environment {self.environment}{alias}")
        return ", ".join(parts)


def understand(request: str, phrasing: Phrasing) -> Understood:
    """The version and environment ``request`` names, however it names them."""
    text = normalize(request)
    out = Understood()
    versions = _VERSION_IN.findall(text.lower())
    out.version = versions[0] if versions else None
    for word in re.findall(r"[A-Za-z][\w-]*", text):
        name = phrasing.environment(word)
        if name is not None:
            out.environment = name
            out.said = word if word.lower() != name.lower() else None
            break
    target = _TARGET.search(text)
    if out.environment is None and target and target.group(1).lower() not in _NOT_PLACES:
        out.unknown_place = target.group(1)
    out.pieces = {k: v for k, v in (("version", out.version),
                                    ("environment", out.environment)) if v}
    return out


@dataclass(frozen=True)
class Suggestion:
    """A request that plans as typed, and what the user should check in it."""

    text: str
    playbook: PatternBook
    asks: tuple[str, ...]
    score: float


def suggestions(request: str, playbooks: Sequence[PatternBook], phrasing: Phrasing, *,
                limit: int = 5) -> list[Suggestion]:
    """The closest runnable request of each playbook, best first."""
    said = understand(request, phrasing)
    wanted = normalize(request).lower()
    best = [s for s in (_best_of(book, said, wanted, phrasing) for book in playbooks) if s]
    return sorted(best, key=lambda s: s.score, reverse=True)[:limit]


def _best_of(book: PatternBook, said: Understood, wanted: str,
             phrasing: Phrasing) -> Suggestion | None:
    options = [_fitted(book, example, said, phrasing)
               for example in book.examples or [book.name]]
    scored = [Suggestion(text, book, asks, _score(wanted, text, said, phrasing))
              for text, asks in options]
    return max(scored, key=lambda s: s.score, default=None)


def _score(wanted: str, text: str, said: Understood, phrasing: Phrasing) -> float:
    """Likeness of the words, less when the suggestion names another environment than the
    request did (never offer staging to someone who asked about production)."""
    likeness = difflib.SequenceMatcher(None, wanted, text.lower()).ratio()
    named = understand(text, phrasing).environment
    if said.environment and named and named != said.environment:
        likeness -= 0.5
    return likeness


def _fitted(book: PatternBook, example: str, said: Understood,
            phrasing: Phrasing) -> tuple[str, tuple[str, ...]]:
    """``example`` with the request's own pieces put in, and what it still has to ask for."""
    spans = _spans(book, example)
    if spans is None:
        return example, ()
    text, asks = example, []
    for name, (start, end) in sorted(spans.items(), key=lambda item: -item[1][0]):
        kind = book.type_of(name)
        given = said.pieces.get(kind)
        if given is None:
            if kind in _ASK:
                asks.append(f"{_ASK[kind]} {example[start:end]} is only an example")
            continue
        text = text[:start] + given + text[end:]
    if text != example and not _plans(book, text, phrasing):
        return example, ()
    return text, tuple(reversed(asks))


def _spans(book: PatternBook, example: str) -> dict[str, tuple[int, int]] | None:
    """Where each named group of the first matching pattern sits in ``example``."""
    for pattern in book.match:
        compiled = compile_safe(pattern, ignore_case=True)
        found = compiled.fullmatch(example)
        if found:
            return {name: found.span(index) for name, index in compiled.groupindex.items()
                    if found.group(index) is not None}
    return None


def _plans(book: PatternBook, text: str, phrasing: Phrasing) -> bool:
    try:
        return book.groups_for(text, phrasing) is not None
    except CaptureError:
        return False


def explain(request: str, playbooks: Sequence[PatternBook], phrasing: Phrasing, *,
            redact: Callable[[str], str] = lambda text: text) -> str:
    """The answer when no playbook matches ``request`` (several lines, redacted)."""
    shown = redact(request.strip())
    shown = shown if len(shown) <= 80 else shown[:79] + "…"
    said = understand(request, phrasing)
    verb = _CONTROL.match(normalize(request))
    if verb:  # suggesting a plan here would offer a rollback to someone who said "cancel"
        word = verb.group(0).lower()
        return (f"{shown!r} acts on a run, not a new plan. In Slack: the run's "
                f"Stop / Pause / Resume buttons, or `@deckhand {word}` in the run's thread. In a "
                f"terminal: `deckhand {_CLI_VERB.get(word, word)} RUN_ID` "
                f"(`deckhand runs` lists them).")
    if _NEGATION.match(normalize(request)):
        return (f"{shown!r} asks for something not to happen: deckhand plans only what "
                f"should. Nothing was planned. To keep deploys out of an environment, ask "
                f"the operators for a freeze window (policy.freeze).")
    lines = [f"I don't know how to plan {shown!r}."]
    if said.unknown_place:
        lines[0] += (f" It names an unknown environment {said.unknown_place!r}; known "
                     f"environments: {phrasing.describe_known()}.")
    if said.describe():
        lines[0] += f" I understood: {said.describe()}."
    lines.append("Closest requests I know (each runs as typed):" if playbooks
                 else "No playbooks are set up.")
    for found in suggestions(request, playbooks, phrasing):
        ask = f" ({'; '.join(found.asks)})" if found.asks else ""
        lines.append(f"  • {found.text} — {found.playbook.description or found.playbook.name}"
                     f"{ask}")
    return "\n".join(lines)


_CLI_VERB = {"cancel": "stop", "abort": "stop", "halt": "stop", "hold": "pause",
             "continue": "resume", "unpause": "resume"}


__all__ = ["Suggestion", "Understood", "explain", "suggestions", "understand", "version"]
