"""What a run's Slack thread shows, one feed entry at a time.

The run's feed (``agents.store.run_feed``) holds what the run has to say: its step- and
run-level events, as the worker that executes it recorded them, and the lines faces add
(who approved, paused, stopped). A ``ThreadWriter`` turns one entry into Slack calls —
failure replies, the rollback announcement (broadcast to the channel), gate figures, go/no-go
messages and their end, the summary — and keeps the one status message current from the
run's record, which is the truth. Whatever it must remember to carry on (the status
message's ts, each go/no-go message's ts, how far a run's ending got) it hands to
``remember`` as soon as Slack took the call, so the relay that carries the run on after a
restart (``relay.py``) edits those messages instead of posting them again.

Every Slack call goes through ``send``: the relay's, which waits through rate limits and
outages until Slack takes it. Nothing here drops what a run says.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from typing import Any

from slack_sdk import WebClient

from agents.plan.diff import PlanDiff, diff_plans
from agents.plan.model import Plan
from agents.policy.rules import Policy
from agents.run.record import Event, EventKind, GateCheck, Judgment, Phase, Run, StepStatus
from agents.run.results import step_output
from agents.store import FeedEntry, Plans
from bot.slack import blocks as bk
from bot.slack.judgment_blocks import ended_blocks, judged_blocks, judgment_blocks
from bot.slack.timeline_upload import TimelineUploader

Send = Callable[[Callable[[], Any]], Any]
"""Makes one Slack call land (the relay's: retried through 429s and outages)."""
Remember = Callable[[dict[str, str]], None]
"""Persists what the thread learnt (the relay's state in Redis)."""

NOTIFY_ON = {EventKind.RUN_STARTED, EventKind.STEP_FINISHED, EventKind.ROLLBACK_STARTED,
             EventKind.RUN_FINISHED, EventKind.RUN_PAUSED, EventKind.RUN_RESUMED,
             EventKind.JUDGMENT_AWAITED, EventKind.JUDGMENT_DECIDED}
"""Events after which the App Home of people the run concerns is refreshed."""


class ThreadWriter:
    """One run's thread: performs its feed entries and keeps its status message current."""

    def __init__(self, client: WebClient, *, plans: Plans, policy: Callable[[str | None], Policy],
                 fields: dict[str, str], send: Send, remember: Remember,
                 patient: Send | None = None,
                 trace_link: str | None = None,
                 changed: Callable[[Run], None] = lambda run: None,
                 timeline: Callable[[bool | None], None] | None = None):
        self.client, self.plans, self.policy = client, plans, policy
        self.fields = fields
        """What the thread remembers (shared with the relay's state; see ``_remember``)."""
        self.send, self._persist = send, remember
        self.patient = patient or send
        """``send`` with a bound: for the final status before the summary."""
        self.trace_link, self.changed, self.timeline = trace_link, changed, timeline

    @property
    def started(self) -> bool:
        return "started" in self.fields

    @property
    def finished(self) -> bool:
        return "finished" in self.fields

    # -- entries -------------------------------------------------------------------------------

    def perform(self, entry: FeedEntry, run: Run, slack: dict[str, str]) -> None:
        """Say ``entry`` in the thread at ``slack`` (channel, thread_ts, plan_ts)."""
        if entry.kind == "say":
            self._reply(slack, None, str(entry.data["text"]),
                        broadcast=bool(entry.data.get("broadcast")))
        elif entry.kind == "plan":
            self._note(actions=bool(entry.data.get("actions")), note=entry.data.get("note"))
        elif entry.kind == "event":
            event = Event.model_validate(entry.data)
            self._event(event, run, slack)
            if event.kind in NOTIFY_ON:
                self.changed(run)

    def sync(self, run: Run, slack: dict[str, str], send: Send) -> bool:
        """Bring the messages that show state — the status message and the top-level plan
        message — up to date with ``send`` (tried once each: a newer state follows, and
        nothing said in order waits behind them). Whether both show what they should."""
        if self.started:
            self.status(run, slack, final=self.finished, send=send)
        note = self.fields.get("plan_note")
        if note and note != self.fields.get("plan_note_shown") and "plan_ts" in slack:
            wanted = json.loads(note)
            plan = self._plan(run)
            blocks = bk.plan_blocks(plan, run, self.policy(run.service), actions=wanted["actions"],
                                    note=wanted["note"], diff=previous_diff(self.plans, run))
            if self._update(send, slack, slack["plan_ts"], blocks,
                            f"Plan: {bk.shown(plan.goal, 300)}") is not None:
                self._remember({"plan_note_shown": note})
        return self.shows_all()

    def shows_all(self) -> bool:
        """Whether the state messages show the latest state (the status final once ended)."""
        status_done = not self.finished or not self.started or "status_final" in self.fields
        return status_done and self.fields.get("plan_note") == \
            self.fields.get("plan_note_shown", self.fields.get("plan_note"))

    def _event(self, event: Event, run: Run, slack: dict[str, str]) -> None:
        kind = event.kind
        if kind is EventKind.RUN_STARTED:
            self._remember({"started": "1"})
            self.status(run, slack)
        elif kind is EventKind.STEP_FINISHED and event.status == StepStatus.FAILED:
            state = run.states(event.phase).get(event.step_id or "")
            if state is not None:
                self._reply(slack, bk.failure_blocks(state.id, state), f"{state.id} failed")
        elif kind is EventKind.ROLLBACK_STARTED and event.phase is Phase.ROLLBACK:
            text = bk.rollback_text(run, self._plan(run))
            self._reply(slack, [bk.section(text)], text, broadcast=True)
        elif kind is EventKind.REPLANNED and event.plan is not None:
            self._replanned(Plan.model_validate(event.plan), event, run, slack)
        elif kind is EventKind.GATE_JUDGED and event.gate is not None:
            check = GateCheck.model_validate(event.gate)
            self._reply(slack, bk.gate_blocks(check), bk.gate_text(check))
        elif kind in (EventKind.JUDGMENT_AWAITED, EventKind.JUDGMENT_DECIDED) \
                and event.judgment is not None:
            self._judgment(run.id, Judgment.model_validate(event.judgment), slack)
        elif kind is EventKind.RUN_FINISHED:
            self._finished(run, slack)

    def _replanned(self, plan: Plan, event: Event, run: Run, slack: dict[str, str]) -> None:
        """Show the revised plan and what changed; buttons when it needs approval."""
        before = self._plan_before(run, plan)
        approval = event.status == "needs_approval"
        note = (f"🔁 Replanned after {bk.shown(event.error or 'a failure', 300)}. "
                + ("It changes what runs on hosts, so it needs approval again."
                   if approval else "Only read-only steps changed: continuing."))
        diff = diff_plans(before, plan) if before is not None else None
        blocks = bk.plan_blocks(plan, run, self.policy(run.service), actions=approval, note=note,
                                diff=diff)
        self._reply(slack, blocks, f"Replanned: version {plan.version}", broadcast=approval)

    def _judgment(self, run_id: str, held: Judgment, slack: dict[str, str]) -> None:
        """Post a go/no-go with its buttons (once: a worker that takes the run over holds it
        again, and its message is edited, not posted twice); once decided, say who chose."""
        field = f"hold:{held.hold}"
        if held.decision is None:
            blocks, text = judgment_blocks(run_id, held), \
                f"Go/no-go {held.where()}: Continue or Roll back?"
        else:
            blocks, text = judged_blocks(run_id, held), f"Go/no-go {held.where()}: decided"
        ts = self.fields.get(field)
        if ts is not None:
            self._edit(slack, ts, blocks, text)
        elif (reply := self._reply(slack, blocks, text)) is not None:
            ts = reply["ts"]
        if ts is not None:
            self._remember({field: ts, f"{field}:open": "" if held.decision else "1"})

    def _finished(self, run: Run, slack: dict[str, str]) -> None:
        """The run's ending, each part remembered once done: a relay that takes over half
        way through carries on from the next part."""
        plan = self._plan(run)
        parts: list[tuple[str, Callable[[], object]]] = [
            # the status reads final before the summary when Slack allows it (a bounded
            # wait); else the relay keeps sending it after, until it lands
            ("end:status", lambda: self.status(run, slack, final=True, send=self.patient)),
            ("end:output", lambda: self._output(run, plan, slack)),
            ("end:summary", lambda: self._reply(
                slack, bk.summary_blocks(plan, run, trace_link=self.trace_link),
                bk.outcome_text(plan, run), broadcast=True)),
            ("end:outcome", lambda: self._note(actions=False, note=bk.outcome_text(plan, run),
                                               outcome=True)),
            ("end:holds", lambda: self._end_holds(run, slack)),
            ("end:timeline", lambda: self._upload_timeline(run, slack))]
        for name, part in parts:
            if name not in self.fields:
                part()
                self._remember({name: "1"})
        self._remember({"finished": "1"})

    def _output(self, run: Run, plan: Plan, slack: dict[str, str]) -> None:
        """A read-only run (status…) answers with its output, posted before the summary."""
        if not run.meta.get("read_only"):
            return
        output = step_output(run)
        blocks = bk.output_blocks(", ".join(s.id for s in plan.steps), output)
        self._reply(slack, blocks, output[:2000] or "(no output)")

    def _end_holds(self, run: Run, slack: dict[str, str]) -> None:
        """A go/no-go message still showing its buttons when the run ended (a stop, a
        rollback, a takeover) says how it ended instead: no button outlives its hold."""
        for field, value in sorted(self.fields.items()):
            if not (field.startswith("hold:") and field.endswith(":open") and value):
                continue
            hold = field.removeprefix("hold:").removesuffix(":open")
            held = _judgment_of(run, hold)
            if held is not None:
                self._edit(slack, self.fields[f"hold:{hold}"], ended_blocks(run, held),
                           f"Go/no-go {held.where()}: ended")
            self._remember({field: ""})

    def _upload_timeline(self, run: Run, slack: dict[str, str]) -> None:
        """An afterthought: drawn and uploaded in the background, never retried."""
        if self.timeline is None:
            return
        uploader = TimelineUploader(self.client, plans=self.plans, channel=slack["channel"],
                                    thread_ts=slack["thread_ts"], outcome=self.timeline)
        uploader(Event(kind=EventKind.RUN_FINISHED, run_id=run.id), run)
        uploader.close()

    # -- the status message --------------------------------------------------------------------

    def status(self, run: Run, slack: dict[str, str], *, final: bool = False,
               send: Send | None = None) -> None:
        """Show ``run`` as it stands in the status message (posted the first time, edited
        after); nothing is sent when it already shows exactly that."""
        plan = self._plan(run)
        blocks, text = bk.status_blocks(plan, run), bk.outcome_text(plan, run)
        digest = hashlib.sha1(json.dumps(blocks, sort_keys=True).encode()).hexdigest()
        if self.fields.get("status_digest") == digest:
            return
        send = send or self.send
        ts = self.fields.get("status_ts")
        if ts is None:
            reply = send(lambda: self.client.chat_postMessage(
                channel=slack["channel"], thread_ts=slack["thread_ts"], blocks=blocks,
                text=text))
            ts = reply["ts"] if reply is not None else None
        else:
            ts = self._update(send, slack, ts, blocks, text)
        if ts is None:  # not sent: the next refresh (or the final one) tries again
            return
        self._remember({"status_ts": ts, "status_digest": digest,
                        **({"status_final": "1"} if final else {})})

    def _update(self, send: Send, slack: dict[str, str], ts: str, blocks: list[bk.Block],
                text: str) -> str | None:
        """``ts`` once the edit landed; None if it was not sent."""
        reply = send(lambda: self.client.chat_update(channel=slack["channel"], ts=ts,
                                                     blocks=blocks, text=text))
        return None if reply is None else ts

    # -- Slack calls ---------------------------------------------------------------------------

    def _note(self, *, actions: bool, note: str | None, outcome: bool = False) -> None:
        """What the top-level plan message should show (``sync`` shows it); once it shows
        the run's outcome, only that (a late "approved" line never hides how it ended)."""
        if "end:outcome" in self.fields and not outcome:
            return
        self._remember({"plan_note": json.dumps({"actions": actions, "note": note})})

    def _reply(self, slack: dict[str, str], blocks: list[bk.Block] | None, text: str, *,
               broadcast: bool = False) -> Any:
        extra: dict[str, Any] = {"blocks": blocks} if blocks is not None else {}
        return self.send(lambda: self.client.chat_postMessage(
            channel=slack["channel"], thread_ts=slack["thread_ts"], text=text,
            reply_broadcast=broadcast, **extra))

    def _edit(self, slack: dict[str, str], ts: str, blocks: list[bk.Block], text: str) -> None:
        self.send(lambda: self.client.chat_update(channel=slack["channel"], ts=ts,
                                                  blocks=blocks, text=text))

    def _remember(self, fields: dict[str, str]) -> None:
        self.fields.update(fields)
        self._persist(fields)

    def _plan(self, run: Run) -> Plan:
        return self.plans.get(run.plan_id, run.plan_version)

    def _plan_before(self, run: Run, plan: Plan) -> Plan | None:
        versions = [v for v in run.plan_versions if v < plan.version]
        return self.plans.get(run.plan_id, versions[-1]) if versions else None


def previous_diff(plans: Plans, run: Run) -> PlanDiff | None:
    """How the run's plan differs from the version before it (None for the first)."""
    versions = run.plan_versions
    if run.plan_version not in versions or versions.index(run.plan_version) == 0:
        return None
    previous = versions[versions.index(run.plan_version) - 1]
    return diff_plans(plans.get(run.plan_id, previous), plans.get(run.plan_id, run.plan_version))


def _judgment_of(run: Run, hold: str) -> Judgment | None:
    """The run's go/no-go ``hold`` as the record has it (the one awaited, or decided)."""
    return next((held for held in run.judgments if held.hold == hold), None)


def serialized() -> Callable[[Callable[[], Any]], Any]:
    """A ``send`` that calls at once (tests driving a writer without a relay)."""
    lock = threading.Lock()

    def send(call: Callable[[], Any]) -> Any:
        with lock:
            return call()
    return send
