"""The run desk: the one door through which anything changes a run's approval state.

Every face — the Slack listeners, the terminal, the CLI, MCP — and the scheduler's unattended
occurrences call these verbs and nothing else: propose (store a plan as a run awaiting
approval), approve (by a person, unattended by a schedule, the break-glass grant), revise,
reject, close, the controls (pause, resume, stop) and the go/no-go. Each verb is one store
transaction that includes its audit entry, so no state is ever readable before its entry
exists; each refusal is audited here, with the face it came through. ``verdict`` is the
answer ``approve`` will give, limits included, for ``policy explain``, the App Home and the
pre-checks a face makes before asking for a confirmation.

``tests/unit/test_layout.py`` keeps the faces off the store's run verbs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from agents.engine.control import Control, steer
from agents.errors import ApprovalRefused, IllegalTransition, PlanInvalid
from agents.faces import Face
from agents.plan.model import Plan
from agents.policy.approvals import approval_grant, policy_version, steer_problem
from agents.policy.eligibility import Grant, PlanSubject, Subject, eligibility, unapprovable
from agents.policy.rules import Policy
from agents.run.record import Judgment, Run, RunStatus, Verdict
from agents.schedules.model import Schedule
from agents.services import Services
from agents.store import Write


@dataclass(frozen=True)
class RunDesk:
    """The run verbs over one deployment's services (cheap: make one where needed)."""

    services: Services
    rules: Callable[[str | None], Policy] | None = None
    """The policy of a service (every layer), for a face serving an organisation of several;
    None: the services' own config's."""

    def policy_of(self, service: str | None) -> Policy:
        """The rules a run of ``service`` is judged by, as in force now (a reload swaps the
        whole config at once)."""
        return self.rules(service) if self.rules else self.services.config.policy

    # -- propose ----------------------------------------------------------------------------

    def propose(self, plan: Plan, *, user: str, face: str, break_glass: str | None = None,
                run_id: str | None = None, meta: dict[str, Any] | None = None,
                **details: Any) -> Run:
        """Store ``plan`` and a run awaiting approval, with its ``planned`` entry in the same
        EXEC. PlanInvalid (audited) if nobody could ever complete its approvals."""
        run = self._fresh(plan, user=user, face=face, break_glass=break_glass, run_id=run_id,
                          meta=meta)
        store = self.services.store
        return store.runs.create(run, then=self._planned(plan, user, face, break_glass,
                                                         details))

    def propose_once(self, plan: Plan, *, run_id: str, user: str, face: str,
                     meta: dict[str, Any] | None = None, **details: Any) -> tuple[Run, bool]:
        """As ``propose`` under an id derived from an idempotency key: (the run, whether
        this call stored it; if not, an earlier attempt did)."""
        run = self._fresh(plan, user=user, face=face, break_glass=None, run_id=run_id,
                          meta=meta)
        return self.services.store.runs.create_once(
            run, then=self._planned(plan, user, face, None, details))

    def _fresh(self, plan: Plan, *, user: str, face: str, break_glass: str | None,
               run_id: str | None, meta: dict[str, Any] | None) -> Run:
        targets, policy = self.services.targets(plan), self.policy_of(plan.service)
        problem = unapprovable(targets, policy, requested_by=plan.requested_by)
        if problem:
            self.services.store.audit.refused("plan", action="plan_refused", actor=user,
                                              face=face, rule=problem, plan_id=plan.id)
            raise PlanInvalid([problem])
        self.services.store.plans.save(plan)
        fields: dict[str, Any] = {"break_glass": break_glass, "meta": {
            **(meta or {}), "policy": policy_version(policy)}}  # the rules it was posted under
        if run_id:
            fields["id"] = run_id
        return Run.for_plan(plan, targets, **fields)

    def _planned(self, plan: Plan, user: str, face: str, break_glass: str | None,
                 details: dict[str, Any]) -> Any:
        audit, version = self.services.store.audit, policy_version(self.policy_of(plan.service))
        glass = {"break_glass": break_glass} if break_glass else {}

        def then(run_id: str) -> list[Write]:
            return [audit.write("planned", actor=user, run_id=run_id, plan_id=plan.id,
                                face=face, policy=version, **glass, **details)]
        return then

    # -- approve ----------------------------------------------------------------------------

    def verdict(self, run: Run, *, user: str, groups: Iterable[str] = (),
                face: str = Face.CLI) -> Grant | str:
        """What ``approve`` would answer ``user`` through ``face`` now: the grant, or why
        not (groups unknown outside Slack, the rules, a stale state, then the per-hour
        limit, in the order ``approve`` checks them). Reads only; ``run`` is left as is."""
        unknown = self._groups_unknown(run, user=user, groups=list(groups), face=face)
        if unknown:
            return unknown
        policy = self.policy_of(run.service)
        grant = approval_grant(run, user=user, user_groups=list(groups),
                               plan_version=run.plan_version, plan_hash=run.plan_hash,
                               policy=policy, now=self.services.clock())
        if not isinstance(grant, Grant):
            return grant
        store = self.services.store
        held = store.manual_locks.blocking(run.environments, service=run.service)
        if held:  # a person's lock refuses it, as approve's transaction will
            return held.refusal()
        return store.limits.problem(policy, run.service, run.environments, run_id=run.id,
                                    user=user) or grant

    def problem(self, run: Run, *, user: str, face: str,
                groups: Iterable[str] = ()) -> str | None:
        """Why ``approve`` would refuse ``user`` now (None: it would not)."""
        verdict = self.verdict(run, user=user, groups=groups, face=face)
        return None if isinstance(verdict, Grant) else verdict

    def approve(self, run_id: str, *, user: str, face: str, groups: Iterable[str] = (),
                plan_version: int | None = None, plan_hash: str | None = None) -> Run:
        """``user``'s approval of ``run_id`` (of the version and hash a button carries;
        None: the run's current plan); queued when it is the last one needed. The
        approval, its count, its audit entry and the queue entry land in one EXEC;
        ApprovalRefused (audited) says why not."""
        run = self.services.store.runs.get(run_id)
        unknown = self._groups_unknown(run, user=user, groups=list(groups), face=face)
        if unknown:  # fail closed, saying why (not "you are not allowed")
            raise self.refused(run, user=user, face=face, rule=unknown)
        if plan_version is None or plan_hash is None:
            plan_version, plan_hash = run.plan_version, run.plan_hash
        return self.services.store.runs.approve(
            run_id, user=user, face=face, user_groups=list(groups), plan_version=plan_version,
            plan_hash=plan_hash, policy=self.policy_of(run.service))

    def _groups_unknown(self, run: Run, *, user: str, groups: list[str],
                        face: str) -> str | None:
        """Outside Slack nobody can say which groups ``user`` is in (deckhand asks Slack's
        usergroups API, with the bot's token, only for Slack's signed users): when only a
        group could let them approve, the refusal says so instead of "not allowed"."""
        if face == Face.SLACK:
            return None
        answer = eligibility(run, self.policy_of(run.service))
        named = sorted({g for line in answer.lines for g in line.rule.approvers.groups})
        could = all(line.rule.approvers.allows(user, groups) or line.rule.approvers.groups
                    for line in answer.lines)  # a group could lift every refusal
        if not named or answer.allows(user, groups) or not could:
            return None
        return (f"{user} is not named by every rule here, and group membership "
                f"({', '.join(named)}) is known only to Slack, so {face} cannot count it: "
                f"approve in Slack, or have {user} named in policy")

    def approve_unattended(self, run_id: str, *, schedule: Schedule, plan: Plan) -> Run:
        """Approve and queue ``run_id`` for ``schedule``'s creator, as a person's approval
        would be: the run's real hosts against ``policy.limits``, the creator's per-hour
        count, the replica wait and the refusal's audit entry. Recorded as
        ``schedule:ID (approved by U123 at creation)``; ApprovalRefused says why not."""
        policy, groups = self.policy_of(plan.service), list(schedule.created_by_groups)

        def alone(run: Run) -> str | None:
            return auto_problem(policy, run, user=schedule.created_by, user_groups=groups)

        return self.services.store.runs.approve(
            run_id, user=schedule.created_by, face=Face.SCHEDULE, user_groups=groups,
            plan_version=plan.version, plan_hash=plan.hash, policy=policy,
            actor=schedule.approver_label, recorded_as=schedule.approver_label, check=alone,
            schedule=schedule.id)

    def refused(self, run: Run, *, user: str, face: str, rule: str,
                what: str = "approve") -> ApprovalRefused:
        """Audit a refusal a face decided (an unconfirmed approval): the error to raise."""
        self.services.store.audit.refused(what, actor=user, face=face, rule=rule,
                                          run_id=run.id, plan_id=run.plan_id,
                                          policy=policy_version(self.policy_of(run.service)))
        return ApprovalRefused(rule)

    # -- revise, reject, close ----------------------------------------------------------------

    def may_steer(self, run: Run, *, user: str, face: str, what: str,
                  groups: Iterable[str] = ()) -> None:
        """ApprovalRefused (audited as ``what``) unless ``user`` may modify, reject or stop
        ``run``: its requester, or someone who may approve it."""
        problem = steer_problem(run, user=user, user_groups=list(groups),
                                policy=self.policy_of(run.service))
        if problem:
            raise self.refused(run, user=user, face=face, rule=problem, what=what)

    def revise(self, run_id: str, plan: Plan, *, user: str, face: str,
               groups: Iterable[str] = ()) -> Run:
        """Bind a waiting run to ``plan`` (a new version, validated again); the approvals
        given so far no longer count. The ``modified`` entry lands with it."""
        store = self.services.store
        self.may_steer(store.runs.get(run_id), user=user, face=face, what="modify",
                       groups=groups)
        self.services.check(plan)
        store.plans.save(plan)
        entry = store.audit.write("modified", actor=user, run_id=run_id, plan_id=plan.id,
                                  version=plan.version, face=face)
        return store.runs.revise(run_id, plan, self.services.targets(plan), writes=[entry])

    def reject(self, run_id: str, *, user: str, face: str, reason: str,
               groups: Iterable[str] = (), recorded: str | None = None) -> Run:
        """Close a waiting run as rejected by ``user`` (``recorded``: the run's reason, when
        not ``rejected by USER: REASON``); its ``rejected`` entry lands with it."""
        self.may_steer(self.services.store.runs.get(run_id), user=user, face=face,
                       what="reject", groups=groups)
        return self.close(run_id, RunStatus.REJECTED, actor=user, action="rejected",
                          reason=recorded or f"rejected by {user}: {reason}",
                          expect={RunStatus.AWAITING_APPROVAL}, face=face, said=reason)

    def close(self, run_id: str, status: RunStatus, *, actor: str, action: str, reason: str,
              expect: Iterable[RunStatus], face: str, **details: Any) -> Run:
        """End a run that has not started (rejected, expired, cancelled at a prompt) with
        ``reason``, and its ``action`` entry, in one EXEC. IllegalTransition if it is not
        in one of ``expect`` (it started or ended meanwhile)."""
        store, wanted = self.services.store, set(expect)
        said = details.pop("said", None) or reason

        def change(run: Run) -> list[Write]:
            if run.status not in wanted:
                raise IllegalTransition(f"run {run_id} is {run.status.value}, not "
                                        f"{' or '.join(sorted(s.value for s in wanted))}")
            run.move(status)
            run.reason, run.finished_at = reason, store.clock()
            return [store.audit.write(action, actor=actor, run_id=run_id, plan_id=run.plan_id,
                                      reason=said, face=face, **details)]

        return store.runs.durable(store.runs.update(run_id, change), f"end ({status.value})")

    def posted(self, run_id: str, face: str, **where: str) -> Run:
        """Remember where ``face`` showed the run (channel, message), so its thread and
        buttons can be found by any replica."""
        def change(run: Run) -> None:
            run.meta[face] = {**run.meta.get(face, {}), **where}
        return self.services.store.runs.update(run_id, change)

    # -- the controls and the go/no-go --------------------------------------------------------

    def control(self, control: Control, run_id: str, *, user: str, via: str,
                groups: Iterable[str] = ()) -> Run:
        """Pause, resume or stop ``run_id`` for ``user`` (``agents.engine.control``)."""
        store = self.services.store
        policy = self.policy_of(store.runs.get(run_id).service)
        return steer(policy, control, run_id, runs=store.runs, audit=store.audit,
                     user=user, via=via, user_groups=groups)

    def cancel(self, run_id: str, *, user: str, via: str) -> Run:
        """Stop ``run_id`` for the person running it here (the terminal's Ctrl-C): the
        first stop, audited with it; a rollback under way goes on."""
        return self.services.store.runs.request_cancel(run_id, user=user, via=via)

    def judge(self, run_id: str, verdict: Verdict, *, user: str, via: str,
              groups: Iterable[str] = (), hold: str | None = None) -> tuple[Run, Judgment]:
        """``user``'s Continue or Roll back at the go/no-go ``run_id`` waits at."""
        store = self.services.store
        return store.judgments.decide(run_id, verdict, user=user, via=via,
                                      policy=self.policy_of(store.runs.get(run_id).service),
                                      user_groups=list(groups), hold=hold)


def auto_problem(policy: Policy, subject: Subject, *, user: str,
                 user_groups: Iterable[str]) -> str | None:
    """Why ``user`` may not have ``subject`` (a plan's targets, or a run) run unattended:
    None if they may.

    The same rights as approving it, its real hosts against ``policy.limits`` included,
    plus: the policy allows unattended runs, needs a single approval, and allows approving
    one's own request (the creator approves it)."""
    groups, scopes = list(user_groups), subject.scopes
    rule = policy.strictest(scopes)
    where = ", ".join(subject.environments) or "the default environment"
    if not rule.unattended:
        return f"policy does not allow unattended runs in {where}"
    answer = eligibility(PlanSubject(subject.environments, subject.reach, user, scopes),
                         policy)
    if answer.over_limit:
        return answer.over_limit
    if not answer.allows(user, groups):
        return f"{user} is not allowed to approve plans for {where}. Who can: {answer.who()}"
    if rule.min_approvals > 1:
        return f"{where} needs {rule.min_approvals} approvals; a schedule carries only one"
    if not rule.self_approval:
        return f"policy forbids approving your own request in {where}"
    return None
