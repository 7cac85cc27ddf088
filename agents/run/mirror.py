"""A listener's own copy of a running run, kept current at a cost that does not grow with
the number of hosts.

Executor listeners run under the execution's lock. Copying the whole run on every event
costs O(hosts) per event, so O(hosts²) per step: at 500 hosts that is most of the
executor's time. A mirror copies the run on step- and run-level events only and folds each
host event in as its host changes (as the store does with its host journal). Threads that
render it (a Slack sender, a terminal refresh) read it under the mirror's own lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from agents.run.record import HOST_EVENTS, Event, EventKind, Run

T = TypeVar("T")


class RunMirror:
    """A copy of one run, updated from the executor's events (an executor listener)."""

    def __init__(self, run: Run | None = None):
        self._run = run.model_copy(deep=True) if run is not None else None
        self._lock = threading.Lock()

    def __call__(self, event: Event, run: Run) -> None:
        if event.kind is EventKind.STEP_OUTPUT:
            return
        with self._lock:
            if event.kind in HOST_EVENTS and self._run is not None:
                for change in run.host_changes(event):
                    self._run.apply_host_change(change)
            else:
                self._run = run.model_copy(deep=True)

    def read(self, use: Callable[[Run], T]) -> T | None:
        """``use(run)`` while no event changes the copy; None before the first event."""
        with self._lock:
            return use(self._run) if self._run is not None else None

    def snapshot(self) -> Run | None:
        """A copy of the copy, for a reader that keeps it."""
        return self.read(lambda run: run.model_copy(deep=True))
