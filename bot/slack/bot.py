"""What the Slack listeners hand off to: propose, approve, revise, reject, cancel.

Listeners parse, authorize (through the store's atomic checks) and ack; these functions do
the slow part after the ack. Every user-facing failure is a DeckhandError whose message
says what to do; the app's error handler shows anything else.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from slack_bolt import Respond
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from agents.engine.control import Control
from agents.engine.desk import RunDesk
from agents.engine.manual_locking import said_in_chat
from agents.engine.manual_locking import where_can_i_deploy as outlook
from agents.errors import ServiceNotChosen, WhichService
from agents.faces import Face
from agents.ids import new_id, short_id
from agents.plan.diff import PlanDiff
from agents.plan.dryrun import verdict
from agents.plan.model import Plan
from agents.policy.approvals import approvals_needed
from agents.policy.rules import Policy
from agents.run.record import Run, RunStatus, Verdict
from agents.said import Said
from agents.services import Services
from agents.store import Ask, Store
from bot.slack import blocks as bk
from bot.slack.retries import at_once, patiently
from bot.slack.service_blocks import which_blocks
from bot.slack.thread import previous_diff
from bot.slack.work import Tell, WorkQueue
from tools.errors import DeckhandError

T = TypeVar("T")

log = logging.getLogger("deckhand.slack")

READ_ONLY = "👀 Read-only: running now, no approval needed."


class PlanNotPosted(DeckhandError):
    """Slack would not take the plan message; the run was closed."""


@dataclass
class Directory:
    """Which Slack user groups a user is in (cached; needs ``usergroups:read``).

    A failed lookup (a 429, a network error) keeps the last good membership and is retried
    after ``retry`` seconds, so one rate-limited call never locks group approvers out. While
    one thread reloads, others read the last good membership instead of waiting.
    """

    client: WebClient
    ttl: float = 300.0
    retry: float = 15.0
    _groups: dict[str, list[str]] = field(default_factory=dict)
    _next: float = 0.0
    _loaded: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def groups_of(self, user: str) -> list[str]:
        if time.monotonic() >= self._next and self._lock.acquire(blocking=not self._loaded):
            try:
                if time.monotonic() >= self._next:
                    self._refresh()
            finally:
                self._lock.release()
        return self._groups.get(user, [])

    def _refresh(self) -> None:
        try:
            self._groups = self._load()
        except SlackApiError as exc:
            log.warning("cannot list user groups (%s); keeping the last membership, retrying "
                        "in %.0f s", exc.response.get("error"), self.retry)
            self._next = time.monotonic() + self.retry
            return
        self._loaded = True
        self._next = time.monotonic() + self.ttl

    def _load(self) -> dict[str, list[str]]:
        reply = self.client.usergroups_list(include_users=True)
        members: dict[str, list[str]] = {}
        groups: list[dict[str, Any]] = reply.get("usergroups", [])
        for group in groups:
            users: list[str] = group.get("users", [])
            for user in users:
                members.setdefault(user, []).append(group["id"])
        return members


class SchedulerHandle(Protocol):
    """What the bot needs of the replica's scheduler (bot.scheduler.Scheduler)."""

    def start(self) -> None: ...

    def reload(self) -> None: ...

    def shutdown(self) -> None: ...


class HomeHandle(Protocol):
    """What the bot needs of the App Home tab (bot.slack.home.HomeTab)."""

    def opened(self, user: str) -> None: ...

    def changed(self, run: Run) -> None: ...


