"""Bounded health answers: readiness that never hangs on a hung Redis, and a liveness beat
that tells a stuck worker from an idle one.

A load balancer or ``docker healthcheck`` asks often and gives up after a few seconds; a
Redis that is stopped (SIGSTOP, a frozen VM) accepts connections and answers nothing, so a
plain ping would block the probe for the client's whole socket timeout and retries (> 30 s
through Sentinel). ``StoreProbe`` pings in a background thread, waits at most ``deadline``
seconds, and keeps one ping in flight: a hung Redis costs one thread, not one per probe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tools.errors import DeckhandError

Clock = Callable[[], float]


@dataclass
class _Flight:
    started: float
    done: threading.Event = field(default_factory=threading.Event)
    error: str | None = None


class StoreProbe:
    """Whether the store answers, within ``deadline`` seconds (None) or why not (a reason)."""

    def __init__(self, ping: Callable[[], object], *, deadline: float = 1.5,
                 clock: Clock = time.monotonic):
        self._ping, self.deadline, self._clock = ping, deadline, clock
        self._lock = threading.Lock()
        self._flight: _Flight | None = None
        self._last_error: str | None = None

    def problem(self) -> str | None:
        """None when the store answered a ping; else one line saying what is wrong."""
        flight = self._current()
        if flight.done.wait(self.deadline):
            return flight.error
        waited = self._clock() - flight.started
        last = f"; last error: {self._last_error}" if self._last_error else ""
        return (f"Redis has not answered a ping for {waited:.1f} s (down, hung, or no "
                f"primary during a failover){last}")

    def _current(self) -> _Flight:
        with self._lock:  # one ping in flight at a time, however often we are asked
            if self._flight is None or self._flight.done.is_set():
                self._flight = _Flight(self._clock())
                threading.Thread(target=self._run, args=(self._flight,), daemon=True,
                                 name="readiness-ping").start()
            return self._flight

    def _run(self, flight: _Flight) -> None:
        try:
            self._ping()
        except DeckhandError as exc:
            flight.error = str(exc)
        except Exception as exc:  # any failure to answer is a reason, never a hang
            flight.error = f"{type(exc).__name__}: {exc}"
        finally:
            self._last_error = flight.error
            flight.done.set()


class Liveness:
    """The last time a loop made progress; stale past ``stale_after`` seconds means stuck.

    A worker beats from its main loop (every ``block`` seconds when idle) and from the
    heartbeat thread of the run in hand (every second), so an idle worker and a busy one
    both stay fresh, and one whose loop is wedged goes stale.
    """

    def __init__(self, *, stale_after: float, clock: Clock = time.monotonic):
        self.stale_after, self._clock = stale_after, clock
        self._last = clock()
        self._what = "started"

    def beat(self, what: str) -> None:
        self._last, self._what = self._clock(), what

    def problem(self) -> str | None:
        """None while fresh; else how long since the loop last made progress, and where."""
        age = self._clock() - self._last
        if age <= self.stale_after:
            return None
        return (f"no progress for {age:.0f} s (limit {self.stale_after:.0f} s); last: "
                f"{self._what}")


def watch_drain(probe: StoreProbe, *, wait: float, give_up: Callable[[str], None],
                clock: Clock = time.monotonic, every: float = 0.5,
                troubled: Callable[[str], None] | None = None,
                recovered: Callable[[], None] | None = None) -> None:
    """While a worker drains: call ``give_up(reason)`` once the store has not answered for
    ``wait`` seconds in a row. A store with no primary would otherwise hold the drain (and
    the container's stop grace period, 30 min in compose) for nothing: the run in hand is
    taken over by another worker once this one's lease runs out. ``troubled(reason)`` is
    told when an outage starts (so the log says what the drain waits for before it gives
    up), ``recovered()`` when the store answers again."""
    failing_since: float | None = None
    pause = threading.Event()
    while True:
        problem = probe.problem()
        now = clock()
        if problem is None:
            if failing_since is not None and recovered is not None:
                recovered()
            failing_since = None
        elif failing_since is None:
            failing_since = now - probe.deadline
            if troubled is not None:
                troubled(problem)
        if failing_since is not None and problem is not None and now - failing_since >= wait:
            give_up(problem)
            return
        pause.wait(every)
