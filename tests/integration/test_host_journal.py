"""Host events go to the run's host journal (one HSET each), not into a rewrite of the run
record, and every reader still sees the whole run — against a real redis-server."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import redis

from agents.engine.worker import Worker, WorkerOptions
from agents.run.record import Event, EventKind, Run, RunStatus, StepStatus
from agents.services import build_services
from agents.store import LostOwnership, Store
from agents.store.check import StoreCheck
from tests.fixtures.builders import NO_TARGETS, fleet_config, make_plan
from tests.fixtures.polling import wait_until
from tests.integration.test_store import submit

HOSTS = ("web-1", "web-2", "web-3")


def _held_deploy(release: Path) -> list[dict[str, object]]:
    script = (f"for i in $(seq 1 1200); do [ -e {release} ] && exit 0; sleep 0.05; done; "
              f"exit 1")
    return [{"id": "deploy", "tool": "change",
             "params": {"environment": "fleet", "label": "v2", "script": script}}]


def test_hosts_are_journaled_and_read_back_until_the_end_folds_them(
        tmp_path: Path, store: Store, client: redis.Redis) -> None:
    services = build_services(fleet_config(tmp_path), store=store)
    release = tmp_path / "go"
    run = submit(services, make_plan(_held_deploy(release), rollback=[
        {"id": "undo", "tool": "undo", "params": {"environment": "fleet"}}]))
    worker = Worker(services, store, name="w", options=WorkerOptions(block=0.1))
    thread = threading.Thread(target=worker.step)
    thread.start()
    try:
        wait_until(lambda: all(h.pid is not None
                               for h in store.runs.get(run.id).steps["deploy"].hosts.values())
                   and len(store.runs.get(run.id).steps["deploy"].hosts) == 3,
                   what="every host's command to be recorded with its process group")
        record = Run.model_validate_json(client.get(f"dh:run:{run.id}") or b"")
        assert record.steps["deploy"].status is StepStatus.RUNNING
        assert record.steps["deploy"].hosts == {}  # no host event rewrote the record
        assert client.hlen(f"dh:run:{run.id}:hosts") == 3  # one journal field per host
        seen = [store.runs.get(run.id), *store.runs.recent(statuses=[RunStatus.RUNNING])]
        for current in seen:  # every reader folds the journal in
            hosts = current.steps["deploy"].hosts
            assert sorted(hosts) == list(HOSTS)
            assert {h.status for h in hosts.values()} == {StepStatus.RUNNING}
            assert sorted(current.changed_hosts) == list(HOSTS)
    finally:
        release.touch()
        thread.join(60)
    final = store.runs.get(run.id)
    assert final.status is RunStatus.SUCCEEDED
    assert not client.exists(f"dh:run:{run.id}:hosts")  # folded into the record at the end
    stored = Run.model_validate_json(client.get(f"dh:run:{run.id}") or b"")
    assert {h.status for h in stored.steps["deploy"].hosts.values()} == {StepStatus.SUCCEEDED}
    assert StoreCheck(store).violations() == []


def test_a_takeover_folds_the_journal_and_the_old_worker_can_no_longer_write(
        tmp_path: Path, store: Store, client: redis.Redis) -> None:
    services = build_services(fleet_config(tmp_path), store=store)
    queued = submit(services, make_plan(_held_deploy(tmp_path / "go")))
    run = store.leases.claim(queued.id, worker="old", lease=30)
    assert run is not None
    changes = []
    for event in (Event(kind=EventKind.STEP_STARTED, run_id=run.id, step_id="deploy"),
                  Event(kind=EventKind.HOSTS_STARTING, run_id=run.id, step_id="deploy",
                        hosts=list(HOSTS), mutating=True),
                  Event(kind=EventKind.HOST_PID, run_id=run.id, step_id="deploy",
                        host="web-2", pid=4242)):
        run.apply(event)
        if event.kind is EventKind.STEP_STARTED:
            store.leases.save_as_owner(run, worker="old")
        else:
            changes += run.host_changes(event)
    store.leases.record_hosts_as_owner(run.id, changes, worker="old")
    client.delete(f"dh:run:{run.id}:owner")  # the old worker's lease ran out

    taken = store.leases.claim(run.id, worker="new", lease=30)
    assert taken is not None and taken.meta["previous_worker"] == "old"
    assert taken.steps["deploy"].hosts["web-2"].pid == 4242  # what takeover must stop
    assert sorted(taken.changed_hosts) == list(HOSTS)
    assert not client.exists(f"dh:run:{run.id}:hosts")  # folded into the record
    assert Run.model_validate_json(client.get(f"dh:run:{run.id}") or b"") \
        .steps["deploy"].hosts["web-2"].pid == 4242
    with pytest.raises(LostOwnership):
        store.leases.record_hosts_as_owner(run.id, changes, worker="old")
    assert not client.exists(f"dh:run:{run.id}:hosts")


def test_check_folds_a_journal_an_ended_run_left_and_drops_an_orphaned_one(
        store: Store, client: redis.Redis) -> None:
    plan = store.plans.save(make_plan([{"id": "deploy", "tool": "change", "params": {}}]))
    run = Run.for_plan(plan, NO_TARGETS, status=RunStatus.RUNNING)
    run.apply(Event(kind=EventKind.STEP_STARTED, run_id=run.id, step_id="deploy"))
    record = store.runs.create(run.model_copy(update={"status": RunStatus.FAILED}))
    started = Event(kind=EventKind.HOST_STARTED, run_id=run.id, step_id="deploy",
                    host="web-1", attempt=1, mutating=True)
    run.apply(started)  # recorded in the journal, then the run ended without folding it
    change = run.host_changes(started)[0]
    client.hset(f"dh:run:{record.id}:hosts", "plan/deploy/web-1", change.model_dump_json())
    client.hset("dh:run:run-gone:hosts", "plan/deploy/web-1", change.model_dump_json())

    found = {v.key: v for v in StoreCheck(store).violations()}
    assert found[f"dh:run:{record.id}:hosts"].problem == (
        f"is left after run {record.id} ended (failed)")
    assert found["dh:run:run-gone:hosts"].problem == (
        "is the host journal of a run that has no record")
    assert len(found) == 2
    StoreCheck(store).repair(found.values())
    assert StoreCheck(store).violations() == []
    folded = store.runs.get(record.id)
    assert folded.changed_hosts == ["web-1"]  # the host a mutating command may have run on
    assert folded.steps["deploy"].hosts["web-1"].status is StepStatus.RUNNING
    assert not client.exists(f"dh:run:{record.id}:hosts", "dh:run:run-gone:hosts")
