"""``deckhand check --store``: each invariant broken by hand (as older code could), found
with its key, and repaired without deleting a record."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis

from agents.engine.worker import Worker, WorkerOptions
from agents.plan.model import Plan
from agents.run.record import Run, RunStatus
from agents.services import build_services
from agents.store import Store
from agents.store.check import StoreCheck
from bot.cli import main
from tests.fixtures.builders import NO_TARGETS, make_config, make_plan
from tests.fixtures.store_snapshot import snapshot


def log_plan() -> Plan:
    return make_plan([{"id": "s", "tool": "log", "params": {"line": "x"}}])


def approved_run(store: Store, tmp_path: Path) -> Run:
    services = build_services(make_config(tmp_path), store=store)
    plan = store.plans.save(log_plan())
    run = store.runs.create(Run.for_plan(plan, NO_TARGETS))
    return store.runs.approve(run.id, face="cli", user="bob", plan_version=1, plan_hash=plan.hash,
                              policy=services.config.policy)


def problems(store: Store) -> list[str]:
    return [v.describe() for v in StoreCheck(store).violations()]


def test_a_store_used_normally_keeps_every_invariant(tmp_path: Path, store: Store) -> None:
    services = build_services(make_config(tmp_path), store=store)
    done = approved_run(store, tmp_path)
    assert Worker(services, store, name="w", options=WorkerOptions(block=0.05)).step()
    waiting = approved_run(store, tmp_path)
    plan = store.plans.get(waiting.plan_id)
    store.plans.save(plan.revised(goal="v2"))
    store.locks.acquire(None, ["staging"], run_id=waiting.id, worker="w", ttl=30)
    assert store.runs.get(done.id).status is RunStatus.SUCCEEDED
    assert problems(store) == []


def test_each_broken_invariant_is_reported_with_its_key_and_repaired(
        tmp_path: Path, store: Store, client: redis.Redis) -> None:
    plan = store.plans.save(log_plan())
    store.plans.save(plan.revised(goal="v2"))
    client.set(f"dh:plan:{plan.id}:latest", 1)  # the half-write of issue 22
    client.zadd("dh:runs", {"run-ghost": 1.0})  # an index entry with no record
    unindexed = Run.for_plan(plan, NO_TARGETS, id="run-1a2b3c4d")
    client.set("dh:run:run-1a2b3c4d", unindexed.model_dump_json())  # as old code wrote it
    stuck = approved_run(store, tmp_path)
    entry = client.xrange("dh:queue")[0][0]
    client.xdel("dh:queue", entry)  # queued, but no entry and no worker
    ended = store.runs.create(Run.for_plan(plan, NO_TARGETS, status=RunStatus.SUCCEEDED))
    store.locks.acquire(None, ["production"], run_id=ended.id, worker="gone", ttl=300)
    client.sadd("dh:locks", "qa")  # a lock that expired
    before = snapshot(client)

    found = problems(store)
    assert f"dh:plan:{plan.id}:latest: says version 1, but the newest stored is 2" in found
    assert "dh:runs: names run-ghost, which has no record" in found
    assert "dh:run:run-1a2b3c4d: is missing from the runs indexes" in found
    assert f"dh:run:{stuck.id}: is queued with no live worker and no queue entry" in found
    assert f"dh:lock:production: is held by {ended.id}, which is succeeded" in found
    assert "dh:locks: lists qa, whose lock is free" in found
    assert "dh:run:run-1a2b3c4d: is open but missing from the index of open runs" in found
    assert len(found) == 7

    assert main(["check", "--store", "--repair"]) == 0
    assert problems(store) == []
    records = [k for k in before if re.fullmatch(rb"dh:run:[^:]+|dh:plan:[^:]+:v\d+", k)]
    assert len(records) == 6
    after = snapshot(client)
    assert all(after[k] == before[k] for k in records)  # no record deleted or changed
    assert store.plans.get(plan.id).version == 2 and store.runs.find("1a2b").id == unindexed.id
    assert store.queue.backlog() == (1, 0)  # the stuck run waits for a worker again


def test_finished_entries_left_in_the_queue_are_trimmed(tmp_path: Path, store: Store,
                                                        client: redis.Redis) -> None:
    store.queue.ensure_group()
    run = approved_run(store, tmp_path)
    entry_id, _ = store.queue.read("old-worker", block=0.05) or ("", "")
    client.xack("dh:queue", "workers", entry_id)  # acknowledged, not deleted: older code
    store.runs.transition(run.id, RunStatus.RUNNING)
    store.runs.transition(run.id, RunStatus.SUCCEEDED)
    assert [v.key for v in StoreCheck(store).violations()] == ["dh:queue"]
    checker = StoreCheck(store)
    checker.repair(checker.violations())
    assert client.xlen("dh:queue") == 0 and problems(store) == []


def test_the_command_reports_and_exits_non_zero(store: Store, client: redis.Redis,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    client.zadd("dh:runs", {"run-ghost": 1.0})
    assert main(["check", "--store"]) == 1
    out = capsys.readouterr().out
    assert "dh:runs: names run-ghost, which has no record" in out and "1 violation" in out
    assert client.zscore("dh:runs", "run-ghost") == 1.0  # nothing changed without --repair


@pytest.fixture(autouse=True)
def _redis_env(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)


def test_the_depth_stays_true_after_a_cancel_and_a_finish(tmp_path: Path, store: Store) -> None:
    # Redis's own lag for the group is wrong here (2: it estimates past the deleted entries)
    store.queue.ensure_group()
    first, second, third = (approved_run(store, tmp_path) for _ in range(3))
    entry_id, run_id = store.queue.read("w", block=0.05) or ("", "")
    assert run_id == first.id
    store.runs.request_cancel(second.id, user="carol")  # waiting: its entry is deleted unread
    store.runs.transition(first.id, RunStatus.RUNNING)
    store.runs.transition(first.id, RunStatus.SUCCEEDED)
    store.queue.ack(entry_id)
    assert store.queue.backlog() == (1, 0)  # only the third waits
    assert problems(store) == []
