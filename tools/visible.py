"""Characters a terminal acts on instead of showing, written out so they are seen.

A goal from a model or a Modify edit, a ``--user``, a host's output or a config value may
hold ``\\x1b[2J`` (clear the screen), ``\\x1b[31m`` (recolour what follows) or U+202E (show
the rest of the line reversed). The terminal's console (``bot.terminal.border``) and the log
door (``tools.redact``: every log record, whatever handler writes it to a terminal or a
file) show them as ``\\x1b`` or ``\\u202e``.
"""

from __future__ import annotations

import re

INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f"  # C0 (but tab and newline) and C1 controls, ESC included
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidi marks, embeddings, overrides
    "\u2028\u2029\ufeff\ufff9-\ufffb]")  # line/paragraph separators, BOM, annotations
"""Characters a terminal acts on or reorders instead of showing."""


def visible(text: str) -> str:
    """``text`` with every :data:`INVISIBLE` character written out (``\\x1b``, ``\\u202e``)."""
    return INVISIBLE.sub(_spelled, text)


def _spelled(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
