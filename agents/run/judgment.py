"""Go/no-go between rollout batches (Spinnaker's manual judgment, Argo Rollouts' pause).

After a batch listed in ``rollout.judgment.after_batches`` (once its gates passed), the
executor holds: nothing new starts, running commands have ended, the worker keeps its locks
and lease. It records a ``Judgment`` (what the batch did) and polls a ``Judge`` for the
decision — Continue, or Roll back (the run's ordinary rollback, of the hosts changed so far).
With no decision by the deadline, ``on_timeout`` is settled as the decision, through the
same judge, so a click at that moment and the timeout cannot both win — also when the
deadline falls in a store outage: the hold lasts until the timeout is recorded.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from agents.run.gates import figure
from agents.run.record import Decision, Judgment, Run, StepStatus, Verdict
from tools.errors import DeckhandError
from tools.inventory import Judgment as JudgmentConfig
from tools.runners.base import CancelToken

log = logging.getLogger("deckhand.judgment")

POLL = 0.25
"""Seconds between looks for a decision while holding."""


class Judge(Protocol):
    """Where a run's go/no-go decisions are kept (the store, for a worker)."""

    def decided(self, hold: str) -> Decision | None:
        """The decision on ``hold``, if one was made."""

    def settle(self, hold: str, decision: Decision) -> Decision:
        """Record ``decision`` unless one was made already; the decision that stands."""


class MemoryJudge:
    """Decisions in memory: an executor run without a store (tests, embedded callers)."""

    def __init__(self) -> None:
        self._decisions: dict[str, Decision] = {}
        self._lock = threading.Lock()

    def decided(self, hold: str) -> Decision | None:
        with self._lock:
            return self._decisions.get(hold)

    def settle(self, hold: str, decision: Decision) -> Decision:
        with self._lock:
            return self._decisions.setdefault(hold, decision)


def hold_of(step: str, batch: int) -> str:
    """The name of the hold after ``batch`` of ``step`` (its decision's key)."""
    return f"{step}/{batch}"


def applies(config: JudgmentConfig | None, batch: int, batches: int) -> bool:
    """Whether the rollout holds after ``batch``: listed, and not the last (a --limit
    may leave fewer batches than the config was checked against)."""
    return config is not None and batch in config.after_batches and batch < batches


def awaiting(run: Run, step: str, config: JudgmentConfig, batch: int, batches: int, *,
             now: float) -> Judgment:
    """The hold after ``batch``, with what the step has done so far: hosts done, errors,
    and the figures of the gates judged after this batch (every series of their last round,
    ``agents.run.gates.figure``)."""
    state = run.steps.get(step)
    hosts = state.hosts.values() if state is not None else []
    latest = {c.name: c for c in run.gates if c.step == step and c.after_batch == batch}
    gates = [figure(c) for c in latest.values()]  # a step re-run judges again: the newest
    return Judgment(hold=hold_of(step, batch), step=step, after_batch=batch, batches=batches,
                    since=now, timeout=config.timeout, recheck=config.recheck,
                    on_timeout=Verdict(config.on_timeout), approvers=list(config.approvers),
                    hosts_done=[h.host for h in hosts if h.status is StepStatus.SUCCEEDED],
                    errors=sum(1 for h in hosts if h.status is StepStatus.FAILED), gates=gates)


def wait_for(judge: Judge, judgment: Judgment, *, clock: Callable[[], float],
             token: CancelToken, poll: float = POLL,
             watch: Callable[[], Decision | None] = lambda: None) -> Decision | None:
    """The decision on ``judgment`` — someone's, the one ``watch`` proposes (a gate that
    failed while holding), or ``on_timeout`` once ``clock`` passes its deadline — or None
    if the run was cancelled while it waited. A proposed or timed-out decision is settled
    through ``judge`` like a click, so whichever lands first stands."""
    failing = False
    while True:
        try:
            found, failing = judge.decided(judgment.hold), False
        except DeckhandError as exc:  # the store away: keep holding (the lease decides)
            if not failing:
                log.warning("go/no-go %s: cannot read the decision yet: %s", judgment.hold, exc)
            found, failing = None, True
        if found is not None:
            return found
        proposed = watch()
        if proposed is not None:
            return _settled(judge, judgment, proposed, token=token, poll=poll)
        if clock() >= judgment.deadline:
            return _settled(judge, judgment, _timeout(judgment), token=token, poll=poll)
        if token.wait(poll):
            return None


