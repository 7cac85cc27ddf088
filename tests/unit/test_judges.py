"""Issue 41 §5: "who can" at a go/no-go names only people who may decide it — the approval
rules narrowed by ``rollout.judgment.approvers`` — never someone who would then be refused."""

from __future__ import annotations

from agents.policy.approvals import judgment_problem
from agents.policy.rules import Policy
from agents.run.record import Judgment, Run, RunStatus, Verdict

POLICY = Policy.model_validate({"environments": {"production": {
    "approvers": {"users": ["UAPPROVER1", "UAPPROVER2", "UREQ"]}, "self_approval": False}}})


def held(approvers: list[str]) -> Run:
    run = Run(plan_id="plan-1", plan_version=1, plan_hash="h", requested_by="UREQ",
              environments=["production"], status=RunStatus.RUNNING)
    run.judgments.append(Judgment(hold="ship/1", step="ship", after_batch=1, batches=2,
                                  since=0.0, timeout=60.0, on_timeout=Verdict.ROLLBACK,
                                  approvers=approvers))
    return run


def problem(run: Run, user: str) -> str | None:
    return judgment_problem(run, user=user, user_groups=[], policy=POLICY,
                            verdict=Verdict.CONTINUE)


def test_who_can_honours_the_judgment_approvers() -> None:
    run = held(["UAPPROVER2", "UREQ"])
    said = problem(run, "UOUTSIDER")
    assert said == "you may not decide this go/no-go. Who can: <@UAPPROVER2>"
    assert problem(run, "UAPPROVER2") is None  # the one named may, indeed
    assert problem(run, "UAPPROVER1") == ("only <@UAPPROVER2> may decide this go/no-go "
                                          "(rollout.judgment.approvers)")


def test_judgment_approvers_nobody_may_be_says_so() -> None:
    said = problem(held(["UREQ", "USTRANGER"]), "UAPPROVER1")
    assert said is not None and "nobody: rollout.judgment.approvers (UREQ, USTRANGER)" in said


def test_without_judgment_approvers_the_approval_rules_answer() -> None:
    said = problem(held([]), "UOUTSIDER")
    assert said is not None and "<@UAPPROVER1>, <@UAPPROVER2>" in said and "UREQ" not in said
