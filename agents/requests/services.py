"""Which service a request names (docs/services.md 2.1), read before any playbook sees it.

People name the thing they deploy the way hubot-deploy and branch-deploy taught them:

* ``deploy api v2.3.1``: a whole word that is a service name;
* ``deploy api/v2.3.1 to production``: ``NAME/rest`` (hubot);
* ``deploy v2.3.1 of web to staging``, ``status of api in prod``: ``of NAME``, ``for NAME``;
* ``roll back web``: a trailing name;
* ``where can I deploy api``: a question, answered from ``where``, never planned.

``pick`` reads the normalised text with dictionary lookups (O(words), no pattern over the
names) and says which service and the request without its name. Two services named, or a
word that is close to a name but none (``deploy wbe v1``), is refused with the known names:
a typo must never plan for another service. ``choose`` then settles a request that named
none: the face's option, else the only service, else ``WhichService`` (the face asks).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from agents.errors import ServiceNotChosen, WhichService
from agents.requests.phrasing import normalize

How = Literal["word", "slash", "of", "trailing", "where", "none"]
"""How the service was named: see the table in the module docstring."""

_WHERE = re.compile(r"^where can (?:i|we|you) (?:deploy|ship|release)(?: (?P<name>\S+?))?\??$",
                    re.IGNORECASE)
_LINKS = frozenset({"of", "for"})
"""Words that tie a service to the request (``v2.3.1 of web``): dropped with the name."""
_NEVER_NEAR = frozenset({
    "deploy", "ship", "release", "rollout", "roll", "back", "rollback", "revert", "undo",
    "status", "state", "version", "show", "what", "whats", "where", "running", "live",
    "the", "and", "with", "from", "into", "only", "last", "latest", "previous", "restart"})
"""Request words never read as a misspelt service (a service may not be named so either)."""
_VERSIONISH = re.compile(r"^v?\d")
_PUNCTUATION = ",;:!?."


@dataclass(frozen=True)
class ServiceNames:
    """The services requests may name, and the words that are surely not one."""

    names: tuple[str, ...]
    words: frozenset[str] = frozenset()
    """Environment names and aliases of every service (lowercase): never a near miss."""
    lowered: Mapping[str, str] = field(default_factory=dict)
    """Lowercased name -> name: one dictionary lookup per word, however many services."""

    @classmethod
    def of(cls, names: Iterable[str], words: Iterable[str] = ()) -> ServiceNames:
        named = tuple(names)
        return cls(named, frozenset(w.lower() for w in words),
                   {name.lower(): name for name in named})

    def lookup(self, word: str) -> str | None:
        """The service ``word`` names (any case), or None."""
        return self.lowered.get(word.lower())

    def known(self) -> str:
        return ", ".join(sorted(self.names)) or "none configured"


@dataclass(frozen=True)
class Picked:
    """What ``pick`` read: the service (None: not named), the request as typed (normalised)
    and without the service's name."""

    service: str | None
    typed: str
    rest: str
    how: How

    @property
    def wordings(self) -> list[str]:
        """What to plan, in order: as typed (a playbook may spell the service), then
        without the name."""
        return [self.typed] if self.rest == self.typed else [self.typed, self.rest]


def pick(request: str, names: ServiceNames) -> Picked:
    """The service ``request`` names, if any.

    Raises:
        ServiceNotChosen: two services are named, or a word is close to a service name but
            none is named (several services only); the message lists the known ones.
    """
    text = normalize(request)
    question = _WHERE.match(text)
    if question is not None:
        return _where(text, question["name"], names)
    tokens = text.split(" ")
    found = _named(tokens, names)
    services = sorted({service for _, service, _ in found})
    if len(services) > 1:
        raise ServiceNotChosen(f"the request names {len(services)} services "
                               f"({', '.join(services)}): name one service per request")
    if not found:
        _refuse_near_miss(tokens, names)
        return Picked(None, text, text, "none")
    return Picked(services[0], text, *_strip(tokens, found))


def _named(tokens: list[str], names: ServiceNames) -> list[tuple[int, str, str]]:
    """(index, service, what is left of the token) for every token naming a service."""
    out = []
    for index, token in enumerate(tokens):
        word = token.strip(_PUNCTUATION)
        service = names.lookup(word)
        if service is not None:
            out.append((index, service, ""))
            continue
        head, slash, tail = token.partition("/")
        service = names.lookup(head) if slash and tail else None
        if service is not None:
            out.append((index, service, tail))
    return out


def _strip(tokens: list[str], found: list[tuple[int, str, str]]) -> tuple[str, How]:
    """The request without the service's tokens (and an ``of``/``for`` before one), and
    how the first was named."""
    kept = list(tokens)
    how: How | None = None
    for index, _, tail in found:
        kept[index] = tail
        linked = index > 0 and kept[index - 1].lower() in _LINKS and not tail
        if linked:
            kept[index - 1] = ""
        how = how or ("slash" if tail else "of" if linked
                      else "trailing" if index == len(tokens) - 1 else "word")
    return " ".join(t for t in kept if t), how or "word"


def _where(text: str, name: str | None, names: ServiceNames) -> Picked:
    if name is None:
        return Picked(None, text, text, "where")
    service = names.lookup(name.strip(_PUNCTUATION))
    if service is None:
        raise ServiceNotChosen(f"{name!r} is not a service{_close(name, names)}; known "
                               f"services: {names.known()}")
    return Picked(service, text, text, "where")


def _refuse_near_miss(tokens: list[str], names: ServiceNames) -> None:
    """A word close to a service name, when several could be meant, is refused: the
    channel's or option's service must not silently take a request meant for another."""
    if len(names.names) < 2:
        return
    for token in tokens:
        word = token.strip(_PUNCTUATION).partition("/")[0].lower()
        if (len(word) < 3 or word in _NEVER_NEAR or word in names.words
                or _VERSIONISH.match(word)):
            continue
        close = _close(word, names)
        if close:
            raise ServiceNotChosen(f"{word!r} is not a service{close}; known services: "
                                   f"{names.known()}")


def _close(word: str, names: ServiceNames) -> str:
    near = difflib.get_close_matches(word.lower(), list(names.lowered), n=1, cutoff=0.75)
    return f" (did you mean {names.lowered[near[0]]}?)" if near else ""


def choose(picked: Picked, names: ServiceNames, *, given: str | None = None,
           given_by: str = "--service") -> str:
    """The service to plan ``picked`` for: the one it names, else ``given`` (an option,
    an environment variable, a channel's default), else the only one.

    Raises:
        ServiceNotChosen: ``given`` is not a service, or disagrees with the request's.
        WhichService: nothing chooses one (several services).
    """
    chosen = None
    if given:
        chosen = names.lookup(given)
        if chosen is None:
            raise ServiceNotChosen(f"{given_by} names unknown service {given!r}"
                                   f"{_close(given, names)}; known services: {names.known()}")
    if picked.service is not None:
        if chosen is not None and chosen != picked.service:
            raise ServiceNotChosen(f"the request names service {picked.service} but {given_by} "
                                   f"says {chosen}: name one service")
        return picked.service
    if chosen is not None:
        return chosen
    if len(names.names) == 1:
        return names.names[0]
    raise WhichService(sorted(names.names), request=picked.typed)
