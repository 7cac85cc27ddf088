"""Errors raised by the tools layer (catalog, inventory, runners).

Every error a user can see carries a message that says what went wrong and what to do.
Library exceptions (paramiko, socket, subprocess, yaml) are translated into these at the
border, always with ``raise ... from exc``.

    DeckhandError
    ├── ConfigError            a config (or cases) file is unreadable or invalid (carries
    │                          every problem)
    ├── ConfigNotFound         no config file was named or found (says where it looked)
    ├── SinkError              an audit sink (webhook, syslog) did not take a batch: retried
    └── ToolError
        ├── UnknownTool        a plan names a tool the catalog does not have
        ├── ParamError         a parameter breaks its tool's schema
        └── RunnerError        a command could not be run to completion
            ├── CommandRefused its start gate said no: it never ran
            └── SSHError
                ├── SSHConnectError   refused, timed out, unreachable, dropped
                │   └── SSHSetupDropped  dropped before login (MaxStartups): retried
                ├── SSHAuthError      the server refused our key
                └── HostKeyError      unknown or changed host key: refused

``agents.errors`` extends this tree with plan, planner and store errors.
"""

from __future__ import annotations

from dataclasses import dataclass


class DeckhandError(Exception):
    """Base of every error deckhand raises on purpose. ``str(err)`` is fit for a user."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a config or plan, and where it is."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


class ConfigNotFound(DeckhandError):
    """No config file was named or found; the message lists where deckhand looked."""


class ConfigError(DeckhandError):
    """A config file could not be loaded. Lists every problem found, not just the first."""

    def __init__(self, problems: list[Problem], *, what: str = "config"):
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid {what} ({len(problems)} problem(s)):\n{lines}")


class SinkError(DeckhandError):
    """An audit sink did not take a batch; ``retry_after`` is the wait it asked for, if any
    (HTTP 429/503 with ``Retry-After``). The batch is sent again: nothing is dropped."""

    def __init__(self, message: str, *, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class ToolError(DeckhandError):
    """Something about a tool or running it went wrong."""


class UnknownTool(ToolError):
    """A plan names a tool that tools.yml does not define."""


class ParamError(ToolError):
    """A parameter value breaks the tool's parameter schema."""


class RunnerError(ToolError):
    """A command could not be run to completion on its host."""


class CommandRefused(RunnerError):
    """The command's start gate (``on_start``) refused it once its process group was
    known: the process exited without running it, so nothing changed on the host."""


class SSHError(RunnerError):
    """Base of SSH failures; the message names the host."""


class SSHConnectError(SSHError):
    """The host could not be reached, refused us, or dropped the connection."""


class SSHSetupDropped(SSHConnectError):
    """The server dropped the connection before login: no banner, a reset, EOF or a timeout
    during the handshake — what sshd's MaxStartups does to connections past its limit.

    Nothing ran on the host, so connection setup retries it with backoff; once the attempts
    are spent it is raised with how many there were.
    """


class CommandInterrupted(SSHError):
    """The connection dropped after the command was sent: it may have run, partly or fully.

    Not retried (it could run twice); the host counts as changed, so rollback visits it.
    """


class SSHAuthError(SSHError):
    """The host refused our credentials."""


class HostKeyError(SSHError):
    """The host's key is unknown or differs from known_hosts; we refuse to talk to it."""