@dataclass
class Bot:
    """Everything the listeners need: services, the Web API client, the user directory."""

    services: Services
    client: WebClient
    directory: Directory
    scheduler: SchedulerHandle | None = None
    """The replica's scheduler, reloaded after schedule commands."""
    home: HomeHandle | None = None
    """The App Home tab, set by bot.slack.listeners.home."""
    watchers: list[Callable[[Run], None]] = field(default_factory=list)
    """Told about every run change (e.g. the App Home); must return quickly."""
    work: WorkQueue = field(default_factory=WorkQueue)
    """Where listeners hand off everything that calls the Web API (never Bolt's threads)."""
    stopping: threading.Event = field(default_factory=threading.Event)
    """Set when the runtime stops: the bot's own watcher threads end with it."""

    @property
    def desk(self) -> RunDesk:
        """The one door for the run verbs (``agents.engine.desk``): each run is judged by
        its own service's policy, whichever service this bundle is focused on."""
        return RunDesk(self.services, rules=self.policy_of)

    def desk_of(self, service: str | None) -> RunDesk:
        """The desk focused on ``service`` (its catalog and inventory check a plan)."""
        return RunDesk(self.of(service), rules=self.policy_of)

    def of(self, service: str | None) -> Services:
        """The services focused on the service a run or plan names (None: the legacy one);
        ServiceUnknown, never another service's config, for one this process lacks."""
        return self.services.for_record(service, what="this run")

    def policy_of(self, service: str | None) -> Policy:
        """The rules (every layer) of the service a run or plan names, as in force now."""
        return self.services.org.service_of(service).policy

    @property
    def store(self) -> Store:
        # The whole Store: the Slack face drives a run's approval life (plan saved, run
        # created and audited, approved, modified, rejected, judged: runs, plans, audit,
        # judgments) and its listeners and Home read history, schedules, dedupe through it.
        return self.services.store

    def open_modal(self, trigger_id: str, view: dict[str, Any], tell: Tell) -> None:
        """Open a modal now or say why not: a trigger expires 3 s after the click, so a 429
        is not waited out (the client's Retry-After handler would outlive it); the user is
        told through ``tell`` (the response_url, which Slack does not rate-limit)."""
        try:
            with at_once():
                self.client.views_open(trigger_id=trigger_id, view=view)
        except SlackApiError as exc:
            if exc.response.status_code != 429:
                raise
            tell("Slack is rate-limiting deckhand right now, so the form could not open (a "
                 "click's form must open within 3 seconds). Nothing changed; click again in "
                 "a minute.")

    def changed(self, run: Run) -> None:
        """Tell the watchers that ``run`` changed (approved, rejected, progressed, …)."""
        for watcher in self.watchers:
            watcher(run)

    # -- /deploy ----------------------------------------------------------------------------

    def service_for(self, request: str, *, channel: str, service: str | None = None
                    ) -> Services:
        """The services focused on the service ``request`` names, else ``service`` (the
        asker's choice), else ``channel``'s default, else the only one. Raised before
        anything is planned: ServiceNotChosen (an unknown or second name, listing the
        known ones), WhichService (nothing says which)."""
        if service is not None:
            return self.services.for_request(request, given=service, given_by="your choice")[0]
        try:
            return self.services.for_request(request)[0]
        except WhichService:
            default = self.services.org.channels.get(channel)
            if default is None:
                raise
            return self.services.for_request(request, given=default,
                                             given_by="this channel's default")[0]

    def ask_which(self, which: WhichService, *, request: str, user: str, channel: str,
                  break_glass: str | None = None, dry_run: bool = False) -> Ask:
        """Keep ``request`` under ``ask:ID`` and ask ``user`` (privately) which service it
        is for: a button each (their owned services first), or a menu when many."""
        owned = self.services.org.index.owned_by(user, self.directory.groups_of(user))
        names = [*[n for n in owned if n in which.names],
                 *[n for n in which.names if n not in owned]]
        ask = Ask(id=new_id("ask"), user=user, channel=channel, request=request,
                  break_glass=break_glass, dry_run=dry_run, services=names)
        self.store.asks.put(ask)
        self.client.chat_postEphemeral(channel=channel, user=user,
                                       text=f"Which service? ({', '.join(names[:20])})",
                                       blocks=which_blocks(ask.id, request, names))
        return ask

    def choose(self, ask_id: str, service: str, *, user: str) -> Run | None:
        """``user`` chose ``service`` for the request they were asked about: plan it for
        that service now. AskNotYours (nothing taken) for anyone but the asker; NotFound
        once chosen or expired."""
        ask = self.store.asks.take(ask_id, user=user)
        if service not in ask.services:
            raise ServiceNotChosen(f"{service!r} was not offered for this request; known "
                                   f"services: {', '.join(ask.services)}")
        if ask.dry_run:
            return self.dry_run(ask.request, user=user, channel=ask.channel, service=service)
        return self.propose(ask.request, user=user, channel=ask.channel,
                            break_glass=ask.break_glass, service=service)

    def propose(self, request: str, *, user: str, channel: str,
                break_glass: str | None = None, service: str | None = None,
                ask: bool = True) -> Run | None:
        """Plan ``request`` for its service, store it, and post it with Approve / Modify /
        Reject. When nothing says which service, nothing is planned: ``user`` is asked
        (None is returned), or WhichService is raised when ``ask`` is False."""
        try:
            services = self.service_for(request, channel=channel, service=service)
        except WhichService as which:
            if not ask:
                raise
            self.ask_which(which, request=request, user=user, channel=channel,
                           break_glass=break_glass)
            return None
        plan = services.make_plan(request, requested_by=user, face="slack",
                                  break_glass=break_glass)
        if services.is_read_only(plan):  # nothing to approve: post it, then run it
            return services.queue_read_only(plan, user=user, before_enqueue=lambda run:
                                            self.post_plan(plan, run, channel=channel,
                                                           actions=False, note=READ_ONLY))
        run = RunDesk(services, rules=self.policy_of).propose(
            plan, user=user, face=Face.SLACK, break_glass=break_glass, request=request)
        note = f"🚨 {bk.escape(services.break_glass_note(plan, break_glass))}" \
            if break_glass else None
        try:
            with patiently():  # the plan people will approve must land
                return self.post_plan(plan, run, channel=channel, note=note)
        except SlackApiError as exc:
            raise self._unposted(run, user, exc) from exc

    def _unposted(self, run: Run, user: str, exc: SlackApiError) -> PlanNotPosted:
        """Close a run whose plan could not be posted: nobody could ever approve it."""
        error = str(exc.response.get("error", "unknown"))
        self.desk.close(run.id, RunStatus.EXPIRED, actor="deckhand", action="plan_not_posted",
                        reason=f"the plan could not be posted to Slack ({error})",
                        expect={RunStatus.AWAITING_APPROVAL}, face=Face.SLACK, error=error,
                        requested_by=user)
        return PlanNotPosted(f"Slack refused the plan message ({error}), so run `{run.id}` "
                             f"was closed. Try again in a minute.")

    def dry_run(self, request: str, *, user: str, channel: str,
                service: str | None = None) -> Run | None:
        """Plan ``request``, post it without buttons, run its checks, reply with what they
        say (for its service: when nothing says which, ``user`` is asked and None returned)."""
        try:
            services = self.service_for(request, channel=channel, service=service)
        except WhichService as which:
            self.ask_which(which, request=request, user=user, channel=channel, dry_run=True)
            return None
        plan = services.make_plan(request, requested_by=user, face="slack")
        blocks = bk.plan_blocks(plan, Run.for_plan(plan, services.targets(plan)),
                                services.config.policy, actions=False,
                                note="🧪 Dry run: each step runs its tool's check; nothing "
                                     "will change.")
        posted = self.client.chat_postMessage(channel=channel, blocks=blocks,
                                              text=f"Dry run: {plan.goal}")
        run, dry = services.dry_run(plan, user=user)
        self.client.chat_postMessage(channel=channel, thread_ts=posted["ts"],
                                     blocks=bk.dry_run_blocks(dry.plan, run, dry.unchecked,
                                                              dry.nothing_to_check()),
                                     text=verdict(run.status.value, checked=len(run.steps),
                                                  unchecked=dry.unchecked))
        return run

    def post_plan(self, plan: Plan, run: Run, *, channel: str, actions: bool = True,
                  note: str | None = None, diff: PlanDiff | None = None) -> Run:
        """Post ``plan`` (with buttons unless ``actions`` is False) and remember where."""
        changes = bk.escape("\n".join(self.of(plan.service).changelog(plan)))
        note = "\n".join(part for part in (note, changes) if part) or None
        blocks = bk.plan_blocks(plan, run, self.policy_of(plan.service), actions=actions,
                                note=note, diff=diff)
        reply = self.client.chat_postMessage(
            channel=channel, text=f"Plan: {bk.shown(plan.goal, 300)}", blocks=blocks)
        slack = {"channel": reply["channel"], "thread_ts": reply["ts"], "plan_ts": reply["ts"]}
        run = self.desk.posted(run.id, "slack", **slack)
        self.changed(run)
        return run

    # -- locks by hand ----------------------------------------------------------------------

    def in_channel(self, channel: str | None) -> Services:
        """The services focused on ``channel``'s default service, if it has one (else as
        they are: the only service, or WhichService listing them where one is needed)."""
        default = self.services.org.channels.get(channel or "")
        return self.services.focus(default) if default else self.services

    def lock_by_hand(self, words: list[str], *, user: str, channel: str | None = None) -> str:
        """``lock ENV --reason …`` / ``unlock ENV`` as said in Slack: what to tell the channel
        (escaped; ManualLockRefused says why not, audited); in the channel's service."""
        said = said_in_chat(self.in_channel(channel), words, user=user,
                            groups=self.directory.groups_of(user), face="slack")
        return bk.escape(said)

    def where_can_i_deploy(self, user: str, channel: str | None = None) -> str:
        """``.wcid``: each environment open or why not, and whether ``user`` may approve
        (of the channel's service)."""
        return bk.wcid_text(outlook(self.in_channel(channel), user=user,
                                    groups=self.directory.groups_of(user)))

    def announce(self, channel: str, text: str) -> None:
        """Say ``text`` (escaped already) in ``channel`` for everyone."""
        self.client.chat_postMessage(channel=channel, text=bk.trim(text, 3000))

    # -- buttons ----------------------------------------------------------------------------

    def approve(self, run_id: str, version: int, plan_hash: str, *, user: str,
                origin: dict[str, str] | None = None) -> Run:
        """Record an approval (ApprovalRefused if not allowed) and tell the thread.

        ``origin`` is where the clicked message is: Slack can show a plan (and deliver a
        click on it) before the bot has stored where it posted it; replies then go there."""
        run = self.desk.approve(run_id, user=user, face=Face.SLACK,  # a refusal: audited
                                groups=self.directory.groups_of(user), plan_version=version,
                                plan_hash=plan_hash)
        if origin and not run.meta.get("slack"):
            run = run.model_copy(update={"meta": {**run.meta, "slack": origin}})
        needed = approvals_needed(run, self.policy_of(run.service))
        if run.status is RunStatus.AWAITING_APPROVAL:
            self.thread_reply(run, f"👍 {bk.mention(user, Face.SLACK)} approved — {needed} more "
                                   f"approval(s) needed.")
        else:
            approvers = ", ".join(bk.mention(a.user, a.via) for a in run.approvals)
            self.note_plan(run, actions=False,  # the relay never lets it hide an outcome
                           note=f"✅ Approved by {approvers} — queued as `{short_id(run.id)}`")
            self.thread_reply(run, f"✅ Approved by {approvers}. "
                                   f"Run `{short_id(run.id)}` is queued.")
        self.changed(run)
        return run

    def revise(self, run_id: str, plan: Plan, *, user: str) -> Run:
        """Post a new plan version in the thread; the old message loses its buttons."""
        old = self.store.runs.get(run_id)
        run = self.desk_of(old.service).revise(run_id, plan, user=user, face=Face.SLACK,
                               groups=self.directory.groups_of(user))
        who = bk.mention(user, Face.SLACK)  # the click's user: resolved by Slack
        self.refresh_plan_message(old, actions=False,
                                  note=f"✏️ Superseded by version {plan.version} "
                                       f"({who}) — see the thread")
        slack = run.meta["slack"]
        reply = self.client.chat_postMessage(
            channel=slack["channel"], thread_ts=slack["thread_ts"],
            text=f"Plan v{plan.version}: {bk.shown(plan.goal, 300)}",
            blocks=bk.plan_blocks(plan, run, self.policy_of(run.service),
                                  note=f"Version {plan.version}, modified by {who}",
                                  diff=self.diff_from_previous(run)))
        run = self.desk.posted(run_id, "slack", plan_ts=reply["ts"])
        self.changed(run)
        return run

    def reject(self, run_id: str, reason: str, *, user: str) -> Run:
        reason = bk.trim(reason, 500)
        shown = bk.escape(reason)  # trimmed first, so the cut never falls inside an entity
        run = self.desk.reject(run_id, user=user, face=Face.SLACK, reason=reason,
                               groups=self.directory.groups_of(user))
        self.note_plan(run, actions=False,
                       note=f"🚫 Rejected by {bk.mention(user, Face.SLACK)}: {shown}")
        self.thread_reply(run, f"🚫 Rejected by {bk.mention(user, Face.SLACK)}: {shown}")
        self.changed(run)
        return run

    def cancel(self, run_id: str, *, user: str, via: str = "command") -> Run:
        """``/deckhand cancel RUN`` and the Stop button (confirmed in Slack's dialog): the
        requester and whoever may approve the run's environments may; ApprovalRefused
        (audited) tells anyone else, or says the run has ended. Only the first Stop posts
        in the thread: a later one raises AlreadyStopping (who stopped it), told privately."""
        run = self._steer(Control.STOP, run_id, user, via=via)
        verb, who = "stopped" if via == "stop_button" else "cancelled", bk.mention(user, Face.SLACK)
        if run.meta.get("slack"):
            if run.status.terminal:
                self.note_plan(run, actions=False, note=f"⏹️ {verb.capitalize()} by {who}")
            self.thread_reply(run, f"⏹️ {who} {verb} run `{short_id(run.id)}`"
                              + ("" if run.status.terminal else
                                      " — stopping running steps, then rolling back."))
        return run

    def stop(self, run_id: str, *, user: str) -> Run:
        """The Stop button: as ``cancel``, said as a stop."""
        return self.cancel(run_id, user=user, via="stop_button")

    def pause(self, run_id: str, *, user: str) -> Run:
        """The Pause button: the run holds before its next step or rollout batch (who may,
        as for Stop); the thread says who paused it."""
        run = self._steer(Control.PAUSE, run_id, user)
        who = bk.mention(user, Face.SLACK)
        self.thread_reply(run, f"⏸️ {who} paused run `{short_id(run.id)}` — "
                               f"running commands finish, nothing new starts until someone "
                               f"resumes it.")
        return run

    def resume(self, run_id: str, *, user: str) -> Run:
        """The Resume button: the paused run carries on (who may, as for Stop)."""
        run = self._steer(Control.RESUME, run_id, user)
        self.thread_reply(run, f"▶️ {bk.mention(user, Face.SLACK)} resumed run "
                               f"`{short_id(run.id)}`.")
        return run

    def _steer(self, control: Control, run_id: str, user: str, *, via: str = "button") -> Run:
        run = self.desk.control(control, run_id, user=user, via=via,
                                groups=self.directory.groups_of(user))
        self.changed(run)
        return run

    def judge(self, run_id: str, hold: str, verdict: Verdict, *, user: str) -> Run:
        """A Continue or Roll back click on a go/no-go message: the rules that say who may
        approve the run decide (``agents.store.judgments``); ApprovalRefused (audited)
        tells anyone else. The worker picks the decision up; its thread message says so."""
        run, _ = self.desk.judge(run_id, verdict, user=user, via="slack", hold=hold,
                                 groups=self.directory.groups_of(user))
        self.changed(run)
        return run

    # -- helpers ----------------------------------------------------------------------------

    def check_may_steer(self, run: Run, user: str, *, what: str = "steer") -> None:
        """ApprovalRefused (audited) unless ``user`` may modify, reject or cancel ``run``;
        ``what`` names the attempt in the audit entry."""
        self.desk.may_steer(run, user=user, face=Face.SLACK, what=what,
                            groups=self.directory.groups_of(user))

    def thread_reply(self, run: Run, text: str) -> None:
        """Say ``text`` in the run's thread: through its feed, so it waits there while Slack
        is rate-limiting and lands in order with what the run says (``relay.py``)."""
        slack = run.meta.get("slack")
        if slack:
            self.store.run_feed.append(run.id, "say", {"text": text, "where": slack})

    def note_plan(self, run: Run, *, actions: bool, note: str) -> None:
        """Show ``note`` on the run's top-level plan message, through its feed (as
        ``thread_reply``)."""
        slack = run.meta.get("slack")
        if slack and slack.get("plan_ts"):
            self.store.run_feed.append(run.id, "plan", {"actions": actions, "note": note,
                                                        "where": slack})

    def confirm(self, body: dict[str, Any], respond: Respond | None, text: str) -> None:
        """Tell whoever clicked that what they asked took effect, privately: through the
        click's response_url, which Slack does not rate-limit like the Web API, so the
        answer comes even while the thread waits out a storm."""
        if respond is not None and body.get("response_url"):
            respond(text=bk.trim(bk.notice(text), 3000), response_type="ephemeral",
                    replace_original=False)

    def refresh_plan_message(self, run: Run, *, actions: bool, note: str | None = None) -> None:
        slack = run.meta.get("slack")
        if not slack:
            return
        plan = self.store.plans.get(run.plan_id, run.plan_version)
        self.client.chat_update(channel=slack["channel"], ts=slack["plan_ts"],
                                text=f"Plan: {bk.shown(plan.goal, 300)}",
                                blocks=bk.plan_blocks(plan, run, self.policy_of(run.service),
                                                      actions=actions, note=note,
                                                      diff=self.diff_from_previous(run)))

    def diff_from_previous(self, run: Run) -> PlanDiff | None:
        """How the run's plan differs from the version before it (None for the first)."""
        return previous_diff(self.store.plans, run)

    def teller(self, body: dict[str, Any], respond: Respond | None = None) -> Tell:
        """How a job tells whoever sent ``body`` that it failed (redacted, escaped)."""
        def tell(text: str) -> None:
            if respond is not None and body.get("response_url"):
                respond(text=bk.trim(bk.notice(self.redacted(text)), 3000),
                        response_type="ephemeral")
            else:
                self.tell(body, text)
        return tell

    def redacted(self, text: str) -> str:
        """``text`` redacted; a :class:`Said` part by part, so its mentions stay mentions."""
        if isinstance(text, Said):
            return text.map_literal(self.services.redact)
        return self.services.redact(text)

    def tell(self, body: dict[str, Any], text: str) -> None:
        """Tell whoever sent ``body`` (a command, click or event): ephemerally in its channel,
        or by DM when it has none (the App Home, modals)."""
        user = (body.get("user") or {}).get("id") or body.get("user_id") \
            or (body.get("event") or {}).get("user")
        channel = (body.get("channel") or {}).get("id") or body.get("channel_id") \
            or (body.get("event") or {}).get("channel")
        if not user:
            return
        text = bk.trim(bk.notice(self.redacted(text)), 3000)
        if channel:
            self.ephemeral(channel=channel, user=user, text=text)
        else:
            self.client.chat_postMessage(channel=user, text=text)

    def show_output(self, body: dict[str, Any], run_id: str) -> None:
        """What a finished run's steps printed, to the one who clicked (ephemeral in the
        channel, or by DM), redacted and bounded like every payload."""
        run = self.store.runs.get(run_id)
        blocks = bk.run_output_blocks(run, self.services.redact)
        user = body["user"]["id"]
        channel = (body.get("channel") or {}).get("id")
        text = f"Output of run {short_id(run.id)}"
        if channel:
            self.client.chat_postEphemeral(channel=channel, user=user, text=text, blocks=blocks)
        else:
            self.client.chat_postMessage(channel=user, text=text, blocks=blocks)

    def ephemeral(self, *, channel: str, user: str, text: str) -> None:
        self.client.chat_postEphemeral(channel=channel, user=user, text=bk.trim(text, 3000))