def _timeout(judgment: Judgment) -> Decision:
    verdict = judgment.on_timeout
    action = "continuing" if verdict is Verdict.CONTINUE else "rolling back"
    return Decision(verdict=verdict, actor="deckhand", via="timeout", reason=(
        f"no go/no-go decision within {span(judgment.timeout)}: {action} "
        f"(rollout.judgment.on_timeout: {verdict.value})"))


def _settled(judge: Judge, judgment: Judgment, decision: Decision, *, token: CancelToken,
             poll: float) -> Decision | None:
    """``decision`` (the timeout's, a failed gate's), settled through ``judge`` like a
    person's click. While the store is away it keeps holding and retries (nothing could
    start anyway: the lease fences every command), so the decision acted on is always the
    recorded and audited one — a click that lands first once the store is back stands, and
    never a second, contrary decision beside the one acted on. None if the run was
    cancelled meanwhile."""
    failing = False
    while True:
        try:
            return judge.settle(judgment.hold, decision)
        except DeckhandError as exc:
            if not failing:
                log.warning("go/no-go %s: cannot record the %s decision yet (%s): holding "
                            "until it is recorded", judgment.hold, decision.via, exc)
            failing = True
        if token.wait(poll):
            return None


def span(seconds: float) -> str:
    """``30m``, ``2h``, ``90s``: a duration as the config writes it."""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def clock_time(at: float) -> str:
    return time.strftime("%H:%M", time.gmtime(at)) + " UTC"


def waiting_line(held: Judgment) -> str:
    """``awaiting go/no-go after batch 1 of 3 of deploy since 14:02 UTC`` (and its timeout)."""
    then = "continues" if held.on_timeout is Verdict.CONTINUE else "rolls back"
    return (f"awaiting go/no-go {held.where()} since {clock_time(held.since)} — "
            f"{then} at {clock_time(held.deadline)} if nobody decides")


def measured_line(held: Judgment) -> str:
    """When the figures shown were measured, and whether they are being judged again."""
    when = "at the end of the batch" if held.measured_at is None else \
        "at " + time.strftime("%H:%M:%S", time.gmtime(held.measured_at)) + " UTC"
    again = (f"judged again every {span(held.recheck)} while holding, and on Continue"
             if held.recheck else "judged again on Continue")
    return f"gate figures measured {when}; {again}"


def results_line(held: Judgment) -> str:
    """What the batches so far did: hosts done, error count."""
    done = ", ".join(held.hosts_done[:10]) + (
        f" and {len(held.hosts_done) - 10} more" if len(held.hosts_done) > 10 else "")
    return (f"{len(held.hosts_done)} host(s) done ({done or 'none'}), "
            f"{held.errors} error(s)")


def judgment_lines(run: Run) -> list[str]:
    """Every go/no-go of a run, for ``runs show``: decided ones, then the one it waits at."""
    out: list[str] = []
    for held in run.judgments:
        if held.decision is None:
            if run.awaiting is held:
                out += [waiting_line(held), f"  {results_line(held)}",
                        *(f"  gate {g}" for g in held.gates),
                        *([f"  {measured_line(held)}"] if held.gates else []),
                        f"  decide: deckhand judge {run.id} continue|rollback"]
            continue
        out.append(f"go/no-go {held.where()}: {held.decision.describe()} at "
                   f"{clock_time(held.decision.at)}")
    return out
