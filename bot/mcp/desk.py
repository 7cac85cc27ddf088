"""The work behind deckhand's MCP tools, synchronous like the rest of deckhand.

A client may look (``catalog``, ``plan``, ``run_status``), ask (``request_deploy``) and, as
the run's requester or approver, pause, resume or stop it; it can never approve, edit a
plan in flight or skip validation. ``plan`` remembers each plan it
validated under its hash and requester; ``request_deploy`` accepts only such a hash,
validates the plan again against the current config, stores it as a run awaiting approval
and posts it where humans approve (Slack, or ``deckhand approve``). Every step is audited.

An organisation of several services (docs/services.md 2.7): ``catalog``, ``plan`` and
``where`` act for the service the ``service`` argument (or, for ``plan``, the request) names;
with several services and none named nothing is guessed: the refusal lists them. A run, and
a remembered plan (its hash includes its service), is always handled under its own
service's rules; a ``service`` argument naming another is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from agents.engine.control import Control
from agents.engine.desk import RunDesk
from agents.errors import (
    FreezeRefused,
    NotFound,
    PlanError,
    PlanInvalid,
    ServiceNotChosen,
    WhichService,
)
from agents.faces import Face
from agents.plan.model import Plan
from agents.policy.eligibility import eligibility
from agents.requests.services import Picked, choose
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


SERVICE_ARGUMENT = "argument `service`"
"""How the refusals name the tools' ``service`` argument (as the server words arguments)."""


class Refused(DeckhandError):
    """A request the MCP face will not carry out; the message says why and what to do."""


def name_one(names: list[str]) -> str:
    """The refusal of a call naming no service when the organisation has several."""
    return (f"which service? This organisation has {', '.join(names)}: name one with "
            f"`service` (or in the request: `deploy {names[0]} v2.3.1`)")


class PlanPoster(Protocol):
    """Posts a stored plan where humans approve it (bot.slack.bot.Bot)."""

    def post_plan(self, plan: Plan, run: Run, *, channel: str) -> Run: ...


