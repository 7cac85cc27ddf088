"""Issue 33: a tampered plan hash on a button reads as what it is, not as a newer version."""

from __future__ import annotations

import time

from agents.plan.targets import PlanTargets
from agents.policy.approvals import approval_problem
from agents.policy.rules import Policy
from agents.run.record import Run
from tests.fixtures.builders import make_plan


def problem(run: Run, *, version: int, plan_hash: str) -> str | None:
    return approval_problem(run, user="UBOB", user_groups=[], plan_version=version,
                            plan_hash=plan_hash, policy=Policy(require_rollback=False),
                            now=time.time())


def test_a_tampered_hash_is_not_called_a_new_version() -> None:
    plan = make_plan([{"id": "a", "tool": "sh", "params": {"script": "true"}}])
    run = Run.for_plan(plan, PlanTargets({}))
    said = problem(run, version=1, plan_hash="0" * 64)
    assert said is not None and "but the plan is now version 1" not in said
    assert said.startswith("this button does not match plan version 1 as stored")
    stale = problem(run.model_copy(update={"plan_version": 2}), version=1,
                    plan_hash=run.plan_hash)
    assert stale is not None and "for plan version 1, but the plan is now version 2" in stale
    assert problem(run, version=1, plan_hash=run.plan_hash) is None
