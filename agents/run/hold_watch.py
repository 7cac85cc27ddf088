"""A go/no-go hold keeps judging (Argo Rollouts' background analysis through a pause).

While a rollout holds after a batch, the batch's gates are judged again ``recheck`` seconds
after each judgment ends, on a thread of their own so the hold goes on answering clicks.
Each judgment's figures replace the hold's (the executor re-emits JUDGMENT_AWAITED, so the
record, the audit and every face's hold message — through the run's feed, from whichever
process relays it — show the newest and when they were measured). A gate
that fails is recorded (GATE_JUDGED, as a failure or a recovery) and, per
``rollout.judgment.on_gate_failure``, either proposes Roll back to ``judgment.wait_for``
(settled like a click: a decision made first stands) or is left to the people deciding.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from agents import logcontext
from agents.run.gates import figure, stop_reason
from agents.run.record import Decision, GateCheck, Judgment, Verdict
from tools.runners.base import CancelToken

log = logging.getLogger("deckhand.judgment")

JudgeGates = Callable[[CancelToken], list[GateCheck]]
"""Judges every gate after the held batch once (quietly), stopping when the token is."""


class HoldWatch:
    """Judges a hold's gates until ``stop`` (see the module)."""

    def __init__(self, held: Judgment, judge_gates: JudgeGates, *, rollback_on_failure: bool,
                 shown: Callable[[Judgment], None], judged: Callable[[GateCheck], None],
                 clock: Callable[[], float] = time.time) -> None:
        self.held = held
        """The hold with the newest figures (what a decision is recorded on)."""
        self._judge_gates, self._rollback = judge_gates, rollback_on_failure
        self._shown, self._judged, self._clock = shown, judged, clock
        self._token = CancelToken()
        self._lock = threading.Lock()
        self._stopped = False
        self._proposal: Decision | None = None
        self._failing: set[str] = set()

    def start(self) -> None:
        if self.held.recheck <= 0:
            return
        context = logcontext.inherit()  # its log lines and spans belong to the run

        def watch() -> None:
            context()
            self._watch()

        threading.Thread(target=watch, daemon=True, name=f"hold-watch-{self.held.hold}").start()

    def proposed(self) -> Decision | None:
        """Roll back, once a gate failed while holding (with on_gate_failure: rollback).
        Read without the lock: the hold's poll never waits for a judgment being recorded."""
        return self._proposal

    def stop(self) -> Judgment:
        """Stop judging; nothing is shown or recorded after this returns. The hold as last
        shown (a judgment still running is cancelled and left unsaid)."""
        with self._lock:
            self._stopped = True
            self._token.cancel("the go/no-go was decided")
            return self.held

    def _watch(self) -> None:
        while not self._token.wait(self.held.recheck):
            try:
                checks = self._judge_gates(self._token)
            except Exception:  # a bug here must not end the hold: the people still decide
                log.exception("go/no-go %s: judging the gates while holding failed",
                              self.held.hold)
                continue
            if not self._record(checks):
                return

    def _record(self, checks: list[GateCheck]) -> bool:
        """Show ``checks`` (unless stopped meanwhile); whether to go on judging."""
        with self._lock:
            if self._stopped or self._token.cancelled or not checks:
                return False
            for check in checks:  # a failure, and a recovery from one, go in the record
                was_failing = check.name in self._failing
                if check.ok and was_failing:
                    self._failing.discard(check.name)
                elif not check.ok and not was_failing:
                    self._failing.add(check.name)
                else:
                    continue
                self._judged(check)
            self.held = self.held.model_copy(update={"gates": [figure(c) for c in checks],
                                                     "measured_at": self._clock()})
            self._shown(self.held)
            failed = next((c for c in checks if not c.ok), None)
            if failed is None or not self._rollback:
                return True
            self._proposal = Decision(
                verdict=Verdict.ROLLBACK, actor="deckhand", via="gate", at=self._clock(),
                reason=(f"{stop_reason(failed)}, judged again while holding "
                        f"(rollout.judgment.on_gate_failure: rollback)"))
            return False
