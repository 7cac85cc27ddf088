"""Requests in people's words, before a playbook pattern sees them.

A colleague reading "please deploy 1.0.3 to prod now" hears "deploy v1.0.3 to production".
This module does the same for the playbook planner, with no model:

* polite words and filler around the request are dropped ("please", "can you", "now"…);
* versions in their usual forms ("1.0.3", "V1.0.3", "release 1.0.3") become ``v1.0.3``;
* environment aliases declared once in the inventory (``aliases: [prod, live]``) name the
  canonical environment, for every playbook;
* captured values are typed (integer, boolean, version, environment) and keep their case;
* the words of the bots people come from are read as deckhand's: ``.deploy``, ``!deploy``,
  ``deploy!`` (branch-deploy, hubot-deploy), mentions (``@deckhand``, ``<@U…>``) and emoji
  (``:rocket:``, 🚀) are dropped;
* when nothing plans as typed, obvious typos of the verbs and environment names are read
  as the word they are closest to, and said back ("read 'depoly' as 'deploy'").

Nothing here widens what may run: an alias resolves to the environment it is declared on,
so policy, locks and approvals always see the canonical name; an unknown word stays unknown.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

CaptureType = Literal["string", "integer", "boolean", "version", "environment"]
"""How a playbook's captured group is read before it fills the plan template."""

DEFAULT_TYPES: dict[str, CaptureType] = {"version": "version", "environment": "environment"}
"""Groups with these names are typed without being declared."""

_LEADING = re.compile(
    r"^(?:(?:hey|hi|hello|ok|okay|yo)(?:\s+deckhand)?\b[\s,!:]*"
    r"|deckhand\b[\s,!:]*"
    r"|(?:please|pls|plz|kindly|just|now|then|quickly|go ahead and|i(?:'d| would) like "
    r"(?:you )?to|i want (?:you )?to|i need (?:you )?to|let's|lets|we need to|time to"
    r"|(?:can|could|would|will) (?:you|we|u)(?: please)?)\b[\s,]*)+",
    re.IGNORECASE)
_TRAILING = re.compile(
    r"(?:[\s,]+(?:please|pls|plz|now|right now|asap|thanks|thank you|thx|for me|for us"
    r"|if you can|when you can|again))*[\s.!?]*$", re.IGNORECASE)
_VERSION = re.compile(
    r"(?<![\w.])(?:(?P<noun>(?:version|release|tag|build)\s+))?[vV]?"
    r"(?P<number>\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?)(?![\w.])")
_WORD = re.compile(r"[A-Za-z][\w-]*")
_INTEGER_WORDS = {w: i for i, w in enumerate(
    ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
     "eleven", "twelve"))}
_TRUE = {"true", "yes", "y", "on", "enable", "enabled", "1"}
_FALSE = {"false", "no", "n", "off", "disable", "disabled", "0"}


_MENTION = re.compile(r"<[@!#][^>]*>|(?<!\w)@[\w.-]+")
_EMOJI = re.compile(r":[a-z0-9_+-]+:|[\U0001F000-\U0001FAFF\u2600-\u27BF\u2B00-\u2BFF"
                    r"\uFE0F\u200D]")
_SIGIL = re.compile(r"^[.!](?=[A-Za-z])|^([A-Za-z]+)!(?=\s|$)")
VERBS = ("deploy", "ship", "release", "rollback", "roll", "revert", "undo", "status",
         "promote", "push", "rollout", "redeploy", "where", "state", "version")
"""Words a request starts with, for typo correction (a playbook's own words still rule)."""
_TYPO_CUTOFF = 0.8


class CaptureError(ValueError):
    """A captured value that is not of its declared type; the message says what was expected."""


def normalize(request: str) -> str:
    """``request`` without filler, mentions, emoji and bot sigils, with versions in one
    form and single spaces."""
    text = " ".join(_EMOJI.sub(" ", _MENTION.sub(" ", request)).split())
    text = _SIGIL.sub(lambda found: found.group(1) or "", text)
    previous = None
    while previous != text:  # "please, can you now …": strip until nothing changes
        previous = text
        text = _TRAILING.sub("", _LEADING.sub("", text)).strip()
    return _VERSION.sub(_version_form, text) if text else " ".join(request.split())


def _version_form(found: re.Match[str]) -> str:
    # "release 1.0.3" keeps its first word when that word is the verb ("release 1.0.3")
    keep = found.group("noun") if found.start() == 0 and found.group("noun") else ""
    return f"{keep}v{found.group('number').lower()}"


def version(raw: str) -> str:
    """``1.0.3``, ``V1.0.3``, ``release 1.0.3`` → ``v1.0.3``; anything else unchanged."""
    found = _VERSION.fullmatch(raw.strip())
    return f"v{found.group('number').lower()}" if found else raw


