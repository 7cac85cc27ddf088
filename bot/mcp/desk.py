"""The work behind deckhand's MCP tools, synchronous like the rest of deckhand.

A client may look (``catalog``, ``plan``, ``run_status``), ask (``request_deploy``) and, as
the run's requester or approver, pause, resume or stop it; it can never approve, edit a
plan in flight or skip validation. ``plan`` remembers each plan it
validated under its hash and requester; ``request_deploy`` accepts only such a hash,
validates the plan again against the current config, stores it as a run awaiting approval
and posts it where humans approve (Slack, or ``deckhand approve``). Every step is audited.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from agents.engine.control import Control
from agents.engine.desk import RunDesk
from agents.errors import FreezeRefused, NotFound, PlanError, PlanInvalid
from agents.faces import Face
from agents.plan.model import Plan
from agents.policy.eligibility import eligibility
from agents.run.judgment import waiting_line
from agents.run.record import Run, RunStatus, StepState, Verdict
from agents.services import Services
from agents.store import LockInfo
from bot.mcp.views import (
    CatalogView,
    DeployRequest,
    EnvironmentView,
    Hints,
    LockView,
    ParamView,
    PlanView,
    RunRef,
    RunView,
    StepView,
    ToolView,
    WhereReport,
    WhereView,
)
from tools.catalog import Tool
from tools.errors import DeckhandError

DEFAULT_PLAN_TTL = 900.0
"""Seconds a validated plan may be requested after ``plan`` made it."""


class Refused(DeckhandError):
    """A request the MCP face will not carry out; the message says why and what to do."""


class PlanPoster(Protocol):
    """Posts a stored plan where humans approve it (bot.slack.bot.Bot)."""

    def post_plan(self, plan: Plan, run: Run, *, channel: str) -> Run: ...


@dataclass
class Desk:
    """deckhand's MCP tools over the shared services; ``poster`` None means no Slack."""

    services: Services
    poster: PlanPoster | None = None
    plan_ttl: float = DEFAULT_PLAN_TTL

    def catalog(self) -> CatalogView:
        inventory = self.services.config.inventory
        return CatalogView(
            tools=[tool_view(t) for t in self.services.config.catalog.tools.values()],
            environments=[EnvironmentView(name=n, hosts=list(e.hosts))
                          for n, e in inventory.environments.items()],
            groups={n: list(hosts) for n, hosts in inventory.groups.items()})

    def plan(self, request: str, *, requester: str, connection: str = "") -> PlanView:
        """Plan and validate ``request``; remember an accepted plan for ``request_deploy``
        from the same ``connection`` (stdio: the client's name is only self-declared, so
        another process calling itself the same cannot request this plan)."""
        try:
            plan = self.services.make_plan(request, requested_by=requester, face="mcp")
        except PlanInvalid as exc:
            return self._refused(requester, exc.problems)
        except PlanError as exc:  # audited where every face's plans are made
            return self._refused(requester, [str(exc)])
        self.services.store.proposals.put(plan, ttl=self.plan_ttl,
                                          owner=_owner(requester, connection))
        self.services.store.audit.record("mcp_planned", actor=requester, plan_id=plan.id,
                                         plan_hash=plan.hash, request=request)
        targets = self.services.targets(plan)
        return PlanView(accepted=True, plan_hash=plan.hash, plan=plan,
                        environments=targets.environments, hosts=targets.hosts,
                        requested_by=requester, expires_in=self.plan_ttl)

    @staticmethod
    def _refused(requester: str, problems: list[str]) -> PlanView:
        return PlanView(accepted=False, problems=problems, requested_by=requester)

    def run_status(self, run_id: str) -> RunView:
        run = self.services.store.runs.find(run_id)
        answer = eligibility(run, self.services.config.policy, now=self.services.clock())
        return RunView(
            run_id=run.id, status=run.status.value, goal=run.goal, plan_hash=run.plan_hash,
            environments=run.environments, requested_by=run.requested_by,
            approved_by=[a.user for a in run.approvals],
            break_glass_grant=next((a.user for a in run.approvals if a.break_glass), None),
            approvals_needed=answer.remaining if run.status is RunStatus.AWAITING_APPROVAL
            else 0, approvers=answer.who(), approval_rules=answer.explain(),
            steps=[step_view(s) for s in run.steps.values()],
            rollback=[step_view(s) for s in run.rollback.values()],
            changed_hosts=run.changed_hosts, reason=run.reason, paused=run.paused,
            go_no_go=waiting_line(run.awaiting) if run.awaiting else None)

    def steer(self, control: Control, run_id: str, *, requester: str) -> RunView:
        """Pause, resume or stop a run for ``requester``: allowed to the run's requester and
        approvers only (as Stop in Slack), refused and audited otherwise (``via: mcp``)."""
        run = self.services.store.runs.find(run_id)
        RunDesk(self.services).control(control, run.id, user=requester, via="mcp")
        return self.run_status(run.id)

    def judge_run(self, run_id: str, decision: str, *, user: str, verified: bool) -> RunView:
        """Continue or Roll back the go/no-go ``run_id`` waits at, as ``user`` — a person
        the bearer token verified (``verified``); a stdio client's name is only what it
        calls itself, so it is refused. Refusals say why in one line, audited."""
        store = self.services.store
        run, verdict = store.runs.find(run_id), Verdict(decision)
        if not verified:
            reason = ("judge_run needs a verified user (MCP over HTTP with a bearer token); "
                      "decide in Slack or with `deckhand judge RUN continue|rollback`")
            store.audit.refused("judge", action="judgment_refused", actor=user, face="mcp",
                                rule=reason, run_id=run.id, plan_id=run.plan_id,
                                decision=verdict.value, via="mcp")
            raise Refused(reason)
        RunDesk(self.services).judge(run.id, verdict, user=user, via="mcp")
        return self.run_status(run.id)

    def where(self, *, recent: int = 100) -> WhereReport:
        """Each environment's lock, runs in flight and last success (from the newest runs)."""
        store, inventory = self.services.store, self.services.config.inventory
        key = self.services.config.key
        locks = store.locks.of(key)
        runs = store.runs.recent(limit=recent)
        return WhereReport(environments=[
            WhereView(environment=env, hosts=list(spec.hosts),
                      deployed=store.history.current(key, env), lock=_lock_view(locks.get(env)),
                      active=[run_ref(r) for r in runs
                              if env in r.environments and not r.status.terminal],
                      last_success=next((run_ref(r, at=r.finished_at) for r in runs
                                         if env in r.environments
                                         and r.status is RunStatus.SUCCEEDED), None))
            for env, spec in inventory.environments.items()])

    def request_deploy(self, plan_hash: str, channel: str | None, *, requester: str,
                       client: str, connection: str = "") -> DeployRequest:
        """Store the remembered plan ``plan_hash`` as a run awaiting a human's approval.

        Refused (and audited) unless ``requester`` made that plan with ``plan`` recently and
        it still passes validation; a repeated request returns the first run.
        """
        if self.poster is not None and not channel:
            raise Refused("Slack is configured: name the channel to post the plan in")
        try:
            return self._request(plan_hash, channel, requester=requester, client=client,
                                 owner=_owner(requester, connection))
        except DeckhandError as exc:
            self.services.store.audit.refused("request_deploy", actor=requester, face="mcp",
                                              rule=str(exc), action="mcp_request_refused",
                                              plan_hash=plan_hash)
            raise

    def _request(self, plan_hash: str, channel: str | None, *, requester: str,
                 client: str, owner: str) -> DeployRequest:
        store = self.services.store
        proposal, run_id = store.proposals.get(plan_hash, owner), ""
        if proposal.run_id is None:
            self._recheck(proposal.plan)
            run_id = store.ids("run")
            proposal = store.proposals.take(plan_hash, owner, run_id=run_id)
        if proposal.run_id is not None:  # requested before (or a concurrent twin won)
            return self._already(proposal.run_id, channel)
        plan = proposal.plan
        run = RunDesk(self.services).propose(plan, user=requester, face=Face.MCP, run_id=run_id,
                                             meta={"via": "mcp", "client": client}, via="mcp",
                                             client=client, plan_hash=plan_hash)
        if run.id != run_id:  # a taken run id: point the proposal at the new one
            store.proposals.rebind(plan_hash, owner, old=run_id, new=run.id)
        if self.poster is not None and channel:
            run = self.poster.post_plan(plan, run, channel=channel)
        return deploy_request(run, already=False, slack=self.poster is not None)

    def _recheck(self, plan: Plan) -> None:
        """The config, or the clock, may have changed since ``plan``: validation again, and
        no request into a freeze (an MCP client has no break-glass)."""
        self.services.check(plan)
        self.services.refuse_if_locked(plan)
        blocked = self.services.frozen(self.services.targets(plan).scopes)
        if blocked is not None:
            raise FreezeRefused(blocked.describe())

    def _already(self, run_id: str, channel: str | None) -> DeployRequest:
        """The run an earlier request made; posted now if posting failed back then."""
        try:
            run = self.services.store.runs.get(run_id)
        except NotFound:
            raise Refused("an earlier request of this plan failed before its run was "
                          "stored; call `plan` again") from None
        unposted = not run.meta.get("slack") and run.status is RunStatus.AWAITING_APPROVAL
        if self.poster is not None and channel and unposted:
            plan = self.services.store.plans.get(run.plan_id, run.plan_version)
            run = self.poster.post_plan(plan, run, channel=channel)
        return deploy_request(run, already=True, slack=bool(run.meta.get("slack")))


