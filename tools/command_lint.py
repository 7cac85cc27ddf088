"""Warnings about tool commands that report success when they failed.

A shell command's exit status is its last part's: `mkdir -p $d; cp a $d/x; echo done`
exits 0 after a failed `mkdir` or `cp`, and a mutating step then reports a host changed
that was not. ``deckhand check`` warns about a mutating command whose parts are joined by
`;` (or newlines), that does not `set -e`, and whose last part cannot fail.
"""

from __future__ import annotations

import re
import shlex

from tools.catalog import Catalog, Tool

CANNOT_FAIL = {"echo", "printf", "true", ":"}
"""Commands that exit 0 whatever happened before them."""
_ERREXIT = re.compile(r"(^|[;\n&|]\s*)set\s+(-[a-zA-Z]*e[a-zA-Z]*\b|-o\s+errexit\b)")


def silent_failure(tool: Tool) -> str | None:
    """Why ``tool``'s command can exit 0 although a part of it failed, or None."""
    command = tool.command
    if not tool.mutates or command is None or _ERREXIT.search(command):
        return None  # read-only, a gate, or stops at the first failing part
    parts = _top_level_parts(command)
    if len(parts) < 2:
        return None
    last = parts[-1]
    if not last or last[0] not in CANNOT_FAIL or {"&&", "||", "|"} & set(last):
        return None
    return (f"tool {tool.name}: its command joins parts with ';' and ends in "
            f"`{' '.join(last)[:40]}`, which cannot fail: it exits 0 even when an earlier "
            f"part failed, and the host is reported changed — start it with `set -e;` or "
            f"join the parts with &&")


def silent_failures(catalog: Catalog) -> list[str]:
    """``silent_failure`` for every tool of ``catalog``."""
    found = (silent_failure(tool) for tool in catalog.tools.values())
    return [warning for warning in found if warning is not None]


def _top_level_parts(command: str) -> list[list[str]]:
    """The command's words, split at `;` and newlines (outside quotes); [] if unparsable."""
    lexer = shlex.shlex(command.replace("\n", " ; "), posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    parts: list[list[str]] = [[]]
    try:
        for token in lexer:
            if token == ";" or token == ";;":
                parts.append([])
            else:
                parts[-1].append(token)
    except ValueError:  # unbalanced quotes: the config check reports those
        return []
    return [p for p in parts if p]
