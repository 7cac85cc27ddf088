"""Issue 41 §0: asking whether someone may approve changes nothing — expired approvals are
left on the run (the store drops them from the record it writes, in its transaction)."""

from __future__ import annotations

from agents.policy.approvals import approval_problem, live_approvals
from agents.policy.rules import Policy
from agents.run.record import Approval, Run, RunStatus

POLICY = Policy.model_validate({"environments": {"production": {
    "approvers": {"users": ["alice", "bob"]}, "min_approvals": 2, "approval_ttl": 60}}})


def test_approval_problem_reads_only() -> None:
    run = Run(plan_id="plan-1", plan_version=1, plan_hash="h", requested_by="carol",
              environments=["production"], status=RunStatus.AWAITING_APPROVAL,
              approvals=[Approval(user="alice", at=0.0, plan_version=1, plan_hash="h")])
    before = run.model_dump()
    # alice's approval expired at 60 s: she may approve again, and nothing was dropped
    assert approval_problem(run, user="alice", user_groups=[], plan_version=1, plan_hash="h",
                            policy=POLICY, now=100.0) is None
    assert run.model_dump() == before
    assert live_approvals(run, POLICY, now=100.0) == []
    assert approval_problem(run, user="alice", user_groups=[], plan_version=1, plan_hash="h",
                            policy=POLICY, now=30.0) is not None  # not expired yet: refused
