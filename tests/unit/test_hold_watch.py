"""A hold's gates judged again while it waits (``agents.run.hold_watch``): each judgment's
figures shown, a failure and a recovery recorded once each, Roll back proposed on a failure
when configured, nothing shown once the hold is decided."""

from __future__ import annotations

import threading

from agents.run.hold_watch import HoldWatch
from agents.run.record import GateCheck, Judgment, Verdict
from tests.fixtures.polling import wait_until
from tools.runners.base import CancelToken


def _ended() -> None:
    """Wait for the watch's thread to end."""
    for thread in threading.enumerate():
        if thread.name == "hold-watch-ship/1":
            thread.join(10)
            assert not thread.is_alive()


def _held() -> Judgment:
    return Judgment(hold="ship/1", step="ship", after_batch=1, batches=3, since=0.0,
                    timeout=60.0, on_timeout=Verdict.ROLLBACK, recheck=0.01)


class Rounds:
    """Judges the gate as scripted, one verdict per judgment (the last one repeats)."""

    def __init__(self, *verdicts: bool):
        self.verdicts, self.calls = list(verdicts), 0
        self.lock = threading.Lock()

    def __call__(self, token: CancelToken) -> list[GateCheck]:
        with self.lock:
            ok = self.verdicts[min(self.calls, len(self.verdicts) - 1)]
            self.calls += 1
        return [GateCheck(name="ratio", step="ship", after_batch=1, batches=3, ok=ok,
                          reason=None if ok else "below 0.99")]


def test_a_failure_and_a_recovery_are_recorded_once_each_and_left_to_people() -> None:
    shown: list[Judgment] = []
    judged: list[bool] = []
    rounds = Rounds(True, False, False, True, True)
    watch = HoldWatch(_held(), rounds, rollback_on_failure=False, shown=shown.append,
                      judged=lambda c: judged.append(c.ok))
    watch.start()
    wait_until(lambda: rounds.calls >= 6, timeout=10, what="six judgments")
    held = watch.stop()
    count = len(shown)
    assert judged == [False, True]  # the failure, then the recovery; not every round
    assert watch.proposed() is None  # on_gate_failure: decide leaves it to the people
    assert held.measured_at is not None and "ratio after batch 1 of 3: passed" in held.gates[0]
    assert any("failed: below 0.99" in s.gates[0] for s in shown)
    _ended()
    assert len(shown) == count  # nothing shown once stopped


def test_a_failure_proposes_roll_back_and_ends_the_watch() -> None:
    judged: list[bool] = []
    rounds = Rounds(True, False)
    watch = HoldWatch(_held(), rounds, rollback_on_failure=True, shown=lambda held: None,
                      judged=lambda c: judged.append(c.ok))
    watch.start()
    proposal = wait_until(watch.proposed, timeout=10, what="Roll back to be proposed")
    assert proposal.verdict is Verdict.ROLLBACK and proposal.via == "gate"
    assert "gate ratio failed after batch 1 of 3: below 0.99, judged again while holding" \
        in (proposal.reason or "")
    _ended()
    assert rounds.calls == 2 and judged == [False]  # it judged no more after proposing
    assert watch.stop().gates
