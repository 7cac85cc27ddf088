"""A start waiting for a Redis replica, as the record folds its events and as the faces
show it: the live table, `runs show` and the thread's status message say "waiting for a
Redis replica"; a rollback that went ahead unconfirmed is named with the other writes no
replica confirmed."""

from __future__ import annotations

import json

from rich.console import Console

from agents.plan.model import Plan
from agents.run.record import Event, EventKind, Phase, ReplicaWait, Run, RunStatus
from agents.run.unreplicated import replica_wait_line, unreplicated_note
from bot.slack.blocks import status_blocks
from bot.terminal.render import live_view
from tests.fixtures.builders import NO_TARGETS

PLAN = Plan.model_validate({"goal": "ship", "steps": [{"id": "deploy", "tool": "change"}],
                            "rollback": [{"id": "undo", "tool": "undo"}]})


def _wait(run: Run, status: str, what: str = "the start of deploy on 3 host(s)",
          phase: Phase = Phase.PLAN) -> None:
    wait = ReplicaWait(what=what, since=1_000.0, until=1_030.0)
    run.apply(Event(kind=EventKind.REPLICA_WAIT, run_id=run.id, phase=phase, status=status,
                    wait=wait.model_dump()))


def _shown(renderable: object) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(renderable)
    return " ".join(console.export_text().split())


def test_a_wait_is_in_the_record_and_every_face_says_so_until_it_ends() -> None:
    run = Run.for_plan(PLAN, NO_TARGETS, status=RunStatus.RUNNING)
    _wait(run, "waiting")
    line = "waiting for a Redis replica to confirm the start of deploy on 3 host(s) " \
           "(since 00:16:40, until 00:17:10 UTC at most)"
    assert replica_wait_line(run) == line
    assert line in _shown(live_view(PLAN, run))
    assert line in json.dumps(status_blocks(PLAN, run))
    stored = Run.model_validate_json(run.record_json())  # a reader elsewhere sees it too
    assert replica_wait_line(stored) == line
    _wait(run, "confirmed")
    assert run.replica_wait is None and replica_wait_line(run) is None
    assert "Redis replica" not in json.dumps(status_blocks(PLAN, run))
    assert "unreplicated" not in run.meta


def test_a_rollback_that_went_ahead_unconfirmed_is_named_with_the_unreplicated_writes() -> None:
    run = Run.for_plan(PLAN, NO_TARGETS, status=RunStatus.RUNNING)
    _wait(run, "waiting", "the start of undo on 1 host(s)", Phase.ROLLBACK)
    _wait(run, "timed_out", "the start of undo on 1 host(s)", Phase.ROLLBACK)
    _wait(run, "unconfirmed", "the start of undo on 1 host(s)", Phase.ROLLBACK)
    assert run.replica_wait is None
    assert unreplicated_note(run) == (
        "not confirmed by a Redis replica: rollback: the start of undo on 1 host(s) — a "
        "failover could have lost it; check this run's record and INFO replication")