@dataclass
class Desk:
    """deckhand's MCP tools over the shared services; ``poster`` None means no Slack."""

    services: Services
    poster: PlanPoster | None = None
    plan_ttl: float = DEFAULT_PLAN_TTL

    def scope(self, service: str | None) -> Services:
        """The services focused on ``service`` (None: the only one). Refused, listing the
        services, when it is unknown or when there are several and none is named."""
        return self.services.focus(self._chosen(service))

    def _chosen(self, service: str | None) -> str:
        try:
            name = choose(Picked(None, "", "", "none"), self.services.names, given=service,
                          given_by=SERVICE_ARGUMENT)
        except WhichService as exc:
            raise Refused(name_one(exc.names)) from None
        except ServiceNotChosen as exc:
            raise Refused(_unknown(service, self.services.names.names)) from exc
        return name

    def of_run(self, run: Run, service: str | None) -> Services:
        """The services focused on ``run``'s own service; refused when ``service`` (if
        given) names another: a call meant for one service never acts on another's run."""
        given = self._chosen(service) if service is not None else None
        own = self.services.for_run(run)
        if given is not None and own.current != given:
            raise Refused(f"run {run.id} is service {own.current}'s, not {service}'s: check "
                          f"the run id, or call without `service` (the run knows its own)")
        return own

    def _acting_on(self, run: Run, service: str | None, *, what: str, actor: str,
                   action: str) -> Services:
        """``of_run`` for a verb that changes the run: its refusal is audited."""
        try:
            return self.of_run(run, service)
        except Refused as exc:
            self.services.store.audit.refused(what, action=action, actor=actor, face="mcp",
                                              rule=str(exc), run_id=run.id,
                                              plan_id=run.plan_id, via="mcp")
            raise

    def catalog(self, service: str | None = None) -> CatalogView:
        scoped = self.scope(service)
        inventory = scoped.config.inventory
        return CatalogView(
            service=scoped.config.name,
            tools=[tool_view(t) for t in scoped.config.catalog.tools.values()],
            environments=[EnvironmentView(name=n, hosts=list(e.hosts))
                          for n, e in inventory.environments.items()],
            groups={n: list(hosts) for n, hosts in inventory.groups.items()})

    def plan(self, request: str, *, requester: str, connection: str = "",
             service: str | None = None) -> PlanView:
        """Plan and validate ``request`` for the service it or ``service`` names (else the
        only one); remember an accepted plan for ``request_deploy`` from the same
        ``connection`` (stdio: the client's name is only self-declared, so another process
        calling itself the same cannot request this plan)."""
        if service is not None:
            self._chosen(service)  # an unknown name: the argument's own refusal
        try:
            scoped, _ = self.services.for_request(request, given=service,
                                                  given_by=SERVICE_ARGUMENT)
        except WhichService as exc:
            return self._unchosen(request, requester, name_one(exc.names))
        except ServiceNotChosen as exc:  # two services named, a near miss, or a mismatch
            return self._unchosen(request, requester, str(exc))
        try:
            plan = scoped.make_plan(request, requested_by=requester, face="mcp")
        except PlanInvalid as exc:
            return self._refused(requester, exc.problems)
        except PlanError as exc:  # audited where every face's plans are made
            return self._refused(requester, [str(exc)])
        scoped.store.proposals.put(plan, ttl=self.plan_ttl, owner=_owner(requester, connection))
        scoped.store.audit.record("mcp_planned", actor=requester, plan_id=plan.id,
                                  plan_hash=plan.hash, request=request, service=plan.service)
        targets = scoped.targets(plan)
        return PlanView(accepted=True, plan_hash=plan.hash, plan=plan,
                        environments=targets.environments, hosts=targets.hosts,
                        requested_by=requester, expires_in=self.plan_ttl)

    def _unchosen(self, request: str, requester: str, reason: str) -> PlanView:
        """Nothing planned: no service chosen. Audited as every face's refused plan is."""
        self.services.store.audit.refused("plan", action="plan_refused", actor=requester,
                                          face="mcp", rule=reason, request=request[:500],
                                          problems=[reason])
        return self._refused(requester, [reason])

    @staticmethod
    def _refused(requester: str, problems: list[str]) -> PlanView:
        return PlanView(accepted=False, problems=problems, requested_by=requester)

    def run_status(self, run_id: str, service: str | None = None) -> RunView:
        run = self.services.store.runs.find(run_id)
        scoped = self.of_run(run, service)
        answer = eligibility(run, scoped.config.policy, now=scoped.clock())
        return RunView(
            run_id=run.id, service=scoped.config.name, status=run.status.value,
            goal=run.goal, plan_hash=run.plan_hash,
            environments=run.environments, requested_by=run.requested_by,
            approved_by=[a.user for a in run.approvals],
            break_glass_grant=next((a.user for a in run.approvals if a.break_glass), None),
            approvals_needed=answer.remaining if run.status is RunStatus.AWAITING_APPROVAL
            else 0, approvers=answer.who(), approval_rules=answer.explain(),
            steps=[step_view(s) for s in run.steps.values()],
            rollback=[step_view(s) for s in run.rollback.values()],
            changed_hosts=run.changed_hosts, reason=run.reason, paused=run.paused,
            go_no_go=waiting_line(run.awaiting) if run.awaiting else None)

    def steer(self, control: Control, run_id: str, *, requester: str,
              service: str | None = None) -> RunView:
        """Pause, resume or stop a run for ``requester``: allowed to the run's requester and
        approvers only (as Stop in Slack), refused and audited otherwise (``via: mcp``)."""
        run = self.services.store.runs.find(run_id)
        scoped = self._acting_on(run, service, what=control.value, actor=requester,
                                 action=f"{control.value}_refused")
        RunDesk(scoped).control(control, run.id, user=requester, via="mcp")
        return self.run_status(run.id)

    def judge_run(self, run_id: str, decision: str, *, user: str, verified: bool,
                  service: str | None = None) -> RunView:
        """Continue or Roll back the go/no-go ``run_id`` waits at, as ``user`` — a person
        the bearer token verified (``verified``); a stdio client's name is only what it
        calls itself, so it is refused. Refusals say why in one line, audited."""
        store = self.services.store
        run, verdict = store.runs.find(run_id), Verdict(decision)
        scoped = self._acting_on(run, service, what="judge", actor=user,
                                 action="judgment_refused")
        if not verified:
            reason = ("judge_run needs a verified user (MCP over HTTP with a bearer token); "
                      "decide in Slack or with `deckhand judge RUN continue|rollback`")
            store.audit.refused("judge", action="judgment_refused", actor=user, face="mcp",
                                rule=reason, run_id=run.id, plan_id=run.plan_id,
                                decision=verdict.value, via="mcp")
            raise Refused(reason)
        RunDesk(scoped).judge(run.id, verdict, user=user, via="mcp")
        return self.run_status(run.id)

    def where(self, service: str | None = None, *, recent: int = 100) -> WhereReport:
        """Each environment's lock, runs in flight and last success (from the newest runs)
        of one service."""
        scoped = self.scope(service)
        store, inventory = scoped.store, scoped.config.inventory
        key = scoped.config.key
        locks = store.locks.of(key)
        runs = [r for r in store.runs.recent(limit=recent) if r.service == key]
        return WhereReport(service=scoped.config.name, environments=[
            WhereView(environment=env, hosts=list(spec.hosts),
                      deployed=store.history.current(key, env), lock=_lock_view(locks.get(env)),
                      active=[run_ref(r) for r in runs
                              if env in r.environments and not r.status.terminal],
                      last_success=next((run_ref(r, at=r.finished_at) for r in runs
                                         if env in r.environments
                                         and r.status is RunStatus.SUCCEEDED), None))
            for env, spec in inventory.environments.items()])

    def request_deploy(self, plan_hash: str, channel: str | None, *, requester: str,
                       client: str, connection: str = "",
                       service: str | None = None) -> DeployRequest:
        """Store the remembered plan ``plan_hash`` as a run awaiting a human's approval.

        Refused (and audited) unless ``requester`` made that plan with ``plan`` recently and
        it still passes validation; a repeated request returns the first run.
        """
        if self.poster is not None and not channel:
            raise Refused("Slack is configured: name the channel to post the plan in")
        try:
            return self._request(plan_hash, channel, requester=requester, client=client,
                                 owner=_owner(requester, connection), service=service)
        except DeckhandError as exc:
            self.services.store.audit.refused("request_deploy", actor=requester, face="mcp",
                                              rule=str(exc), action="mcp_request_refused",
                                              plan_hash=plan_hash)
            raise

    def _request(self, plan_hash: str, channel: str | None, *, requester: str,
                 client: str, owner: str, service: str | None) -> DeployRequest:
        store = self.services.store
        proposal, run_id = store.proposals.get(plan_hash, owner), ""
        scoped = self._of_plan(proposal.plan, service)
        if proposal.run_id is None:
            self._recheck(scoped, proposal.plan)
            run_id = store.ids("run")
            proposal = store.proposals.take(plan_hash, owner, run_id=run_id)
        if proposal.run_id is not None:  # requested before (or a concurrent twin won)
            return self._already(proposal.run_id, channel)
        plan = proposal.plan
        run = RunDesk(scoped).propose(plan, user=requester, face=Face.MCP, run_id=run_id,
                                             meta={"via": "mcp", "client": client}, via="mcp",
                                             client=client, plan_hash=plan_hash)
        if run.id != run_id:  # a taken run id: point the proposal at the new one
            store.proposals.rebind(plan_hash, owner, old=run_id, new=run.id)
        if self.poster is not None and channel:
            run = self.poster.post_plan(plan, run, channel=channel)
        return deploy_request(run, already=False, slack=self.poster is not None)

    def _of_plan(self, plan: Plan, service: str | None) -> Services:
        """The services of ``plan``'s own service (its hash includes it); refused when
        ``service`` (if given) names another."""
        given = self._chosen(service) if service is not None else None
        own = self.services.for_record(plan.service, what=f"plan {plan.id}")
        if given is not None and own.current != given:
            raise Refused(f"that plan is service {own.current}'s, not {service}'s: call "
                          f"`plan` with service {service}, or call without `service`")
        return own

    @staticmethod
    def _recheck(scoped: Services, plan: Plan) -> None:
        """The config, or the clock, may have changed since ``plan``: validation again, and
        no request into a freeze (an MCP client has no break-glass)."""
        scoped.check(plan)
        scoped.refuse_if_locked(plan)
        blocked = scoped.frozen(scoped.targets(plan).scopes)
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


def _unknown(given: str | None, names: tuple[str, ...]) -> str:
    """An unknown ``service``, worded as the server words a bad argument (never its value)."""
    size = len(given) if given is not None else 0
    return (f"{SERVICE_ARGUMENT} must be one of this organisation's services: "
            f"{', '.join(sorted(names))} (got text of {size} characters)")


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
