"""Reading the application's git repository: commits between two versions, commit times.

Refs come from plans (a model or a Slack user may have written them), so they are
validated by pattern and passed to git as arguments after ``--end-of-options``, never
through a shell. A ref git does not know is an answer ("unknown"), not an error.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

_REF = re.compile(r"^[A-Za-z0-9][\w.+/-]{0,127}$")
_TIMEOUT = 10.0


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str
    author: str
    at: float


@dataclass(frozen=True)
class Changelog:
    """What a deploy from ``old`` to ``new`` ships."""

    old: str | None
    new: str
    commits: list[Commit] = field(default_factory=list)
    more: int = 0
    """Commits beyond the ones listed."""
    new_known: bool = True
    downgrade: bool = False
    """``new`` is an ancestor of ``old``: the deploy goes back in history."""


class GitRepo:
    """A local clone of the application's repository."""

    def __init__(self, path: Path):
        self.path = path

    def changelog(self, old: str | None, new: str, *, limit: int = 10) -> Changelog:
        """Commits in ``new`` that ``old`` lacks (all of ``new``'s history if ``old`` is None)."""
        if not self._known(new):
            return Changelog(old, new, new_known=False)
        if old is not None and self._known(old) and old != new:
            if self._is_ancestor(new, old):
                return Changelog(old, new, downgrade=True)
            span = f"{old}..{new}"
        else:
            span = new
        count = int(self._git("rev-list", "--count", refs=[span]) or 0)
        commits = self._commits(span, limit)
        return Changelog(old, new, commits, more=max(0, count - len(commits)))

    def commit_time(self, ref: str) -> float | None:
        """When ``ref``'s commit was made (None if git does not know ``ref``)."""
        if not self._known(ref):
            return None
        return float(self._git("log", "-1", "--format=%ct", refs=[ref]))

    def _known(self, ref: str) -> bool:
        return bool(_REF.fullmatch(ref)) and self._git_ok("rev-parse", "--verify", "--quiet",
                                                          refs=[f"{ref}^{{commit}}"])

    def _is_ancestor(self, ancestor: str, ref: str) -> bool:
        return self._git_ok("merge-base", "--is-ancestor", refs=[ancestor, ref])

    def _commits(self, span: str, limit: int) -> list[Commit]:
        out = self._git("log", f"--max-count={limit}", "--format=%h%x1f%s%x1f%an%x1f%ct",
                        refs=[span])
        commits = []
        for line in out.splitlines():
            sha, subject, author, at = line.split("\x1f")
            commits.append(Commit(sha, subject, author, float(at)))
        return commits

    def _git(self, *args: str, refs: list[str]) -> str:
        done = self._run(args, refs)
        return done.stdout.strip() if done is not None and done.returncode == 0 else ""

    def _git_ok(self, *args: str, refs: list[str]) -> bool:
        done = self._run(args, refs)
        return done is not None and done.returncode == 0

    def _run(self, args: tuple[str, ...], refs: list[str]
             ) -> subprocess.CompletedProcess[str] | None:
        """git's answer, or None when git is missing or hangs (treated as "unknown")."""
        try:
            return subprocess.run(self._argv(args, refs), capture_output=True, text=True,
                                  timeout=_TIMEOUT, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None

    def _argv(self, args: tuple[str, ...], refs: list[str]) -> list[str]:
        return ["git", "-C", str(self.path), *args, "--end-of-options", *refs]
