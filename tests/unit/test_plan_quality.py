"""What became of a planner's plans, from the run record: the fold and its bounded tally."""

from __future__ import annotations

from agents.evaluation.quality import OTHER, Maker, PlanRef, fate, fates, tally
from agents.plan.model import Plan, PlannerInfo
from agents.run.record import Approval, Event, EventKind, Run, RunStatus
from tests.fixtures.builders import NO_TARGETS, make_plan

LLM = PlannerInfo(name="llm", model="m1", prompt="plan", prompt_version="aaaaaaaaaaaa")


def _plan(info: PlannerInfo = LLM, label: str = "v1") -> Plan:
    plan = make_plan([{"id": "deploy", "tool": "change", "params": {"label": label}}])
    return plan.model_copy(update={"planner": info})


def _run(plan: Plan, *moves: RunStatus) -> Run:
    run = Run.for_plan(plan, NO_TARGETS)
    for status in moves:
        if status is RunStatus.APPROVED:
            run.approvals.append(Approval(user="bob", plan_version=plan.version,
                                          plan_hash=plan.hash))
        run.move(status)
    return run


def test_a_plan_approved_as_it_was_that_succeeded() -> None:
    plan = _plan()
    run = _run(plan, RunStatus.APPROVED, RunStatus.RUNNING, RunStatus.SUCCEEDED)
    one = fate(run, plan)
    assert one.maker == Maker("llm", "aaaaaaaaaaaa", "m1")
    assert one.outcomes == {"planned", "approved_unchanged", "succeeded"} and one.changes == 0


def test_a_modified_plan_counts_its_diff_and_is_not_approved_unchanged() -> None:
    plan = _plan()
    edited = plan.revised(steps=[{"id": "deploy", "tool": "change", "params": {"label": "v2"}},
                                 {"id": "tell", "tool": "log", "params": {"line": "x"}}])
    run = _run(plan, RunStatus.AWAITING_APPROVAL, RunStatus.APPROVED, RunStatus.RUNNING,
               RunStatus.ROLLING_BACK, RunStatus.ROLLED_BACK)
    run.modified_versions, run.plan_versions = [2], [1, 2]
    one = fate(run, plan, edited)
    assert one.outcomes == {"planned", "modified", "rolled_back"} and one.changes == 2


def test_rejected_and_replanned_then_failed() -> None:
    plan = _plan()
    assert fate(_run(plan, RunStatus.REJECTED), plan).outcomes == {"planned", "rejected"}
    run = _run(plan, RunStatus.APPROVED, RunStatus.RUNNING)
    revised = plan.revised(goal="another way")
    run.apply(Event(kind=EventKind.REPLANNED, run_id=run.id, plan_hash=revised.hash,
                    plan=revised.model_dump(mode="json")))
    run.move(RunStatus.FAILED)
    assert fate(run, plan).outcomes == {"planned", "approved_unchanged", "replanned", "failed"}


def test_a_run_cancelled_before_approval_was_not_approved() -> None:
    plan = _plan()
    assert fate(_run(plan, RunStatus.CANCELLED), plan).outcomes == {"planned"}
    assert Maker.of(_plan(PlannerInfo(name="playbook deploy"))) == Maker("playbook")


def test_tally_keeps_the_busiest_makers_and_sums_the_rest_as_other() -> None:
    fates = []
    for index in range(12):
        plan = _plan(LLM.model_copy(update={"prompt_version": f"{index:012x}"}))
        fates += [fate(_run(plan, RunStatus.REJECTED), plan)] * (index + 1)
    table = tally(fates, max_makers=10)
    assert len(table) == 11
    assert Maker("llm", f"{11:012x}", "m1") in table
    assert Maker("llm", f"{0:012x}", "m1") not in table
    other = table[Maker("llm", OTHER, OTHER)]
    assert other.outcomes["planned"] == 1 + 2 and other.outcomes["rejected"] == 3


def test_fates_read_the_plans_they_need_once_and_skip_what_says_nothing() -> None:
    plan, gone, dry = _plan(), _plan(label="gone"), _plan(label="dry")
    edited = _run(plan, RunStatus.AWAITING_APPROVAL, RunStatus.REJECTED)
    edited.modified_versions, edited.plan_versions = [2], [1, 2]  # its version 2 is gone
    dry_run = _run(dry, RunStatus.APPROVED)
    dry_run.meta["dry_run"] = True
    asked: list[list[PlanRef]] = []

    def plans_at(refs: list[PlanRef]) -> list[Plan | None]:
        asked.append(refs)
        return [plan if ref == (plan.id, 1) else None for ref in refs]

    found = fates([edited, _run(gone, RunStatus.REJECTED), dry_run], plans_at)
    assert asked == [[(plan.id, 1), (plan.id, 2), (gone.id, 1)]]
    assert [f.outcomes for f in found] == [{"planned", "modified", "rejected"}]
    assert found[0].changes == 0  # modified, but the size is unknown
    many = [_plan(LLM.model_copy(update={"prompt_version": f"{i:012x}"})) for i in range(12)]
    assert len(tally(fate(_run(p), p) for p in many)) == 12  # unbounded unless asked
