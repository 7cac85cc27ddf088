"""Host changes: a record plus the host changes after it is the run the events made.

The store keeps a running run as its record (written on step- and run-level events) plus a
host journal (the newest change per phase, step and host); a Slack thread or terminal keeps
a mirror folded the same way. Both must give the Run that folding every event gives.
"""

from __future__ import annotations

from itertools import zip_longest

from agents.plan.targets import PlanTargets
from agents.run.mirror import RunMirror
from agents.run.record import HOST_EVENTS, Event, EventKind, Run, RunStatus
from agents.store.runs import journal_field, with_journal
from tests.fixtures.builders import fan_out_events, fleet, make_plan

HOSTS = fleet(40)


def _run() -> Run:
    plan = make_plan([{"id": "deploy", "tool": "change", "params": {}},
                      {"id": "check", "tool": "log", "params": {}}],
                     rollback=[{"id": "undo", "tool": "undo", "params": {}}])
    return Run.for_plan(plan, PlanTargets({}), status=RunStatus.APPROVED)


def _events(run: Run) -> list[Event]:
    """Two steps on the same hosts at once after one record write: the deploy fails on some
    hosts, a read-only check runs (some still running), and the last host's start is
    withdrawn (it never ran there) after the check had seen it counted as changed."""
    deploy = fan_out_events(run.id, "deploy", HOSTS[:-1], failed=HOSTS[3:6])
    check = fan_out_events(run.id, "check", HOSTS, running=HOSTS[10:], mutating=False)
    hosts = [e for pair in zip_longest(deploy[1:], check[1:]) for e in pair if e is not None]
    return [Event(kind=EventKind.RUN_STARTED, run_id=run.id), deploy[0], check[0],
            Event(kind=EventKind.HOSTS_STARTING, run_id=run.id, step_id="deploy",
                  hosts=HOSTS[-1:], mutating=True),
            *hosts,
            Event(kind=EventKind.HOST_FINISHED, run_id=run.id, step_id="deploy",
                  host=HOSTS[-1], status="failed", error="not started", mutating=False)]


def _stored(run: Run, events: list[Event]) -> tuple[Run, dict[bytes, bytes]]:
    """Fold ``events`` into ``run`` and keep what the worker would have written: the record
    at the last step- or run-level event, and the journal written after it."""
    record, journal = run.model_copy(deep=True), {}
    for event in events:
        run.apply(event)
        if event.kind in HOST_EVENTS:
            journal |= {journal_field(c).encode(): c.model_dump_json().encode()
                        for c in run.host_changes(event)}
        else:
            record, journal = run.model_copy(deep=True), {}
    return record, journal


def _same(a: Run, b: Run) -> bool:
    return a.model_dump(exclude={"seq"}) == b.model_dump(exclude={"seq"})


def test_the_record_and_its_journal_give_the_run_the_events_give() -> None:
    run = _run()
    record, journal = _stored(run, _events(run))
    assert journal and not _same(record, run)  # the record alone is behind
    folded = with_journal(record, journal)
    assert _same(folded, run)
    assert folded.changed_hosts == run.changed_hosts and HOSTS[-1] not in run.changed_hosts
    assert len(run.steps["check"].hosts) == len(HOSTS)


def test_changes_older_than_the_record_are_ignored() -> None:
    """A change that lands after a newer record (its write was slower) must not undo it:
    here a replan dropped the deploy's results after the change was taken."""
    run = _run()
    record, journal = _stored(run, _events(run)[:20])
    assert journal
    run.apply(Event(kind=EventKind.STEP_FINISHED, run_id=run.id, step_id="deploy",
                    status="failed"))
    run.steps["deploy"].hosts.clear()
    newer = run.model_copy(deep=True)
    assert _same(with_journal(newer, journal), run)


def test_a_mirror_fed_the_events_is_the_run() -> None:
    run = _run()
    mirror = RunMirror()
    for event in _events(run):
        run.apply(event)
        mirror(event, run)
    copy = mirror.snapshot()
    assert copy is not None and _same(copy, run)
