"""Live thread updates for a run: one status message edited in place, plus announcements.

Executor listeners must be quick (they run under the executor's lock), so the listener only
records what happened; a sender thread per run does all Slack I/O in order: failure
replies, the rollback announcement (broadcast to the channel), and the status message,
which it edits at most once per ``interval`` seconds. The final status and the summary are
always sent, through Slack's rate limits (the client honours Retry-After).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from agents import logcontext
from agents.executor import Listener
from agents.ids import short_id
from agents.plan import Plan
from agents.plan_diff import diff_plans
from agents.policy import Policy
from agents.runs import Event, EventKind, Phase, Run, StepStatus
from agents.store import Store
from bot.slack import blocks as bk

log = logging.getLogger("deckhand.slack.thread")

Post = Callable[[], Any]


class ThreadUpdater:
    """Keeps one run's Slack thread current. An executor listener; ``close()`` at the end."""

    def __init__(self, client: WebClient, plan: Plan, *, channel: str, thread_ts: str,
                 interval: float = 1.0, status_ts: str | None = None,
                 policy: Policy | None = None):
        self.client, self.plan, self.policy = client, plan, policy
        self.channel, self.thread_ts = channel, thread_ts
        self.interval = interval
        self.status_ts = status_ts
        self._snapshot: Run | None = None
        self._dirty = False
        self._finished = False
        self._outbox: deque[Post] = deque()
        self._wake = threading.Condition()
        self._last_update = 0.0
        self._inherit = logcontext.inherit()  # the sender's log lines name the run too
        self._sender = threading.Thread(target=self._send_loop, daemon=True,
                                        name=f"slack-thread-{thread_ts}")
        self._sender.start()

    # -- listener side (fast, under the executor's lock) --------------------------------------

    def __call__(self, event: Event, run: Run) -> None:
        if event.kind is EventKind.STEP_OUTPUT:
            return
        snapshot = run.model_copy(deep=True)
        with self._wake:
            self._snapshot, self._dirty = snapshot, True
            self._queue_announcements(event, snapshot)
            if event.kind is EventKind.RUN_FINISHED:
                self._finished = True
            self._wake.notify()

    def _queue_announcements(self, event: Event, run: Run) -> None:
        failed = event.kind is EventKind.STEP_FINISHED and event.status == StepStatus.FAILED
        if failed and event.step_id:
            state = run.states(event.phase)[event.step_id]
            self._outbox.append(lambda: self._reply(bk.failure_blocks(event.step_id or "", state),
                                                    f"{event.step_id} failed"))
        elif event.kind is EventKind.ROLLBACK_STARTED and event.phase is Phase.ROLLBACK:
            text = bk.rollback_text(run, self.plan)
            self._outbox.append(lambda: self._reply([bk.section(text)], text, broadcast=True))
        elif event.kind is EventKind.REPLANNED and event.plan is not None:
            self._replanned(Plan.model_validate(event.plan), event, run)
        elif event.kind is EventKind.RUN_FINISHED:
            self._outbox.append(lambda: self._reply(bk.summary_blocks(self.plan, run),
                                                    f"run {short_id(run.id)}: {run.status.value}"))

    def _replanned(self, plan: Plan, event: Event, run: Run) -> None:
        """Show the revised plan and what changed; buttons when it needs approval."""
        diff, self.plan = diff_plans(self.plan, plan), plan
        approval = event.status == "needs_approval"
        note = (f"🔁 Replanned after {bk.trim(event.error or 'a failure', 300)}. "
                + ("It changes what runs on hosts, so it needs approval again."
                   if approval else "Only read-only steps changed: continuing."))
        if self.policy is None:
            self._outbox.append(lambda: self._reply([bk.section(note)], note))
            return
        blocks = bk.plan_blocks(plan, run, self.policy, actions=approval, note=note, diff=diff)
        self._outbox.append(lambda: self._reply(blocks, f"Replanned: version {plan.version}",
                                                broadcast=approval))

    def close(self, timeout: float = 60.0) -> None:
        """Wait until everything queued (the final status and summary included) is sent."""
        with self._wake:
            self._finished = True
            self._wake.notify()
        self._sender.join(timeout)

    # -- sender side (its own thread) -----------------------------------------------------------

    def _send_loop(self) -> None:
        self._inherit()
        while True:
            with self._wake:
                while not (self._outbox or self._dirty or self._finished):
                    self._wake.wait()
                final_edit = self._finished and self._dirty
            if final_edit:  # the status reaches its final state before the summary is posted
                self._flush_status()
            self._drain_outbox()  # announcements go out first, in order
            with self._wake:
                dirty, finished = self._dirty, self._finished
                due = self._last_update + self.interval - time.monotonic()
                if dirty and due > 0 and not finished:
                    self._wake.wait(due)  # coalesce: at most one edit per interval
                    continue
            if dirty:
                self._flush_status()
            with self._wake:
                if self._finished and not self._outbox and not self._dirty:
                    return

    def _flush_status(self) -> None:
        with self._wake:
            snapshot, self._dirty = self._snapshot, False
        if snapshot is not None:
            self._send_status(snapshot)
            self._last_update = time.monotonic()

    def _drain_outbox(self) -> None:
        while True:
            with self._wake:
                if not self._outbox:
                    return
                post = self._outbox.popleft()
            self._safely(post)

    def _send_status(self, run: Run) -> None:
        blocks = bk.status_blocks(self.plan, run)
        text = f"run {short_id(run.id)}: {run.status.value}"
        if self.status_ts is None:
            reply = self._safely(lambda: self.client.chat_postMessage(
                channel=self.channel, thread_ts=self.thread_ts, blocks=blocks, text=text))
            self.status_ts = reply["ts"] if reply else None
        else:
            status_ts = self.status_ts
            self._safely(lambda: self.client.chat_update(
                channel=self.channel, ts=status_ts, blocks=blocks, text=text))

    def _reply(self, blocks: list[bk.Block], text: str, *, broadcast: bool = False) -> Any:
        return self.client.chat_postMessage(channel=self.channel, thread_ts=self.thread_ts,
                                            blocks=blocks, text=text, reply_broadcast=broadcast)

    def _safely(self, post: Post) -> Any:
        """Send, retrying transient failures a few times; a deploy never waits on Slack forever."""
        for attempt in range(3):
            try:
                return post()
            except SlackApiError as exc:
                log.error("Slack refused an update (%s), attempt %d",
                          exc.response.get("error"), attempt + 1)
            except OSError as exc:
                log.error("cannot reach Slack (%s), attempt %d", exc, attempt + 1)
            time.sleep(0.5 * (attempt + 1))
        return None


def thread_listener_factory(client: WebClient, store: Store, *, interval: float = 1.0,
                            policy: Policy | None = None) -> Callable[[Run], Listener | None]:
    """For workers: a ThreadUpdater for each run that was requested from Slack."""
    def factory(run: Run) -> Listener | None:
        slack = run.meta.get("slack") or _posted_soon(store, run)
        if not slack:
            return None
        plan = store.plan(run.plan_id, run.plan_version)
        return ThreadUpdater(client, plan, channel=slack["channel"],
                             thread_ts=slack["thread_ts"], interval=interval, policy=policy)
    return factory


def _posted_soon(store: Store, run: Run, timeout: float = 5.0) -> dict[str, str] | None:
    """An unattended scheduled run can reach a worker before its plan message is posted:
    wait (bounded) for the poster to record where the thread is."""
    if not run.requested_by.startswith("schedule:"):
        return None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        slack = store.run(run.id).meta.get("slack")
        if slack:
            return dict(slack)
        time.sleep(0.05)
    return None
