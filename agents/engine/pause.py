"""A running run's pause and stop, as its worker sees them: the executor's ``Hold``.

The requests live in the store (``run:ID:pause`` and ``run:ID:cancel``, see
``Runs.request_pause`` and ``Runs.request_cancel``); the worker's heartbeat relays them
here, and each look reads them fresh: a stop or pause acknowledged to whoever asked holds
whatever would start next, not only after the heartbeat's next beat. A stop cancels the
run's token (what runs is killed; the rollback follows). The executor asks ``paused()``
before each step and rollout batch of the plan, ``stopped()`` before each command starts
(in its start gate), and, while paused,
``wait``s: running commands finish, nothing new starts, and the worker keeps its lease and
locks (the heartbeat goes on). The wait ends on resume, on a cancel (Stop, or a lost lease),
or when the pause has lasted the policy's ``pause_timeout``: the run is then cancelled into
its rollback, and says why (audited through the run's outbox, so an outage loses nothing).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from agents.errors import StoreError
from agents.run.judgment import span
from agents.run.record import Pause
from agents.store import Runs
from tools.runners.base import CancelToken

log = logging.getLogger("deckhand.pause")

POLL = 0.2
"""Seconds between looks at the relayed pause and the clock while held."""


class Audit(Protocol):
    """Writes an audit entry about the run, as its worker (``RunRecorder.audit``)."""

    def __call__(self, action: str, *, run_id: str, **details: Any) -> None: ...


class PauseSwitch:
    """One run's pause on its worker (an executor ``Hold``); ``relay`` is the heartbeat's."""

    def __init__(self, run_id: str, *, runs: Runs, audit: Audit, token: CancelToken,
                 timeout: float, clock: Callable[[], float] | None = None):
        self.runs, self.audit = runs, audit
        self.run_id, self.token = run_id, token
        self.timeout = timeout
        self.clock = clock or runs.clock
        self._pause: Pause | None = None
        self._lock = threading.Lock()

    def relay(self, pause: Pause | None, stopped: str | None = None) -> None:
        """What the store says now (the heartbeat calls this every beat): the pause, and
        who stopped the run (the first Stop), if anyone did."""
        self._stop(stopped)
        with self._lock:
            before, self._pause = self._pause, pause
        if pause is not None and (before is None or before.at != pause.at):
            log.info("run %s: paused by %s (%s); nothing new starts until it is resumed",
                     self.run_id, pause.by, pause.via)
        elif pause is None and before is not None:
            log.info("run %s: resumed", self.run_id)

    def look(self) -> None:
        """Read the pause and the stop from the store now (one round trip); if it does not
        answer, the heartbeat's last word stands."""
        with contextlib.suppress(StoreError):
            self.relay(*self.runs.controls(self.run_id))

    def paused(self) -> Pause | None:
        """The pause in force, as the store says it now (a stop seen on the way cancels
        the run's token, which the executor checks next)."""
        self.look()
        with self._lock:
            pause = self._pause
        if pause is None:
            return None
        return pause.model_copy(update={"until": pause.at + self.timeout})

    def stopped(self) -> str | None:
        """Why nothing may start now, reading the store's stop first: the run's cancel
        (a Stop, a lost lease, an expired pause), or None."""
        if not self.token.cancelled:
            with contextlib.suppress(StoreError):
                self._stop(self.runs.cancel_requested(self.run_id))
        return self.token.reason if self.token.cancelled else None

    def _stop(self, who: str | None) -> None:
        if who is not None and not self.token.cancelled:
            log.info("run %s: stopped by %s; nothing new starts", self.run_id, who)
            self.token.cancel(f"cancelled by {who}")

    def wait(self, until: Callable[[], bool]) -> None:
        while (pause := self.paused()) is not None and not until():
            if self.token.cancelled:
                return
            if self.clock() >= (pause.until or 0.0):
                self._expire(pause)
                return
            self.token.wait(POLL)  # a cancel (Stop, a lost lease) wakes it at once

    def _expire(self, pause: Pause) -> None:
        reason = f"paused by {pause.by} for {span(self.timeout)}; pause expired"
        log.warning("run %s: %s, rolling back", self.run_id, reason)
        self.token.cancel(reason)  # first: an unreachable store must not keep it held
        # through the run's outbox: an expiry during an outage lands once the store is back
        self.audit("pause_expired", run_id=self.run_id, paused_by=pause.by, since=pause.at,
                   timeout=self.timeout)
