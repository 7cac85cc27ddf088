"""Results every face shows, bounded whatever the number of hosts: what a finished
read-only step printed, and a step's hosts summarized (counts by state, the failures).

A status request is asked for its output: ``✓ SUCCEEDED`` alone answers nothing. The
tails are already redacted by the executor; this only joins them per host and bounds them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agents.run.record import HostResult, Run, StepState, StepStatus

MAX_CHARS = 3000
"""Enough for a status of a few dozen hosts; longer output keeps its end."""


def step_output(run: Run, *, max_chars: int = MAX_CHARS) -> str:
    """Every step's output, host by host (``[host]`` headers when several), bounded."""
    parts: list[str] = []
    for state in run.steps.values():
        hosts = sorted(state.hosts.values(), key=lambda h: h.host)
        for host in hosts:
            text = host.tail.strip()
            if not text:
                continue
            parts.append(f"[{host.host}]\n{text}" if len(hosts) > 1 else text)
    return bound("\n".join(parts), max_chars)


def bound(text: str, max_chars: int) -> str:
    """``text`` cut to its last ``max_chars`` characters, saying that it was cut."""
    if len(text) <= max_chars:
        return text
    note = "…(earlier output cut)\n"
    return note + text[-(max_chars - len(note)):]


@dataclass(frozen=True)
class HostTally:
    """A step's hosts in a few words, however many there are: counts by state and the
    failed ones (sorted by name), for every face to show within its limits."""

    total: int
    counts: dict[StepStatus, int]
    failed: list[HostResult]

    @property
    def succeeded(self) -> int:
        return self.counts.get(StepStatus.SUCCEEDED, 0)

    def describe(self) -> str:
        """``488/500 hosts`` and, when there are any, `` (8 running, 4 failed)``."""
        others = [f"{self.counts[s]} {TALLY_WORDS[s]}" for s in TALLY_WORDS
                  if self.counts.get(s)]
        done = f"{self.succeeded}/{self.total} hosts"
        return f"{done} ({', '.join(others)})" if others else done


TALLY_WORDS = {StepStatus.RUNNING: "running", StepStatus.PENDING: "waiting",
               StepStatus.FAILED: "failed", StepStatus.CANCELLED: "cancelled",
               StepStatus.SKIPPED: "skipped"}
"""How a count of hosts in each state other than succeeded reads, in this order."""


def tally(state: StepState) -> HostTally:
    counts = Counter(h.status for h in state.hosts.values())
    failed = sorted((h for h in state.hosts.values() if h.status is StepStatus.FAILED),
                    key=lambda h: h.host)
    return HostTally(len(state.hosts), dict(counts), failed)


def listed(names: Sequence[str], limit: int, *, show: Callable[[str], str] = str) -> str:
    """``a, b, c +N more``: at most ``limit`` names, each through ``show``."""
    shown = ", ".join(show(n) for n in names[:limit])
    more = len(names) - limit
    return f"{shown} +{more} more" if more > 0 else shown


@dataclass(frozen=True)
class HostOutput:
    """What one host printed in one step (the executor's redacted tail)."""

    phase: str
    step: str
    host: str
    status: str
    exit_code: int | None
    text: str


def outputs_of(run: Run, *, step: str | None = None, host: str | None = None
               ) -> list[HostOutput]:
    """Every host's output in ``run``, steps then rollback in order, narrowed to ``step``
    and ``host`` when given. Raises LookupError naming what exists for an unknown one."""
    phases = [("steps", run.steps), ("rollback", run.rollback)]
    if step is not None and not any(step in states for _, states in phases):
        known = [s for _, states in phases for s in states]
        raise LookupError(f"run has no step {step!r}; its steps: {', '.join(known)}")
    found = [HostOutput(phase, state.id, result.host, result.status.value, result.exit_code,
                        result.tail)
             for phase, states in phases for state in states.values()
             if step in (None, state.id)
             for result in sorted(state.hosts.values(), key=lambda h: h.host)]
    if host is not None:
        hosts = sorted({o.host for o in found})
        found = [o for o in found if o.host == host]
        if not found:
            raise LookupError(f"no output from host {host!r} here; hosts with output: "
                              f"{', '.join(hosts) or 'none'}")
    return found