def _owner(requester: str, connection: str) -> str:
    """Whom a remembered plan is bound to: the requester, on this connection if given."""
    return f"{requester}@{connection}" if connection else requester


def deploy_request(run: Run, *, already: bool, slack: bool) -> DeployRequest:
    posted = run.meta.get("slack") or {}
    where = "Slack (Approve in the plan's thread)" if slack else f"`deckhand approve {run.id}`"
    return DeployRequest(run_id=run.id, status=run.status.value, plan_hash=run.plan_hash,
                         already_requested=already, awaiting=where,
                         slack_channel=posted.get("channel"), slack_ts=posted.get("plan_ts"))


def tool_view(tool: Tool) -> ToolView:
    params = [ParamView(name=n, type=s.type.value, description=s.description,
                        required=s.required and s.default is None, default=s.default,
                        enum=s.enum, pattern=s.pattern) for n, s in tool.params.items()]
    return ToolView(name=tool.name, description=tool.description, target=tool.target,
                    mutates=tool.mutates, rollback=tool.rollback, params=params,
                    hints=Hints(read_only=not tool.mutates, destructive=tool.mutates,
                                idempotent=tool.idempotent))


def run_ref(run: Run, *, at: float | None = None) -> RunRef:
    return RunRef(run_id=run.id, status=run.status.value, goal=run.goal,
                  requested_by=run.requested_by, at=at or run.created_at)


def _lock_view(lock: LockInfo | None) -> LockView | None:
    if lock is None:
        return None
    return LockView(run_id=lock.run_id, worker=lock.worker, since=lock.since)


def step_view(state: StepState) -> StepView:
    return StepView(id=state.id, status=state.status.value, error=state.error)
