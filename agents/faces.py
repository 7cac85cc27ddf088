"""The faces deckhand is used through, and what a recorded ``via`` says about a name.

Every record that names a person (a plan's or run's requester, an approval, a pause, a
go/no-go decision, a deploy in the history) also records the face that wrote the name.
Only Slack verifies who is asking: a signed request carries the user's id. Every other face
takes the name it is given (``--user``, an MCP token's or stdio client's self-declared name,
a schedule), so only a name recorded through Slack may become a Slack mention
(``bot.slack.blocks.mention``). A record from before faces were recorded says None: not
from Slack.
"""

from __future__ import annotations

from enum import StrEnum


class Face(StrEnum):
    SLACK = "slack"
    CLI = "cli"
    TERMINAL = "terminal"
    MCP = "mcp"
    SCHEDULE = "schedule"


SLACK_VIAS = {"button": Face.SLACK, "stop_button": Face.SLACK, "command": Face.SLACK}
"""The face behind each ``via`` that is not a face's own name (a Slack button or command)."""


def face_of(via: str) -> str:
    """The face a recorded ``via`` stands for (``button`` → slack; cli → cli)."""
    return SLACK_VIAS.get(via, via)


def from_slack(via: str | None) -> bool:
    """Whether a name recorded with ``via`` came from a signed Slack request (None: a
    record from before faces were recorded, so no)."""
    return via is not None and face_of(via) == Face.SLACK
