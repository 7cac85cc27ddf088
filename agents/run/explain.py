"""The lines of a failed command's output that explain the failure (GitHub Actions and
Rundeck show the error lines, not only the last one): ``dd`` into a full disk ends with
"0 bytes copied", two lines after "No space left on device".

A failure reason quotes the output's error lines — those that say error, failed, denied,
no space, not found … — the last few of them, then the last line when it is not one of
them, so the reason says both what went wrong and where the command stopped.
"""

from __future__ import annotations

import re

ERROR_LINE = re.compile(
    r"\b(errors?|fail(s|ed|ure)?|fatal|denied|refused|no space|cannot|can't|could not|"
    r"couldn't|not found|no such|exception|traceback|panic|killed|timed? ?out|unable|"
    r"invalid|segmentation fault|out of memory|read-only file system|abort(ed)?)\b|"
    r"^(E|ERROR|FATAL)[:\s]", re.IGNORECASE)
MAX_ERROR_LINES = 3
"""Error lines quoted (the last ones: what happened closest to the end)."""
LINE_LIMIT = 300
"""Characters of one quoted line."""


def explaining(tail: str) -> str:
    """The error lines of ``tail`` and its last line, joined by `` … ``; "" if empty."""
    lines = [line.strip()[:LINE_LIMIT] for line in tail.splitlines() if line.strip()]
    if not lines:
        return ""
    errors = [i for i, line in enumerate(lines) if ERROR_LINE.search(line)][-MAX_ERROR_LINES:]
    quoted = [*errors, *([len(lines) - 1] if len(lines) - 1 not in errors else [])]
    return " … ".join(lines[i] for i in quoted)
