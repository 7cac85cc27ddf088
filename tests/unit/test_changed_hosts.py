"""Which hosts a run counts as changed (what its rollback visits), from its events alone."""

from __future__ import annotations

from agents.run.record import Event, EventKind, Run
from tests.fixtures.builders import NO_TARGETS, make_plan


def _run() -> Run:
    plan = make_plan([{"id": "a", "tool": "change"}, {"id": "b", "tool": "change"}])
    return Run.for_plan(plan, NO_TARGETS)


def _apply(run: Run, kind: EventKind, step: str, **fields: object) -> None:
    run.apply(Event(kind=kind, run_id=run.id, step_id=step, **fields))


def _start(run: Run, step: str) -> None:
    _apply(run, EventKind.STEP_STARTED, step)
    _apply(run, EventKind.HOSTS_STARTING, step, hosts=["web-1"], mutating=True)
    _apply(run, EventKind.HOST_STARTED, step, host="web-1", attempt=1, mutating=True)


def test_a_withdrawn_start_keeps_a_host_another_step_is_changing() -> None:
    run = _run()
    _start(run, "a")
    _start(run, "b")  # two mutating steps in parallel on one host
    _apply(run, EventKind.HOST_FINISHED, "a", host="web-1", status="failed",
           error="not started: replication timed out")  # a never ran there
    assert run.changed_hosts == ["web-1"]  # b may be changing it: its rollback must visit it
    _apply(run, EventKind.HOST_FINISHED, "b", host="web-1", status="succeeded", mutating=True)
    assert run.changed_hosts == ["web-1"]


def test_a_withdrawn_start_keeps_a_host_an_earlier_step_changed() -> None:
    run = _run()
    _start(run, "a")
    _apply(run, EventKind.HOST_FINISHED, "a", host="web-1", status="succeeded", mutating=True)
    _start(run, "b")
    _apply(run, EventKind.HOST_FINISHED, "b", host="web-1", status="failed", error="unreachable")
    assert run.changed_hosts == ["web-1"]


def test_a_start_that_never_ran_anywhere_is_withdrawn() -> None:
    run = _run()
    _start(run, "a")
    _apply(run, EventKind.HOST_FINISHED, "a", host="web-1", status="failed", error="unreachable")
    assert run.changed_hosts == []
