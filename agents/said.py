"""Text deckhand says to a person, made of literal parts and mention parts.

A refusal or "who can approve" line names people: the approvers the policy lists, the person
a Slack-signed record names. Slack must show those as live mentions and everything else
(goals, reasons, typed names, which may read ``<@U0EVIL1>``) as typed. So deckhand never
finds mentions by pattern in text: a :class:`Said` keeps each name deckhand itself took from
the policy or from a Slack-recorded record as a :class:`Mention` part, and everything else as
a literal part. It is a ``str`` whose value is the plain rendering (the id itself, for the
terminal, the CLI, MCP and the audit log); Slack renders it part by part
(``bot.slack.blocks.notice``). Anything that loses the parts (an f-string, ``.split``) becomes
a plain ``str`` and so plain text everywhere: the failure is never a false mention.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from agents.faces import from_slack

SLACK_USER_ID = re.compile(r"[UW][A-Z0-9]{2,20}")
SLACK_GROUP_ID = re.compile(r"S[A-Z0-9]{2,20}")


@dataclass(frozen=True)
class Mention:
    """A person (or a Slack user group) deckhand named from the policy or a Slack record."""

    id: str
    group: bool = False


Part = str | Mention


class Said(str):
    """Literal and mention parts; as a ``str``, their plain rendering."""

    parts: tuple[Part, ...]

    def __new__(cls, *pieces: Part) -> Said:
        parts: list[Part] = []
        for piece in pieces:
            if isinstance(piece, Said):
                parts += piece.parts
            elif isinstance(piece, Mention) or piece:
                parts.append(piece)
        self = super().__new__(cls, "".join(_plain(p) for p in parts))
        self.parts = tuple(parts)
        return self

    def __add__(self, other: str) -> Said:
        return Said(self, other)

    def __radd__(self, other: str) -> Said:
        return Said(other, self)

    def render(self, literal: Callable[[str], str], mention: Callable[[Mention], str]) -> str:
        """Each part through ``literal`` or ``mention``, joined (a face's own rendering)."""
        return "".join(mention(p) if isinstance(p, Mention) else literal(p)
                       for p in self.parts)

    def map_literal(self, change: Callable[[str], str]) -> Said:
        """The same mentions, every literal part through ``change`` (redaction)."""
        return Said(*(p if isinstance(p, Mention) else change(p) for p in self.parts))


def _plain(part: Part) -> str:
    return part.id if isinstance(part, Mention) else part


def joined(separator: str, items: Iterable[Part]) -> Said:
    """``separator.join(items)``, keeping each item's mentions."""
    out: list[Part] = []
    for i, item in enumerate(items):
        out += [separator, item] if i else [item]
    return Said(*out)


def policy_user(name: str) -> Part:
    """A user the policy names: a mention when it is a Slack user id, else literal."""
    return Mention(name) if SLACK_USER_ID.fullmatch(name) else name


def policy_group(name: str) -> Part:
    """A group the policy names: a mention when it is a Slack user group id, else literal."""
    return Mention(name, group=True) if SLACK_GROUP_ID.fullmatch(name) else name


def recorded(name: str, via: str | None) -> Part:
    """A name a record holds: a mention only when Slack recorded it (``via``, a signed
    request's user id); a ``--user``, an MCP client's or a schedule's name stays literal."""
    return Mention(name) if from_slack(via) and SLACK_USER_ID.fullmatch(name) else name


def said_of(error: BaseException) -> Said | str:
    """What an error says, its parts kept when it was raised with a :class:`Said`."""
    first = error.args[0] if len(error.args) == 1 else None
    return first if isinstance(first, Said) else str(error)
