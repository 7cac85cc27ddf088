"""What a gate's evaluation leaves in a run: a ``GateCheck`` (every sample, the reason), the
line that says why a rollout stopped, and the lines ``runs show`` and the thread print.

The executor emits one GATE_JUDGED event per evaluation; the record, the audit entry, the
Slack thread and ``deckhand runs show`` all read the same GateCheck.
"""

from __future__ import annotations

import time

from agents.run.record import GateCheck, Run
from tools.runners.base import CommandResult
from tools.runners.gate import GateCommandResult

MAX_SAMPLES = 200
"""Samples kept per evaluation (failed ones first, then the newest rounds): a query over 500
instances sampled 5 times must not make every later write of the run record megabytes long."""
FIGURE_SERIES = 10
"""Series named in a gate's one-line figure (a go/no-go message); the rest are counted."""


def gate_check(name: str, step: str, result: CommandResult, *, after_batch: int | None = None,
               batches: int | None = None) -> GateCheck:
    """The record of one evaluation (a runner that is not the gate runner: lines only)."""
    if isinstance(result, GateCommandResult):
        gate = result.gate
        # failed first, then the newest rounds (stable: each round's series in order)
        kept = sorted(gate.samples, key=lambda s: (s.ok, -s.round))[:MAX_SAMPLES]
        lines = gate.lines if len(gate.lines) <= MAX_SAMPLES else [
            *gate.lines[:MAX_SAMPLES - 1], f"… {len(gate.lines) - MAX_SAMPLES} more line(s)",
            gate.lines[-1]]
        return GateCheck(name=name, step=step, after_batch=after_batch, batches=batches,
                         ok=result.ok, reason=None if result.ok else gate.reason or "failed",
                         samples=kept, samples_total=len(gate.samples), lines=lines)
    lines = result.tail.splitlines()
    return GateCheck(name=name, step=step, after_batch=after_batch, batches=batches,
                     ok=result.ok, reason=None if result.ok else (lines[-1] if lines else
                                                                  "failed"), lines=lines)


def where(check: GateCheck) -> str:
    """``after batch 2 of 3`` (or ``as step deploy``)."""
    if check.after_batch is None:
        return f"as step {check.step}"
    last = " (the last)" if check.after_batch == check.batches else ""
    return f"after batch {check.after_batch} of {check.batches}{last}"


def stop_reason(check: GateCheck) -> str:
    """Why a rollout stops: the gate, where, and its reason (naming the worst sample)."""
    return f"gate {check.name} failed {where(check)}: {check.reason}"


def gate_lines(run: Run) -> list[str]:
    """Every gate of a run, each sample on its own line (``runs show``)."""
    out: list[str] = []
    for check in run.gates:
        when = time.strftime("%H:%M:%S", time.gmtime(check.at))
        verdict = "passed" if check.ok else f"failed: {check.reason}"
        out.append(f"gate {check.name} {where(check)} at {when}Z {verdict}")
        out += [f"  {line}" for line in check.lines]
    return out


def figure(check: GateCheck) -> str:
    """A gate's verdict and what it measured, on one line, for whoever decides a go/no-go:
    every series' value in the last round against the bound, and — when a passing gate
    tolerated failed rounds (``failure_limit``) — how many samples failed, the first named.
    A gate with no samples (http, ci_status) gives its result lines."""
    verdict = "passed" if check.ok else f"failed: {check.reason}"
    head = f"{check.name} {where(check)}: {verdict}"
    if not check.samples:
        measured = [line for line in check.lines if line[:1] in "✓✗"]
        return f"{head} — {'; '.join(measured)}" if measured and check.ok else head
    last = max(s.round for s in check.samples)
    shown = [s for s in check.samples if s.round == last]
    values = ", ".join((f"{s.series} = {s.value}" if s.series else s.value)
                       + ("" if s.ok else " ✗") for s in shown[:FIGURE_SERIES])
    more = f" and {len(shown) - FIGURE_SERIES} more series" if len(shown) > FIGURE_SERIES else ""
    text = (f"{head} — {check.samples_total or len(check.samples)} sample(s); round {last}: "
            f"{values}{more} ({shown[0].bound})")
    failed = [s for s in check.samples if not s.ok]  # kept first, in the order measured
    if check.ok and failed:  # tolerated by failure_limit: whoever decides should see it
        text += (f"; {len(failed)} failed sample(s) tolerated (failure_limit), first: "
                 f"{failed[0].line(last)}")
    return text
