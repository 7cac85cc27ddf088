"""A worker that dies mid-command: the one that takes the run over first stops what the
command left running, so nothing lands after the rollback."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from agents.engine.recorder import RunRecorder
from agents.engine.worker import Worker, WorkerOptions
from agents.run.record import Event, EventKind, RunStatus, StepStatus
from agents.services import build_services
from agents.store import Store
from tests.fixtures.builders import make_config, make_plan
from tests.fixtures.polling import wait_until
from tests.fixtures.redis_server import RedisServer
from tests.integration.test_store import _spawn_worker, config_for, gated_plan, submit
from tools.runners.base import CancelToken

TOOLS = """
tools:
  slow_change:
    description: start changing the host, finish three seconds later
    command: "echo started > {vars.flag}; sleep 3; echo landed >> {vars.log}"
    target: environment
    mutates: true
    rollback: undo
  undo:
    description: put the host back
    command: "echo rolled back >> {vars.log}"
    target: environment
    mutates: true
vars:
  flag: "{config_dir}/started"
  log: "{config_dir}/log.txt"
"""


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def test_takeover_stops_the_dead_workers_command_before_rolling_back(
        tmp_path: Path, store: Store, redis_url: str) -> None:
    config = make_config(tmp_path, tools=TOOLS)
    services = build_services(config, store=store)
    plan = make_plan([{"id": "change", "tool": "slow_change",
                       "params": {"environment": "staging"}}],
                     rollback=[{"id": "undo", "tool": "undo",
                                "params": {"environment": "staging"}}])
    run = submit(services, plan)
    proc = _spawn_worker(config, redis_url, "doomed")
    try:
        wait_until(lambda: (tmp_path / "started").exists(), what="the slow change to start")
        wait_until(lambda: store.runs.get(run.id).steps["change"].hosts.get("web-1") is not None
                   and store.runs.get(run.id).steps["change"].hosts["web-1"].pid is not None,
                        what="the command's process group in the record")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    pgid = store.runs.get(run.id).steps["change"].hosts["web-1"].pid
    assert pgid is not None and not _group_gone(pgid)  # orphaned, still running

    rescuer = Worker(services, store, name="rescuer",
                     options=WorkerOptions(lease=1, claim_after=1, block=0.1))
    wait_until(lambda: rescuer.step(block=0.1) and store.runs.get(run.id).status.terminal,
               timeout=30, what="the rescuer to take the run over")
    final = store.runs.get(run.id)
    assert final.status is RunStatus.ROLLED_BACK
    wait_until(lambda: _group_gone(pgid), timeout=10, what="the leftover to be gone")
    assert (tmp_path / "log.txt").read_text().splitlines() == ["rolled back"]
    stopped = [e for e in store.audit.entries(run_id=run.id) if e.action == "leftover_stopped"]
    assert stopped and stopped[0].details["outcome"] == "stopped"


def test_a_redis_outage_longer_than_the_lease_does_not_cancel_the_run(
        tmp_path: Path, own_redis: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    store = Store.connect(own_redis.url)
    services = build_services(config_for(tmp_path), store=store)
    run = submit(services, gated_plan(tmp_path))
    worker = Worker(services, store, name="steady", options=WorkerOptions(lease=1, block=0.1))
    thread = threading.Thread(target=worker.step)
    thread.start()
    try:
        wait_until(lambda: (tmp_path / "started").exists(), what="the gate step to start")
        own_redis.stop()
        # each failed heartbeat has first spent the client's retry budget (over a second),
        # so two of them mean the 1 s lease ran out while Redis was away
        wait_until(lambda: len([r for r in caplog.records
                                if r.getMessage().startswith("heartbeat for")]) >= 2,
                   timeout=30, what="two heartbeats to fail during the outage")
        own_redis.start()
        (tmp_path / "go").touch()
        thread.join(60)
    finally:
        (tmp_path / "go").touch()
    final = store.runs.get(run.id)
    assert final.status is RunStatus.SUCCEEDED, final.reason
    assert final.worker == "steady" and store.locks.all() == []


def test_the_reconciler_requeues_a_run_nothing_would_ever_move(tmp_path: Path,
                                                               store: Store) -> None:
    services = build_services(config_for(tmp_path), store=store)
    (tmp_path / "go").touch()
    run = submit(services, gated_plan(tmp_path))
    store.queue.ensure_group()
    entry = store.queue.read("ghost", block=0.1)  # a worker took the entry and died
    assert entry is not None
    store.queue.ack(entry[0])
    worker = Worker(services, store, name="w1", options=WorkerOptions(block=0.1))
    assert store.runs.get(run.id).status is RunStatus.QUEUED  # with no entry: stuck for good
    assert worker.reconcile() == [run.id]
    assert worker.reconcile() == []  # queued again once, not twice
    assert worker.step(block=0.1)
    assert store.runs.get(run.id).status is RunStatus.SUCCEEDED
    assert "reconciled" in [e.action for e in store.audit.entries(run_id=run.id)]


def test_audit_entries_of_an_outage_land_once_redis_is_back(tmp_path: Path,
                                                            own_redis: RedisServer) -> None:
    store = Store.connect(own_redis.url)
    services = build_services(config_for(tmp_path), store=store)
    run = submit(services, gated_plan(tmp_path))
    mine = store.leases.claim(run.id, worker="w", lease=600)
    assert mine is not None
    recorder = RunRecorder(leases=store.leases, audit=store.audit, plans=store.plans,
                           worker="w", token=CancelToken())

    def emit(kind: EventKind, step: str, **fields: Any) -> None:
        event = Event(kind=kind, run_id=run.id, step_id=step, **fields)
        mine.apply(event)
        recorder(event, mine)

    emit(EventKind.STEP_STARTED, "first")
    own_redis.stop()
    emit(EventKind.STEP_FINISHED, "first", status="succeeded")  # record and audit fail...
    assert recorder.pending  # ...and are kept in the recorder's outbox
    during = time.time()
    own_redis.start()
    emit(EventKind.STEP_STARTED, "wait")  # the next write carries both

    (entry,) = [e for e in store.audit.entries(run_id=run.id) if e.action == "step_finished"]
    assert entry.details["step"] == "first" and entry.at < during  # when it happened
    assert store.audit.verify().ok  # linked when written: the chain stays whole
    assert store.runs.get(run.id).steps["first"].status is StepStatus.SUCCEEDED


def test_a_worker_that_lost_its_run_starts_no_command_and_says_why(
        tmp_path: Path, store: Store, redis_url: str) -> None:
    services = build_services(config_for(tmp_path), store=store)
    run = submit(services, gated_plan(tmp_path))
    worker = Worker(services, store, name="loser", options=WorkerOptions(lease=2, block=0.1))
    thread = threading.Thread(target=worker.step)
    thread.start()
    try:
        wait_until(lambda: (tmp_path / "started").exists(), what="the gate step to start")
        # another worker's claim, as after an outage that outlived the lease
        redis.Redis.from_url(redis_url).set(store.keys.owner(run.id), "thief", px=60_000)
        wait_until(lambda: "lease_lost" in [e.action for e in store.audit.entries(run_id=run.id)],
                   timeout=30, what="the worker to learn it lost the run")
    finally:
        (tmp_path / "go").touch()
        thread.join(60)
    # neither the next step nor the rollback's local step ran here: they are the thief's
    assert (tmp_path / "log.txt").read_text().splitlines() == ["first"]
    audit = store.audit.entries(run_id=run.id)
    (lost,) = [e for e in audit if e.action == "lease_lost"]
    assert lost.actor == "loser" and "lost the run to another worker" in lost.details["reason"]
    # what the loser did is audited (its running command, stopped here); its view of a
    # run that is no longer its own is not: no rollback it could not start, no run_finished
    did = [(e.action, e.details.get("step"), e.details.get("status")) for e in audit
           if e.actor == "loser" and e.action not in ("started", "lease_lost")]
    assert did == [("step_finished", "first", "succeeded"), ("step_finished", "wait", "cancelled")]
    assert store.runs.get(run.id).status is RunStatus.RUNNING  # the thief's to finish


def test_audit_entries_kept_in_an_outage_land_although_the_run_was_lost_meanwhile(
        tmp_path: Path, own_redis: RedisServer) -> None:
    store = Store.connect(own_redis.url)
    services = build_services(config_for(tmp_path), store=store)
    run = submit(services, gated_plan(tmp_path))
    mine = store.leases.claim(run.id, worker="w", lease=600)
    assert mine is not None
    token = CancelToken()
    recorder = RunRecorder(leases=store.leases, audit=store.audit, plans=store.plans,
                           worker="w", token=token)

    def emit(kind: EventKind, step: str | None = None, **fields: Any) -> None:
        event = Event(kind=kind, run_id=run.id, step_id=step, **fields)
        mine.apply(event)
        recorder(event, mine)

    emit(EventKind.STEP_STARTED, "first")
    own_redis.stop()
    emit(EventKind.STEP_FINISHED, "first", status="succeeded")  # kept in the outbox
    own_redis.start()
    # meanwhile the lease ran out and another worker took the run over
    redis.Redis.from_url(own_redis.url).set(store.keys.owner(run.id), "thief", px=60_000)
    emit(EventKind.STEP_STARTED, "wait")  # refused: the run is the thief's
    emit(EventKind.RUN_FINISHED, status="failed", error="cancelled")  # not this worker's to say
    assert token.cancelled and not recorder.pending
    assert recorder.durable("the next command") is not None  # nothing more starts here
    actions = [(e.actor, e.action) for e in store.audit.entries(run_id=run.id)]
    assert ("w", "step_finished") in actions  # what it did before the loss landed
    assert ("w", "run_finished") not in actions
    stored = store.runs.get(run.id)  # the loser's kept record never overwrote the owner's
    assert stored.status is RunStatus.RUNNING
    assert stored.steps["first"].status is StepStatus.RUNNING
