"""Live thread updates for a run: one status message edited in place, plus announcements.

Executor listeners must be quick (they run under the executor's lock), so the listener only
records what happened: a host event is folded into the updater's own copy of the run
(``RunMirror``) without copying the whole run, which at 500 hosts would dominate. Two
sender threads per run do the Slack I/O, so announcements are never queued behind
rate-limited status edits: one posts failure replies, the rollback announcement (broadcast
to the channel) and the summary in order; the other edits the status message at most once
per ``interval`` seconds. Retries are the client's (``retries.py``): the final status edit
is sent ``patiently()``, waiting through a long rate-limit storm, and the summary waits for it
a bounded time, so the status reads final before the summary when Slack allows it.
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
from agents.plan.diff import diff_plans
from agents.plan.model import Plan
from agents.policy.rules import Policy
from agents.run.executor import Listener
from agents.run.mirror import RunMirror
from agents.run.record import Event, EventKind, GateCheck, Judgment, Phase, Run, StepStatus
from agents.run.results import step_output
from agents.store import Plans, Runs
from bot.slack import blocks as bk
from bot.slack.judgment_blocks import judged_blocks, judgment_blocks
from bot.slack.retries import patiently

log = logging.getLogger("deckhand.slack.thread")

Post = Callable[[], Any]


class ThreadUpdater:
    """Keeps one run's Slack thread current. An executor listener; ``close()`` at the end."""

    def __init__(self, client: WebClient, plan: Plan, *, channel: str, thread_ts: str,
                 interval: float = 1.0, status_ts: str | None = None,
                 policy: Policy | None = None, plan_ts: str | None = None,
                 trace_link: str | None = None):
        self.client, self.plan, self.policy = client, plan, policy
        self.trace_link = trace_link
        """DECKHAND_TRACE_URL: the summary links the run's trace in the team's tracing UI."""
        self.plan_ts = plan_ts
        self.final_wait = 15.0
        """Seconds the summary waits for the final status edit to land."""
        """The top-level plan message: it ends showing the outcome, for the channel."""
        self.channel, self.thread_ts = channel, thread_ts
        self.interval = interval
        self.status_ts = status_ts
        self._mirror = RunMirror()
        self._judgment_ts: dict[str, str] = {}
        """Each go/no-go message posted (by hold), edited once decided."""
        self._dirty = False
        self._finished = False
        self._outbox: deque[tuple[Post, bool]] = deque()
        """Announcements, each with whether it waits for the final status (the summary)."""
        self._wake = threading.Condition()
        self._final_sent = threading.Event()
        self._last_update = 0.0
        self._inherit = logcontext.inherit()  # the senders' log lines name the run too
        self._senders = [threading.Thread(target=target, daemon=True, name=f"{name}-{thread_ts}")
                         for target, name in ((self._status_loop, "slack-status"),
                                              (self._announce_loop, "slack-announce"))]
        for sender in self._senders:
            sender.start()

    # -- listener side (fast, under the executor's lock) --------------------------------------

    def __call__(self, event: Event, run: Run) -> None:
        if event.kind is EventKind.STEP_OUTPUT:
            return
        self._mirror(event, run)
        with self._wake:
            self._dirty = True
            if _announced(event):  # the senders keep it: a copy of its own
                self._queue_announcements(event, run.model_copy(deep=True))
            if event.kind is EventKind.RUN_FINISHED:
                self._finished = True
            self._wake.notify_all()

    def _queue_announcements(self, event: Event, run: Run) -> None:
        failed = event.kind is EventKind.STEP_FINISHED and event.status == StepStatus.FAILED
        if failed and event.step_id:
            state = run.states(event.phase)[event.step_id]
            self._announce(lambda: self._reply(bk.failure_blocks(event.step_id or "", state),
                                               f"{event.step_id} failed"))
        elif event.kind is EventKind.ROLLBACK_STARTED and event.phase is Phase.ROLLBACK:
            text = bk.rollback_text(run, self.plan)
            self._announce(lambda: self._reply([bk.section(text)], text, broadcast=True))
        elif event.kind is EventKind.REPLANNED and event.plan is not None:
            self._replanned(Plan.model_validate(event.plan), event, run)
        elif event.kind in JUDGMENT_EVENTS and event.judgment is not None:
            self._judgment(run.id, Judgment.model_validate(event.judgment))
        elif event.kind is EventKind.GATE_JUDGED and event.gate is not None:
            check = GateCheck.model_validate(event.gate)
            self._announce(lambda: self._reply(bk.gate_blocks(check), bk.gate_text(check)))
        elif event.kind is EventKind.RUN_FINISHED:
            self._queue_output(run)
            self._announce(lambda: self._reply(bk.summary_blocks(self.plan, run,
                                                                 trace_link=self.trace_link),
                                               bk.outcome_text(self.plan, run), broadcast=True),
                           after_final=True)
            self._announce(lambda: self._show_outcome(run))

    def _queue_output(self, run: Run) -> None:
        """A read-only run (status…) answers with its output, posted before the summary."""
        if not run.meta.get("read_only"):
            return
        output = step_output(run)
        blocks = bk.output_blocks(", ".join(s.id for s in self.plan.steps), output)
        self._announce(lambda: self._reply(blocks, output[:2000] or "(no output)"),
                       after_final=True)

    def _replanned(self, plan: Plan, event: Event, run: Run) -> None:
        """Show the revised plan and what changed; buttons when it needs approval."""
        diff, self.plan = diff_plans(self.plan, plan), plan
        approval = event.status == "needs_approval"
        note = (f"🔁 Replanned after {bk.shown(event.error or 'a failure', 300)}. "
                + ("It changes what runs on hosts, so it needs approval again."
                   if approval else "Only read-only steps changed: continuing."))
        if self.policy is None:
            self._announce(lambda: self._reply([bk.section(note)], note))
            return
        blocks = bk.plan_blocks(plan, run, self.policy, actions=approval, note=note, diff=diff)
        self._announce(lambda: self._reply(blocks, f"Replanned: version {plan.version}",
                                           broadcast=approval))

    def _judgment(self, run_id: str, held: Judgment) -> None:
        """Post a go/no-go with its buttons; once decided, edit it to say who chose what."""
        if held.decision is None:
            def ask() -> None:
                reply = self._reply(judgment_blocks(run_id, held),
                                    f"Go/no-go {held.where()}: Continue or Roll back?")
                self._judgment_ts[held.hold] = reply["ts"]
            self._announce(ask)
            return
        blocks, text = judged_blocks(run_id, held), f"Go/no-go {held.where()}: decided"

        def answer() -> Any:  # sent after ``ask`` (one sender, in order): its ts is known
            ts = self._judgment_ts.get(held.hold)
            if ts is None:
                return self._reply(blocks, text)
            return self.client.chat_update(channel=self.channel, ts=ts, blocks=blocks, text=text)
        self._announce(answer)

    def _announce(self, post: Post, *, after_final: bool = False) -> None:
        self._outbox.append((post, after_final))

    def close(self, timeout: float = 60.0) -> None:
        """Wait until everything queued (the final status and summary included) is sent."""
        with self._wake:
            self._finished = True
            self._wake.notify_all()
        deadline = time.monotonic() + timeout
        for sender in self._senders:
            sender.join(max(0.0, deadline - time.monotonic()))

    # -- senders (threads of their own) -------------------------------------------------------

    def _status_loop(self) -> None:
        """Edit the status message, coalesced; the final edit is retried until it lands."""
        self._inherit()
        while True:
            with self._wake:
                while not (self._dirty or self._finished):
                    self._wake.wait()
                due = self._last_update + self.interval - time.monotonic()
                if self._dirty and due > 0 and not self._finished:
                    self._wake.wait(due)  # coalesce: at most one edit per interval
                    continue
                final, dirty = self._finished, self._dirty
            if dirty:
                self._flush_status(final=final)
            with self._wake:
                done = final and not self._dirty
            if done:
                self._final_sent.set()
                return

    def _announce_loop(self) -> None:
        """Post announcements in order, never behind a status edit."""
        self._inherit()
        while True:
            with self._wake:
                while not (self._outbox or self._finished):
                    self._wake.wait()
                if not self._outbox:
                    return
                post, after_final = self._outbox.popleft()
            if after_final and not self._final_sent.wait(self.final_wait):
                log.warning("the final status edit is still being retried; summary goes first")
            self._safely(post)

    def _flush_status(self, *, final: bool) -> None:
        with self._wake:
            self._dirty = False
        snapshot = self._mirror.snapshot()
        if snapshot is None:
            return
        if final:  # the status people read afterwards: wait through a long storm
            with patiently():
                self._send_status(snapshot)
        else:
            self._send_status(snapshot)
        self._last_update = time.monotonic()

    def _send_status(self, run: Run) -> None:
        blocks = bk.status_blocks(self.plan, run)
        text = bk.outcome_text(self.plan, run)
        if self.status_ts is None:
            reply = self._safely(lambda: self.client.chat_postMessage(
                channel=self.channel, thread_ts=self.thread_ts, blocks=blocks, text=text))
            self.status_ts = reply["ts"] if reply else None
        else:
            status_ts = self.status_ts
            self._safely(lambda: self.client.chat_update(
                channel=self.channel, ts=status_ts, blocks=blocks, text=text))

    def _show_outcome(self, run: Run) -> None:
        """Edit the top-level plan message so the channel sees how the run ended."""
        if self.plan_ts is None or self.policy is None:
            return
        blocks = bk.plan_blocks(self.plan, run, self.policy, actions=False,
                                note=bk.outcome_text(self.plan, run))
        self.client.chat_update(channel=self.channel, ts=self.plan_ts, blocks=blocks,
                                text=f"Plan: {bk.shown(self.plan.goal, 300)}")

    def _reply(self, blocks: list[bk.Block], text: str, *, broadcast: bool = False) -> Any:
        return self.client.chat_postMessage(channel=self.channel, thread_ts=self.thread_ts,
                                            blocks=blocks, text=text, reply_broadcast=broadcast)

    def _safely(self, post: Post) -> Any:
        """Send once (the client already retried what can be retried); a failure is logged,
        never raised: a deploy never waits on Slack, nor fails because of it."""
        try:
            return post()
        except SlackApiError as exc:
            log.error("Slack refused an update (%s)", exc.response.get("error"))
        except OSError as exc:
            log.error("cannot reach Slack (%s)", exc)
        return None


