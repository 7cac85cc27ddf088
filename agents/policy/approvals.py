"""How the policy applies to a run: who may approve it now, how many approvals it still
needs, and who may modify, reject or cancel it. The store calls these inside its
compare-and-set, so an answer holds when it is written."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from agents.policy.freeze import frozen
from agents.policy.rules import Policy
from agents.run.record import Run, RunStatus


def approval_problem(run: Run, *, user: str, user_groups: Iterable[str], plan_version: int,
                     plan_hash: str, policy: Policy, now: float) -> str | None:
    """Why ``user`` may not approve ``run`` now (a message for them), or None if they may.

    Called inside the store's atomic transition, so the answer holds when it is written.
    Expired approvals are dropped from ``run.approvals`` as a side effect.
    """
    if run.status is not RunStatus.AWAITING_APPROVAL:
        return f"this run is {run.status.value.replace('_', ' ')}; there is nothing to approve"
    if plan_version != run.plan_version:
        return (f"this button is for plan version {plan_version}, but the plan is now version "
                f"{run.plan_version}. Review the new version and approve that one.")
    if plan_hash != run.plan_hash:  # same version, other content: not a newer plan
        return (f"this button does not match plan version {run.plan_version} as stored (its "
                f"content differs), so it approves nothing; approve from the plan message")
    envs = run.scopes
    rule = policy.strictest(envs)
    blocked = frozen(policy.freeze, envs, datetime.fromtimestamp(now, UTC))
    if blocked is not None and not run.break_glass:
        return blocked.describe()
    glass = run.break_glass is not None and policy.break_glass.allows(user, user_groups)
    if not policy.may_approve(user, user_groups, envs) and not glass:
        return f"you are not allowed to approve this plan. Who can: {policy.approvers_text(envs)}"
    if not rule.self_approval and user == run.requested_by:
        return "you asked for this deploy, and policy forbids approving your own request here"
    run.approvals = [a for a in run.approvals if now - a.at <= rule.approval_ttl]
    if any(a.user == user for a in run.approvals):
        missing = rule.min_approvals - len(run.approvals)
        return f"you already approved; {missing} more approval(s) needed from someone else"
    return None


def approvals_needed(run: Run, policy: Policy) -> int:
    """How many more distinct approvals ``run`` needs (break-glass: one more, and one of
    them from ``policy.break_glass``)."""
    wanted = policy.strictest(run.scopes).min_approvals
    if run.break_glass is None:
        return max(0, wanted - len(run.approvals))
    granted = any(a.break_glass for a in run.approvals)
    return max(wanted + 1 - len(run.approvals), 0 if granted else 1)


def steer_problem(run: Run, *, user: str, user_groups: Iterable[str], policy: Policy
                  ) -> str | None:
    """Why ``user`` may not modify, reject or cancel ``run`` (None if they may).

    The requester and anyone who may approve its environments may; nobody else, so a
    bystander cannot reset approvals with an edit or close someone else's plan.
    """
    if user == run.requested_by or policy.may_approve(user, user_groups, run.scopes):
        return None
    return (f"only the requester ({run.requested_by}) or an approver can change this run. "
            f"Who can approve: {policy.approvers_text(run.scopes)}")
