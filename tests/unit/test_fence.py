"""The worker's own view of its lease (agents.engine.fence), with an injected clock."""

from __future__ import annotations

import threading

from agents.engine.fence import LeaseFence
from tests.fixtures.polling import wait_until


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _start(fence: LeaseFence, what: str) -> tuple[threading.Thread, list[str | None]]:
    answers: list[str | None] = []
    thread = threading.Thread(target=lambda: answers.append(fence.may_start(what)))
    thread.start()
    return thread, answers


def test_a_command_starts_while_the_lease_is_vouched_for_and_waits_after() -> None:
    clock = Clock()
    fence = LeaseFence(10, clock=clock)
    assert fence.may_start("a") is None
    clock.now += 8.9  # 10 s lease, a tenth kept in hand
    assert fence.may_start("b") is None
    clock.now += 0.2
    thread, answers = _start(fence, "c on web-1")
    wait_until(lambda: fence.holding, what="the fence to hold c back")
    assert answers == []  # c waits: nothing starts without the lease
    outage = fence.renewed(clock.now)
    thread.join(5)
    assert answers == [None]
    assert outage is not None and outage.lapsed and outage.waiting == "c on web-1"
    assert outage.describe() == "store unreachable for 9 s; lease lapsed before c on web-1"


def test_a_run_lost_to_another_worker_starts_nothing_more() -> None:
    clock = Clock()
    fence = LeaseFence(2, clock=clock)
    clock.now += 5
    thread, answers = _start(fence, "c")
    wait_until(lambda: fence.holding, what="the fence to hold c back")
    fence.lose("another worker took the run over")
    thread.join(5)
    assert answers == ["another worker took the run over"]
    assert fence.may_start("d") == "another worker took the run over"


def test_regular_renewals_are_no_outage() -> None:
    clock = Clock()
    fence = LeaseFence(3, clock=clock)
    for _ in range(5):
        clock.now += 1
        assert fence.renewed(clock.now) is None
    assert fence.valid_for > 2.6


def test_an_outage_that_outlived_the_lease_while_nothing_waited_says_it_lapsed() -> None:
    clock = Clock()
    fence = LeaseFence(2, clock=clock)
    clock.now += 1.5  # shorter than the lease: an outage, but the lease held
    short = fence.renewed(clock.now)
    assert short is not None and not short.lapsed
    clock.now += 45  # a run held by a pause or a go/no-go starts nothing meanwhile
    long = fence.renewed(clock.now)
    assert long is not None and long.lapsed and long.waiting is None
    assert long.describe() == "store unreachable for 45 s; lease lapsed"


def test_a_gap_with_no_failed_heartbeat_is_a_stalled_worker_not_an_outage() -> None:
    clock = Clock()
    fence = LeaseFence(2, clock=clock)
    clock.now += 30  # the process was stopped: no heartbeat ran, none failed
    stalled = fence.renewed(clock.now, unreachable=False)
    assert stalled is not None and stalled.lapsed and stalled.action == "worker_stalled"
    assert stalled.describe() == ("lease not renewed for 30 s (this worker stalled: no "
                                  "heartbeat ran); lease lapsed")
    clock.now += 30
    away = fence.renewed(clock.now)
    assert away is not None and away.action == "store_outage"
