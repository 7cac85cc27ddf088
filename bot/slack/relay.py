"""The relay: says what runs have to say in their Slack threads, from any ``serve`` replica.

Whatever process executes a run (``serve``'s embedded worker, a standalone ``deckhand
worker``), its events reach the run's feed in Redis (``agents.store.run_feed``), with the lines
faces add. Every ``serve`` replica runs a relay: it looks for runs whose feed it has not caught
up with, takes each with a short lease (one relay per run at a time, whichever replica), and
performs its entries in order through a ``ThreadWriter``, moving the run's cursor after each.
A relay that dies leaves the run to the next one once its lease lapses; it starts after the
last entry done, and edits the messages already posted instead of posting them again.

Nothing is dropped: a call Slack rate-limits (429) is sent again after its Retry-After, one
that fails for want of Slack (5xx, no connection) after a growing pause, until Slack takes it
— the rest of the run's thread waits behind it, in order. Only a call Slack refuses for good
(a deleted channel, a message that no longer exists) is logged and left out. While the run is
active its status message is refreshed from the record at most once per ``interval``; such a
refresh is tried once (a newer one follows), except the final one, which must land.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackRequestError

from agents import logcontext
from agents.errors import NotFound, StoreError
from agents.policy.rules import Policy
from agents.run.record import Run, RunStatus
from agents.store import FeedEntry, Plans, RunFeed, Runs
from bot.slack.retries import at_once
from bot.slack.thread import ThreadWriter

log = logging.getLogger("deckhand.slack.relay")

ACTIVE = (RunStatus.RUNNING, RunStatus.ROLLING_BACK)
"""A run whose status message is refreshed while nothing new is in its feed."""
READ_WAIT = 0.25
"""Seconds a read waits for a run's next entry: how soon a stopping relay lets go."""
FINAL_STATUS_WAIT = 15.0
"""Seconds the summary waits for the final status edit to land (it lands later otherwise)."""
THREAD_GRACE = 120.0
"""Seconds a scheduled run's entries wait for its plan message (and so its thread) to be
posted before they are said nowhere."""


class Stopping(Exception):
    """The relay is stopping, or lost the run to another relay: leave it as it is."""


