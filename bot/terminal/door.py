"""The terminal's door: a rich ``Console`` that redacts every text before it is laid out.

Redacting the bytes written would miss a secret that a table cell wraps over two lines;
``render`` is where rich turns every string and ``Text`` (a table's cells, a panel's body,
the live table of ``deckhand run``) into segments, so each passes the process's redactor
(``tools.redact.active``: the environment's secrets, and the config's once services are
built) first, whole.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

from tools.redact import active


class RedactingConsole(Console):
    """``rich.console.Console`` whose strings and ``Text`` are redacted as they render."""

    def render(self, renderable: RenderableType,
               options: ConsoleOptions | None = None) -> Iterable[Segment]:
        return super().render(_redacted(renderable), options)

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(active(text), **kwargs)


def _redacted(renderable: RenderableType) -> RenderableType:
    if isinstance(renderable, str):
        return active(renderable)
    if isinstance(renderable, Text):
        plain = active(renderable.plain)
        if plain != renderable.plain:  # styles inside are dropped with the secret
            return Text(plain, style=renderable.style, justify=renderable.justify,
                        overflow=renderable.overflow, no_wrap=renderable.no_wrap)
    return renderable