@dataclass(frozen=True)
class Phrasing:
    """The environments (and their aliases) requests may name."""

    environments: tuple[str, ...] = ()
    aliases: Mapping[str, str] = field(default_factory=dict)
    """alias → canonical environment, as declared in the inventory."""

    @classmethod
    def of(cls, environments: Mapping[str, Any]) -> Phrasing:
        """From the inventory's environments (objects with an ``aliases`` list)."""
        aliases = {alias: name for name, env in environments.items()
                   for alias in getattr(env, "aliases", [])}
        return cls(tuple(environments), aliases)

    def environment(self, word: str) -> str | None:
        """The canonical environment ``word`` names (any case), or None."""
        lowered = word.strip().lower()
        for name in self.environments:
            if name.lower() == lowered:
                return name
        return next((name for alias, name in self.aliases.items()
                     if alias.lower() == lowered), None)

    def variants(self, request: str) -> list[str]:
        """What to match, in order: aliases read as their environment, then the words as
        said (so "what's live" still reads as a question when ``live`` is an alias)."""
        text = normalize(request)
        canonical = _WORD.sub(lambda m: self._alias_only(m.group(0)), text)
        return [canonical, text] if canonical != text else [text]

    def corrected(self, request: str) -> tuple[str, list[str]]:
        """``request`` (normalised) with each word that is a near miss of a verb or an
        environment read as that word, and what was read as what; unchanged words stay."""
        known = sorted({word.lower() for word in [*VERBS, *self.environments, *self.aliases]})
        notes: list[str] = []

        def fix(found: re.Match[str]) -> str:
            word = found.group(0)
            if len(word) < 4 or word.lower() in known:
                return word
            close = difflib.get_close_matches(word.lower(), known, n=2, cutoff=_TYPO_CUTOFF)
            if len(close) != 1:  # none, or two equally plausible: leave it to the user
                return word
            notes.append(f"read {word!r} as {close[0]!r}")
            return close[0]
        return _WORD.sub(fix, normalize(request)), notes

    def _alias_only(self, word: str) -> str:
        name = self.environment(word)
        return name if name is not None and word.lower() not in self._names_lower else word

    @property
    def _names_lower(self) -> set[str]:
        return {name.lower() for name in self.environments}

    def describe_known(self) -> str:
        """``staging, production (also: prod, live)`` for messages."""
        if not self.environments:
            return "none configured"
        parts = []
        for name in self.environments:
            also = [a for a, n in self.aliases.items() if n == name]
            parts.append(f"{name} (also {', '.join(also)})" if also else name)
        return ", ".join(parts)

    def did_you_mean(self, word: str) -> str:
        """`` (did you mean production?)`` for a near miss, else nothing."""
        names = [*self.environments, *self.aliases]
        close = difflib.get_close_matches(word.lower(), [n.lower() for n in names], n=1,
                                          cutoff=0.75)
        if not close:
            return ""
        return f". Did you mean {self.environment(close[0])}?"

    def convert(self, name: str, kind: CaptureType, raw: str) -> Any:
        """``raw`` read as ``kind``; CaptureError when it is not one."""
        if kind == "integer":
            return _integer(name, raw)
        if kind == "boolean":
            return _boolean(name, raw)
        if kind == "version":
            return version(raw)
        if kind == "environment":
            return self.environment(raw) or raw  # unknown: refused by the planner, by name
        return raw


def _integer(name: str, raw: str) -> int:
    text = raw.strip().lower()
    if re.fullmatch(r"[+-]?\d{1,18}", text):
        return int(text)
    if text in _INTEGER_WORDS:
        return _INTEGER_WORDS[text]
    raise CaptureError(f"{name} must be a whole number, like 3; got {raw[:40]!r}")


def _boolean(name: str, raw: str) -> bool:
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise CaptureError(f"{name} must be yes or no (true/false, on/off); got {raw[:40]!r}")


def canonical_environments(steps: list[Any], phrasing: Phrasing) -> None:
    """Every step's ``environment`` parameter named canonically, in place (a model's "prod"
    is production). Unknown names stay as written: validation refuses them by name."""
    for step in steps:
        value = step.params.get("environment")
        name = phrasing.environment(value) if isinstance(value, str) else None
        if name is not None:
            step.params["environment"] = name


class PatternBook(Protocol):
    """What suggestions and explicit parameters need of a playbook (agents.requests.playbooks
    implements it; named here so those modules need not import it: no import cycle)."""

    name: str
    description: str
    match: list[str]
    examples: list[str]
    defaults: dict[str, str]
    goal: str

    @property
    def template_texts(self) -> list[str]:
        """The goal and each step as text, where ``{placeholders}`` are filled."""
        ...

    def groups_for(self, request: str, phrasing: Phrasing | None = None
                   ) -> dict[str, Any] | None: ...

    def type_of(self, name: str) -> CaptureType: ...
