"""A claimed schedule occurrence is leased until it is settled, so a replica that dies while
planning it (a slow LLM, then SIGKILL) does not lose it.

The replica that wins an occurrence's claim (``schedule:ID:fired:ISO``) also writes its
state (``schedule:ID:occurrence:ISO``: owner, attempt, planning/done/missed/failed), a
lease (``schedule:ID:lease:ISO``, a key with a TTL its heartbeat renews) and an entry in
``schedules:open``. When it has handled the occurrence (a run stored, or an outcome such as
"could not plan" audited) it settles it. If its lease expires first, the next replica to
tick takes the occurrence over — once: ``TAKEOVERS`` attempts in all — under the same
idempotency key: the run's id is derived from (schedule, fire time), so a claimer that
stored its run just before dying, or a slow one that is still alive, never yields a second
run. An occurrence that cannot be taken over (its takeover died too, or it is older than
the grace time) is recorded as missed, with the reason, audited and shown in
``schedules list`` and the App Home.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from enum import StrEnum
from types import TracebackType

from pydantic import BaseModel

from agents.ids import derived_id

log = logging.getLogger("deckhand.occurrences")

DEFAULT_LEASE = timedelta(seconds=60)
ATTEMPTS = 2
"""The claimer's attempt plus one takeover: then the occurrence is recorded missed."""


class OccurrenceStatus(StrEnum):
    PLANNING = "planning"
    DONE = "done"
    MISSED = "missed"
    FAILED = "failed"


class OccurrenceState(BaseModel):
    """One claimed occurrence, from its claim until it is settled."""

    schedule: str
    fire_time: datetime
    owner: str
    attempt: int = 1
    status: OccurrenceStatus = OccurrenceStatus.PLANNING
    previous_owner: str | None = None
    note: str | None = None
    """Why it was taken over, missed or failed."""

    @property
    def key(self) -> str:
        """The idempotency key every attempt shares."""
        return occurrence_key(self.schedule, self.fire_time)


def occurrence_key(schedule_id: str, fire_time: datetime) -> str:
    return f"{schedule_id}@{fire_time.isoformat()}"


def occurrence_run_id(schedule_id: str, fire_time: datetime) -> str:
    """The id of the run an occurrence creates: the same on every replica and attempt."""
    return derived_id("run", occurrence_key(schedule_id, fire_time), at=fire_time.timestamp())


Renew = Callable[[], bool]
"""Extends the lease; False once another replica holds it."""


class Heartbeat:
    """Renews a lease every third of its length while the occurrence is handled."""

    def __init__(self, renew: Renew, lease: timedelta, *, what: str):
        self.renew, self.every, self.what = renew, lease.total_seconds() / 3, what
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True, name=f"lease-{what}")

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        while not self._stop.wait(self.every):
            try:
                if not self.renew():
                    log.warning("occurrence %s: lease lost to another replica; its run id is "
                                "the same, so it is created once", self.what)
                    return
            except Exception:  # Redis away: the lease may lapse and another replica take over
                log.exception("occurrence %s: lease not renewed", self.what)
