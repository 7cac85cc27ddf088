"""Regular expressions that cannot freeze the process, wherever they come from.

Patterns come from tools.yml, playbooks and plans (so from a model). Python's ``re``
backtracks: ``^(a+)+$`` on 30 characters takes seconds and starves heartbeats. RE2 (the
``google-re2`` package) matches in linear time and has no backreferences or lookarounds;
its ``\\d`` and ``\\w`` are ASCII, so look-alike digits from other scripts never match.
Every pattern is compiled here, at validation, so an invalid one is a validation error.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import re2

MAX_PATTERN = 500


@lru_cache(maxsize=1024)
def compile_safe(pattern: str, *, ignore_case: bool = False) -> Any:
    """The compiled RE2 pattern.

    Raises:
        ValueError: the pattern is too long or not valid RE2 syntax (backreferences and
            lookarounds are refused: they are what makes matching exponential).
    """
    if len(pattern) > MAX_PATTERN:
        raise ValueError(f"pattern is longer than {MAX_PATTERN} characters")
    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = not ignore_case
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise ValueError(f"invalid regular expression {pattern!r}: {reason}") from None


def problem(pattern: str) -> str | None:
    """Why ``pattern`` is refused, or None when it compiles."""
    try:
        compile_safe(pattern)
    except ValueError as exc:
        return str(exc)
    return None