class ThreadRelay:
    """Carries runs' feeds into their Slack threads (one thread per run being said)."""

    def __init__(self, client: WebClient, *, feed: RunFeed, runs: Runs, plans: Plans,
                 policy: Callable[[str | None], Policy], name: str | None = None,
                 interval: float = 1.0, lease: float = 15.0, poll: float = 0.2,
                 max_runs: int = 32, trace_link: Callable[[], str | None] = lambda: None,
                 changed: Callable[[Run], None] = lambda run: None,
                 timeline: Callable[[bool | None], None] | None = None):
        self.client, self.feed, self.runs, self.plans = client, feed, runs, plans
        self.policy, self.trace_link = policy, trace_link
        self.name = name or f"{socket.gethostname()}-{os.getpid()}-relay"
        self.interval, self.lease, self.poll, self.max_runs = interval, lease, poll, max_runs
        self.changed, self.timeline = changed, timeline
        self._stop = threading.Event()
        self._carrying: set[str] = set()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    # -- finding runs ---------------------------------------------------------------------

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve, daemon=True, name="slack-relay")
        thread.start()
        return thread

    def stop(self, timeout: float = 10.0) -> None:
        """Stop taking runs; the runs being said are left where they are (the next relay
        carries them on after their leases)."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))

    def serve(self) -> None:
        warned = False
        while not self._stop.is_set():
            try:
                self.pick_up()
                warned = False
            except StoreError as exc:
                if not warned:
                    log.error("the relay cannot read the store (%s); threads wait", exc)
                    warned = True
            self._stop.wait(self.poll)

    def pick_up(self) -> None:
        """Take every pending run nobody is saying (up to ``max_runs`` at once)."""
        for run_id in self.feed.pending():
            with self._lock:
                if run_id in self._carrying or len(self._carrying) >= self.max_runs:
                    continue
            if not self.feed.take(run_id, relay=self.name, ttl=self.lease):
                continue
            with self._lock:
                self._carrying.add(run_id)
            thread = threading.Thread(target=self._carry, args=(run_id,), daemon=True,
                                      name=f"slack-relay-{run_id}")
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
            thread.start()

    # -- saying one run -------------------------------------------------------------------

    def _carry(self, run_id: str) -> None:
        with logcontext.bound(run_id=run_id, plan_id=None):
            try:
                self._say(run_id)
            except Stopping:
                pass
            except NotFound:  # the run is gone (retention): nothing is left to say
                self.feed.forget(run_id)
            except StoreError as exc:  # the lease lapses; this or another relay resumes
                log.error("run %s: the store went away while saying its thread (%s); it "
                          "carries on once the store is back", run_id, exc)
            except Exception:
                log.exception("run %s: saying its thread failed; it is retried", run_id)
            finally:
                with self._lock:
                    self._carrying.discard(run_id)

    def _say(self, run_id: str) -> None:
        state = self.feed.state(run_id)
        cursor = state.cursor
        writer = ThreadWriter(self.client, plans=self.plans, policy=self.policy,
                              fields=state.fields, send=lambda call: self._land(run_id, call),
                              patient=lambda call: self._land(run_id, call,
                                                              within=FINAL_STATUS_WAIT),
                              remember=lambda fields: self._remember(run_id, fields),
                              trace_link=self.trace_link(), changed=self.changed,
                              timeline=self.timeline)
        synced = 0.0
        while True:
            self._renew(run_id)
            entries = self.feed.read(run_id, after=cursor, block=READ_WAIT)
            if self.feed.db.embedded and not entries:  # fakeredis cannot block
                self._wait(READ_WAIT)
            for entry in entries:
                if not self._perform(run_id, entry, writer):
                    break  # its thread is not posted yet: wait for it
                cursor = entry.id
            if time.monotonic() - synced < self.interval:
                continue  # the state messages (and the look at the record) are not due
            synced = time.monotonic()
            run = self.runs.get(run_id)
            slack = run.meta.get("slack")
            if slack and (entries or not writer.shows_all() or run.status in ACTIVE):
                writer.sync(run, slack, send=self._once)
            ended = writer.finished or run.status not in ACTIVE
            if not entries and ended and (writer.shows_all() or not slack) \
                    and self.feed.settle(run_id, cursor=cursor, relay=self.name):
                return

    def _perform(self, run_id: str, entry: FeedEntry, writer: ThreadWriter) -> bool:
        """Say ``entry`` (unless said before) and move the cursor past it; False if its
        thread does not exist yet and should."""
        run = self.runs.get(run_id)
        slack = entry.data.get("where") or run.meta.get("slack")
        if not slack and _thread_coming(run, self.feed.clock()):
            self._wait(0.5)
            return False
        if slack and not self.feed.done(run_id, entry.key):
            writer.perform(entry, run, slack)
        if not self.feed.advance(run_id, entry, relay=self.name):
            raise Stopping
        return True

    def _remember(self, run_id: str, fields: dict[str, str]) -> None:
        if not self.feed.advance(run_id, None, relay=self.name, remember=fields):
            raise Stopping

    def _renew(self, run_id: str) -> None:
        if self._stop.is_set() or not self.feed.take(run_id, relay=self.name, ttl=self.lease):
            raise Stopping

    def _wait(self, seconds: float) -> None:
        if self._stop.wait(seconds):
            raise Stopping

    # -- Slack calls ----------------------------------------------------------------------

    def _land(self, run_id: str, call: Callable[[], Any], *,
              within: float | None = None) -> Any:
        """Make ``call`` land: through any number of 429s and outages, renewing the lease
        meanwhile. None (logged) if Slack refuses it for good, or still has not taken it
        ``within`` seconds (when given)."""
        pause, told = 1.0, False
        deadline = None if within is None else time.monotonic() + within
        while True:
            try:
                with at_once():  # the 429's wait is ours: the lease is renewed through it
                    return call()
            except SlackApiError as exc:
                status = exc.response.status_code
                if status != 429 and status < 500:
                    log.error("run %s: Slack refused a thread update for good (%s); it is "
                              "left out", run_id, exc.response.get("error"))
                    return None
                wait = _retry_after(exc) if status == 429 else pause
                reason = "Slack is rate-limiting deckhand" if status == 429 else \
                    f"Slack answered {status}"
            except (SlackRequestError, OSError) as exc:
                wait, reason = pause, f"cannot reach Slack ({exc})"
            if not told:
                log.warning("run %s: %s; its thread waits and carries on in order", run_id,
                            reason)
                told = True
            pause = min(pause * 2, 30.0)
            if deadline is not None and time.monotonic() + wait > deadline:
                return None
            self._sleep_renewing(run_id, wait)

    def _sleep_renewing(self, run_id: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self._wait(min(left, self.lease / 3))
            self._renew(run_id)

    @staticmethod
    def _once(call: Callable[[], Any]) -> Any:
        """A status refresh: tried once; if Slack is busy, the next one shows newer news."""
        try:
            with at_once():
                return call()
        except (SlackApiError, SlackRequestError, OSError) as exc:
            log.debug("status refresh not sent (%s); the next one carries it", exc)
            return None


def _retry_after(exc: SlackApiError) -> float:
    headers = getattr(exc.response, "headers", None) or {}
    value = headers.get("Retry-After") or headers.get("retry-after") or 1
    try:
        return max(float(value), 0.1)
    except (TypeError, ValueError):
        return 1.0


def _thread_coming(run: Run, now: float) -> bool:
    """A scheduled run reaches a worker before its plan message is posted: its entries
    wait for the thread (bounded), instead of being said nowhere."""
    return run.requested_by.startswith("schedule:") and now - run.created_at < THREAD_GRACE

