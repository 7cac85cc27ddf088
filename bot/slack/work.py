"""deckhand's own bounded work pool: everything a listener hands off after (or instead of) ack.

Bolt's listener threads only parse, authorize against Redis and ack; Web API calls (with their
429 retries), planning and thread replies run here, so a rate-limited Slack never delays an
ack. The queue is bounded: when it is full, ``submit`` says so and the listener tells the user
at once instead of dropping the request. A job that fails tells its user through ``tell``:
a ``DeckhandError`` (a refusal, a bad input) is shown as it is; anything else is logged with
its traceback and summarised.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from agents.said import Said, said_of
from tools.errors import DeckhandError

log = logging.getLogger("deckhand.slack.work")

BUSY = ("⏳ deckhand is busy (Slack is rate-limiting it). Nothing was done; "
        "try again in a minute.")

Tell = Callable[[str], None]


@dataclass(frozen=True)
class Job:
    """One piece of work and how to tell its user when it fails."""

    name: str
    run: Callable[[], object]
    tell: Tell | None = None


_STOP = Job("stop", lambda: None)


class WorkQueue:
    """A fixed number of threads draining a bounded queue of jobs."""

    def __init__(self, *, threads: int = 8, capacity: int = 200):
        self.capacity = capacity
        self._jobs: queue.Queue[Job] = queue.Queue(maxsize=capacity)
        self._notices: queue.Queue[Job] = queue.Queue(maxsize=capacity)
        """A lane of its own for "busy" notices, so they are not stuck behind the full queue."""
        self._threads = [threading.Thread(target=self._drain, args=(self._jobs,), daemon=True,
                                          name=f"slack-work-{i}") for i in range(threads)]
        self._threads.append(threading.Thread(target=self._drain, args=(self._notices,),
                                              daemon=True, name="slack-work-notices"))
        self._busy = 0
        self._lock = threading.Lock()
        self.refused = 0
        """Jobs refused because the queue was full (exported as a metric)."""
        for thread in self._threads:
            thread.start()

    def submit(self, name: str, run: Callable[[], object], *, tell: Tell | None = None,
               tell_busy: bool = True) -> bool:
        """Queue ``run``; False (and nothing queued) when the queue is full, in which case the
        user is told so through ``tell`` unless the caller says it tells them itself."""
        try:
            self._jobs.put_nowait(Job(name, run, tell))
        except queue.Full:
            self.refused += 1
            log.warning("work queue full (%d jobs); refused %s", self.capacity, name)
            if tell is not None and tell_busy:
                self._notice(name, tell)
            return False
        return True

    def _notice(self, name: str, tell: Tell) -> None:
        try:
            self._notices.put_nowait(Job(f"busy notice for {name}", lambda: tell(BUSY)))
        except queue.Full:
            log.warning("notice lane full too; the user of %s is not told", name)

    def depth(self) -> int:
        """Jobs waiting or running: how far behind the bot is."""
        return self._jobs.qsize() + self._busy

    def idle(self) -> bool:
        return self.depth() == 0

    def stop(self, timeout: float = 10.0) -> None:
        """Drop jobs not yet started, let running ones finish within ``timeout`` seconds."""
        dropped = _drop_all(self._jobs) + _drop_all(self._notices)
        if dropped:
            log.warning("stopping: %d queued Slack jobs dropped", dropped)
        for _ in self._threads[:-1]:
            self._jobs.put(_STOP)
        self._notices.put(_STOP)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _drain(self, jobs: queue.Queue[Job]) -> None:
        while (job := jobs.get()) is not _STOP:
            with self._lock:
                self._busy += 1
            try:
                _perform(job)
            finally:
                with self._lock:
                    self._busy -= 1


def _drop_all(jobs: queue.Queue[Job]) -> int:
    dropped = 0
    while True:
        try:
            jobs.get_nowait()
        except queue.Empty:
            return dropped
        dropped += 1


def _perform(job: Job) -> None:
    try:
        job.run()
    except DeckhandError as exc:
        log.info("%s not done (%s): %s", job.name, type(exc).__name__, exc)  # not all refusals
        _tell(job, Said("⚠️ ", said_of(exc)))  # its mentions kept
    except Exception as exc:
        log.error("%s failed", job.name, exc_info=exc)
        _tell(job, f"⚠️ Something went wrong handling that ({type(exc).__name__}). "
                   f"It was logged; try again, or ask the deckhand admins.")


def _tell(job: Job, text: str) -> None:
    if job.tell is None:
        return
    try:
        job.tell(text)
    except Exception:  # telling is best effort; the failure itself is already logged
        log.exception("could not tell the user that %s failed", job.name)
