"""How the policy applies to a run: who may approve it now, how many approvals it still
needs, and who may modify, reject or cancel it. The store calls these inside its
compare-and-set, so an answer holds when it is written."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from agents.policy.eligibility import Eligibility, Grant, eligibility
from agents.policy.rules import Approvers, Policy
from agents.run.record import Approval, Run, RunStatus, Verdict


def approval_problem(run: Run, *, user: str, user_groups: Iterable[str], plan_version: int,
                     plan_hash: str, policy: Policy, now: float) -> str | None:
    """Why ``user`` may not approve ``run`` now (a message for them), or None if they may.

    ``run`` is left as it is (expired approvals are only not counted).
    """
    grant = approval_grant(run, user=user, user_groups=user_groups, plan_version=plan_version,
                           plan_hash=plan_hash, policy=policy, now=now)
    return None if isinstance(grant, Grant) else grant


def approval_grant(run: Run, *, user: str, user_groups: Iterable[str], plan_version: int,
                   plan_hash: str, policy: Policy, now: float) -> Grant | str:
    """What ``user``'s approval of ``run`` would count as now (an environment approval or
    the break-glass grant), or why it is refused. Expired approvals do not count; ``run``
    is left as it is (the store drops them from the record it writes: ``live_approvals``)."""
    if run.status is not RunStatus.AWAITING_APPROVAL:
        return f"this run is {run.status.value.replace('_', ' ')}; there is nothing to approve"
    if plan_version != run.plan_version:
        return (f"this button is for plan version {plan_version}, but the plan is now version "
                f"{run.plan_version}. Review the new version and approve that one.")
    if plan_hash != run.plan_hash:  # same version, other content: not a newer plan
        return (f"this button does not match plan version {run.plan_version} as stored (its "
                f"content differs), so it approves nothing; approve from the plan message")
    current = run.model_copy(update={"approvals": live_approvals(run, policy, now=now)})
    return eligibility(current, policy, now=now).grant(user, user_groups)


def live_approvals(run: Run, policy: Policy, *, now: float) -> list[Approval]:
    """``run``'s approvals that have not expired at ``now`` (``approval_ttl``)."""
    ttl = policy.strictest(run.scopes).approval_ttl
    return [a for a in run.approvals if now - a.at <= ttl]


def policy_version(policy: Policy) -> str:
    """The policy's version: a short hash of its content, recorded on each run, approval
    and audit entry, so anyone can tell which rules a decision was made under."""
    return hashlib.sha256(policy.model_dump_json().encode()).hexdigest()[:12]


def approvals_needed(run: Run, policy: Policy) -> int:
    """How many more distinct approvals ``run`` needs: the environments' count from their
    approvers, plus (break-glass) one grant from ``policy.break_glass``."""
    return eligibility(run, policy).remaining


def steer_problem(run: Run, *, user: str, user_groups: Iterable[str], policy: Policy
                  ) -> str | None:
    """Why ``user`` may not modify, reject or cancel ``run`` (None if they may).

    The requester and anyone who may approve its environments may; nobody else, so a
    bystander cannot reset approvals with an edit or close someone else's plan.
    """
    answer = eligibility(run, policy)
    if user == run.requested_by or answer.allows(user, user_groups):
        return None
    return (f"only the requester ({run.requested_by}) or an approver can change this run. "
            f"Who can approve: {answer.who()}")


def judges(answer: Eligibility, approvers: list[str]) -> str:
    """Who may decide a go/no-go: the approval rules' answer, narrowed by the hold's
    ``rollout.judgment.approvers`` (never naming someone either one turns away)."""
    if not approvers:
        return answer.who()
    rule_groups = {g for line in answer.lines for g in line.rule.approvers.groups}
    groups = [a for a in approvers if a in rule_groups]
    users = [a for a in approvers if a not in rule_groups and not answer.excludes(a)
             and (rule_groups or answer.allows(a))]  # a group may hold anyone
    if not users and not groups:
        return (f"nobody: rollout.judgment.approvers ({', '.join(approvers)}) names no one "
                f"the approval rules allow")
    return Approvers(users=users, groups=groups).describe()


def judgment_problem(run: Run, *, user: str, user_groups: Iterable[str], policy: Policy,
                     verdict: Verdict) -> str | None:
    """Why ``user`` may not decide the go/no-go ``run`` waits at (None if they may).

    The rules that say who may approve the run decide (no self-approval where policy
    forbids it), narrowed by the hold's ``rollout.judgment.approvers``; a freeze that began
    meanwhile holds Continue back, never a rollback.
    """
    held = run.awaiting
    if held is None:
        return (f"run {run.id} is not waiting for a go/no-go (it is "
                f"{run.status.value.replace('_', ' ')})")
    groups = list(user_groups)
    answer = eligibility(run, policy)
    if not answer.allows(user, groups):
        return f"you may not decide this go/no-go. Who can: {judges(answer, held.approvers)}"
    if answer.excludes(user):
        return ("you asked for this deploy, and policy forbids approving your own request "
                "here, so its go/no-go is someone else's to decide")
    if held.approvers and user not in held.approvers and not set(groups) & set(held.approvers):
        return (f"only {judges(answer, held.approvers)} may decide this go/no-go "
                f"(rollout.judgment.approvers)")
    if verdict is Verdict.CONTINUE and answer.blocked:
        return f"{answer.blocked.split('. If')[0]}: Continue must wait; Roll back is possible"
    return None
