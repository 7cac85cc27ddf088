"""Fencing at the command boundary: a worker starts a command only while it can vouch, by
its own monotonic clock, that its lease on the run is still alive.

Redis expires a lease ``lease`` seconds after it receives the renewal; the worker counts
from the moment it *sent* the renewal, so its view expires first. While the store is
unreachable the lease cannot be renewed: once the worker's view has run out, no new
command (batch or attempt) starts — commands already running finish — and the run waits
until the heartbeat renews the lease (the store is back, nobody took the run) or learns
that another worker has the run (then nothing more starts here).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("deckhand.worker")

MARGIN = 0.1
"""Share of the lease kept in hand: the worker stops vouching for it a little early."""


@dataclass(frozen=True)
class Outage:
    """A stretch during which the lease could not be renewed."""

    seconds: float
    lapsed: bool
    """Whether the lease ran out (by the worker's clock) during it."""
    waiting: str | None
    """What the run was about to start when its lease ran out, if anything."""
    unreachable: bool = True
    """Whether heartbeats failed (the store was away); else none ran: the worker stalled."""

    @property
    def action(self) -> str:
        """Its audit action: the cause, as the heartbeat saw it."""
        return "store_outage" if self.unreachable else "worker_stalled"

    def describe(self) -> str:
        text = (f"store unreachable for {self.seconds:.0f} s" if self.unreachable else
                f"lease not renewed for {self.seconds:.0f} s (this worker stalled: no "
                f"heartbeat ran)")
        if self.lapsed:
            text += "; lease lapsed" + (f" before {self.waiting}" if self.waiting else "")
        return text


class LeaseFence:
    """The worker's own view of its lease on one run (thread-safe)."""

    def __init__(self, lease: float, *, renewed_at: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.lease, self._clock = lease, clock
        self._renewed_at = clock() if renewed_at is None else renewed_at
        self._lost: str | None = None
        self._waiting: str | None = None
        self._lapsed = False
        self._cond = threading.Condition()

    @property
    def valid_for(self) -> float:
        """Seconds the worker may still start commands under its current lease."""
        return self._renewed_at + self.lease * (1 - MARGIN) - self._clock()

    @property
    def silent_for(self) -> float:
        """Seconds since the last accepted renewal was sent."""
        return self._clock() - self._renewed_at

    @property
    def holding(self) -> str | None:
        """What waits for the lease to be renewed, if anything."""
        return self._waiting if self._lapsed else None

    @property
    def lost(self) -> str | None:
        return self._lost

    def renewed(self, sent_at: float, *, unreachable: bool = True) -> Outage | None:
        """The renewal sent at ``sent_at`` (this clock) was accepted; the outage it ends,
        if the previous renewal is older than a beat or two (``lease / 2``) — with
        ``unreachable``, whether heartbeats failed meanwhile (else none ran)."""
        with self._cond:
            gap = sent_at - self._renewed_at
            # lapsed by the gap, not only when a command was held: a pause or a go/no-go
            # starts nothing, yet its lease ran out all the same
            lapsed = self._lapsed or gap >= self.lease * (1 - MARGIN)
            outage = (Outage(gap, lapsed, self._waiting, unreachable)
                      if gap > self.lease / 2 else None)
            self._renewed_at = max(self._renewed_at, sent_at)
            self._lapsed, self._waiting = False, None
            self._cond.notify_all()
        return outage

    def lose(self, reason: str) -> None:
        """Another worker has the run: nothing more starts here."""
        with self._cond:
            self._lost = reason
            self._cond.notify_all()

    def may_start(self, what: str) -> str | None:
        """Block while the lease cannot be vouched for; None once ``what`` may start, else
        why it must not (the run is another worker's now)."""
        with self._cond:
            while self._lost is None and self.valid_for <= 0:
                if not self._lapsed:
                    self._lapsed, self._waiting = True, what
                    log.warning("lease not renewed for %.1f s (store unreachable?): %s waits, "
                                "and no command starts until the lease is renewed",
                                self._clock() - self._renewed_at, what)
                self._cond.wait(1.0)
            if self._lost is not None:
                return self._lost
            return None
