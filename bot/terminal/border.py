"""The terminal's one door: control characters and bidi overrides are shown, never sent.

A goal from a model or a Modify edit, a ``--user``, a host's output or a config value may
hold ``\\x1b[2J`` (clear the screen), ``\\x1b[31m`` (recolour what follows) or U+202E (show
the rest of the line reversed). Escaping each string where it is printed would miss the
next path, so the console itself is the border: every console deckhand prints through is a
:class:`TerminalConsole`, which rewrites the text of every segment it writes — table cells,
live status, prompts and summaries alike — so such characters appear as ``\\x1b`` or
``\\u202e``. rich's own styling and cursor movement are not text: they are added after this
point (styles) or travel as control segments, so deckhand's colours still work.
"""

from __future__ import annotations

from collections.abc import Iterable

import yaml
from rich.segment import Segment

from bot.terminal.door import RedactingConsole
from bot.terminal.output import silence
from tools.visible import INVISIBLE, visible

__all__ = ["INVISIBLE", "TerminalConsole", "visible", "yaml_for_terminal"]


def yaml_for_terminal(text: str) -> str:
    """YAML written straight to stdout (``plan --format yaml``): when it holds an
    :data:`INVISIBLE` character, the same data again with every such character escaped
    the YAML way (``"\\e"``, ``"\\u202E"``), so it still reads back as the same plan."""
    if not INVISIBLE.search(text):
        return text
    return yaml.safe_dump(yaml.safe_load(text), sort_keys=False, allow_unicode=False)


class TerminalConsole(RedactingConsole):
    """The terminal's one door: a rich Console whose text is redacted as it is laid out
    (``door.RedactingConsole``) and can never carry a control sequence or bidi override
    that deckhand did not make (see the module docstring)."""

    def on_broken_pipe(self) -> None:
        """The reader of this console's pipe is gone (``… | tee log`` died with a Ctrl-C).
        rich would point stdout at /dev/null and raise SystemExit(1) — in the middle of a
        rollback; here the console goes quiet, its own stream is silenced (logged once, see
        ``bot.terminal.output``) and whatever was under way carries on."""
        self.quiet = True
        silence(self.file, "the terminal's output pipe closed (BrokenPipeError)")

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            segment if segment.control else Segment(visible(segment.text), segment.style)
            for segment in buffer)
