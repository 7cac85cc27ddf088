"""Bounded health answers (agents.readiness), with injected clocks and a real thread."""

from __future__ import annotations

import threading

from agents.errors import StoreError
from agents.readiness import Liveness, StoreProbe, watch_drain


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_liveness_is_stale_only_past_its_limit_and_says_where_it_was() -> None:
    clock = Clock()
    alive = Liveness(stale_after=30, clock=clock)
    clock.now += 30
    assert alive.problem() is None
    alive.beat("running r-1 (lease renewed)")
    clock.now += 31
    assert alive.problem() == "no progress for 31 s (limit 30 s); last: running r-1 (lease renewed)"


def test_a_hung_ping_costs_one_thread_and_every_answer_is_bounded() -> None:
    release = threading.Event()
    calls: list[int] = []

    def ping() -> None:
        calls.append(1)
        release.wait(10)

    probe = StoreProbe(ping, deadline=0.05)
    for _ in range(3):
        assert "has not answered a ping" in (probe.problem() or "")
    assert len(calls) == 1  # one ping in flight, however often it is asked
    release.set()
    assert probe.problem() is None  # a fresh ping, answered


def test_a_failing_ping_gives_its_reason() -> None:
    def ping() -> None:
        raise StoreError("cannot reach Redis at redis://x:6379/0")

    assert StoreProbe(ping, deadline=1).problem() == "cannot reach Redis at redis://x:6379/0"


def test_a_drain_gives_up_once_the_store_fails_for_the_whole_wait() -> None:
    clock = Clock()
    answers = iter([None, "down", "down", "down", "down"])
    given_up: list[str] = []

    class Probe(StoreProbe):
        def problem(self) -> str | None:
            clock.now += 1
            return next(answers)

    watch_drain(Probe(lambda: None, deadline=0.5, clock=clock), wait=2,
                give_up=given_up.append, clock=clock, every=0)
    assert given_up == ["down"]


def test_a_drain_says_when_an_outage_starts_and_ends_before_it_gives_up() -> None:
    clock = Clock()
    answers = iter([None, "down", None, "down", "down", "down", "down"])
    said: list[str] = []

    class Probe(StoreProbe):
        def problem(self) -> str | None:
            clock.now += 1
            return next(answers)

    watch_drain(Probe(lambda: None, deadline=0.5, clock=clock), wait=2,
                give_up=lambda why: said.append(f"gave up: {why}"), clock=clock, every=0,
                troubled=lambda why: said.append(f"troubled: {why}"),
                recovered=lambda: said.append("recovered"))
    assert said == ["troubled: down", "recovered", "troubled: down", "gave up: down"]