def _announced(event: Event) -> bool:
    """Whether the thread gets a reply for this event (see _queue_announcements)."""
    if event.kind is EventKind.STEP_FINISHED:
        return event.status == StepStatus.FAILED
    return event.kind in (EventKind.ROLLBACK_STARTED, EventKind.REPLANNED,
                          EventKind.GATE_JUDGED, EventKind.RUN_FINISHED, *JUDGMENT_EVENTS)


JUDGMENT_EVENTS = (EventKind.JUDGMENT_AWAITED, EventKind.JUDGMENT_DECIDED)


def thread_listener_factory(client: WebClient, *, runs: Runs, plans: Plans,
                            interval: float = 1.0, policy: Policy | None = None,
                            trace_link: str | None = None,
                            ) -> Callable[[Run], Listener | None]:
    """For workers: a ThreadUpdater for each run that was requested from Slack."""
    def factory(run: Run) -> Listener | None:
        slack = run.meta.get("slack") or _posted_soon(runs, run)
        if not slack:
            return None
        plan = plans.get(run.plan_id, run.plan_version)
        return ThreadUpdater(client, plan, channel=slack["channel"],
                             thread_ts=slack["thread_ts"], interval=interval, policy=policy,
                             plan_ts=slack.get("plan_ts"), trace_link=trace_link)
    return factory


def _posted_soon(runs: Runs, run: Run, timeout: float = 5.0) -> dict[str, str] | None:
    """An unattended scheduled run can reach a worker before its plan message is posted:
    wait (bounded) for the poster to record where the thread is."""
    if not run.requested_by.startswith("schedule:"):
        return None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        slack = runs.get(run.id).meta.get("slack")
        if slack:
            return dict(slack)
        time.sleep(0.05)
    return None
