"""The store never corrupts a record (issue 22): creates are all-or-nothing and retry under
a fresh id, ids are found by prefix, the queue depth is the truth, reads are bounded."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis
from rich.console import Console

from agents.config import Config
from agents.engine.worker import Worker, WorkerOptions
from agents.errors import AmbiguousId, NotFound, StoreError
from agents.ids import new_id, normalize, short_id
from agents.plan.model import Plan
from agents.run.record import Run, RunStatus
from agents.schedules.model import Schedule
from agents.services import Services, build_services
from agents.store import Store
from agents.store.check import StoreCheck
from agents.store.schedules import ScheduleBook
from bot.terminal.console import ConsoleFlow
from tests.fixtures.builders import NO_TARGETS, make_config, make_plan
from tests.fixtures.store_snapshot import changed, snapshot


class ScriptedIds:
    """An id factory that hands out the ids given, in order (repeats included)."""

    def __init__(self, ids: list[str]):
        self.given = iter(ids)
        self.asked: list[str] = []

    def __call__(self, kind: str) -> str:
        self.asked.append(kind)
        return next(self.given)


def a_plan(plan_id: str | None = None, goal: str = "deploy") -> Plan:
    plan = make_plan([{"id": "s", "tool": "log", "params": {"line": "x"}}], goal=goal)
    return plan.model_copy(update={"id": plan_id}) if plan_id else plan


def a_schedule(schedule_id: str) -> Schedule:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    return Schedule(id=schedule_id, spec="daily", cron="0 2 * * *", request="status staging",
                    created_by="U1", created_at=now, armed_at=now)


# -- ids -----------------------------------------------------------------------------------


def test_ids_sort_by_creation_and_carry_80_random_bits() -> None:
    early, late = new_id("run", now=1_700_000_000.0), new_id("run", now=1_700_000_000.002)
    assert early < late and len(early) == len("run-") + 26
    same_ms = {new_id("run", now=1_700_000_000.0) for _ in range(10_000)}
    assert len(same_ms) == 10_000
    assert short_id(early) == early[:len("run-") + 12] and short_id("run-1a2b3c4d") == "run-1a2b3c4d"
    assert normalize("run", " 01JD3… ") == "run-01jd3" == normalize("run", "RUN-01jd3")


# -- creates are all-or-nothing -----------------------------------------------------------


def test_a_colliding_plan_lands_under_a_fresh_id_and_touches_nothing(
        redis_url: str, client: redis.Redis) -> None:
    ids = ScriptedIds(["plan-taken", "plan-fresh"])
    store = Store.connect(redis_url, ids=ids)
    first = store.plans.save(a_plan("plan-taken", goal="first"))
    store.plans.save(first.revised(goal="first, v2"))
    before = snapshot(client)
    other = store.plans.save(a_plan("plan-taken", goal="other"))
    assert other.id == "plan-fresh" and ids.asked == ["plan", "plan"]
    assert changed(before, snapshot(client)) == {b"dh:plan:plan-fresh:v1",
                                                 b"dh:plan:plan-fresh:latest"}
    assert store.plans.get("plan-taken").version == 2 and store.plans.get("plan-fresh").goal == "other"


def test_saving_the_same_version_twice_is_refused_and_writes_nothing(
        store: Store, client: redis.Redis) -> None:
    plan = store.plans.save(a_plan())
    v2 = store.plans.save(plan.revised(goal="v2"))
    before = snapshot(client)
    with pytest.raises(StoreError, match="version 1 already exists"):
        store.plans.save(plan)
    with pytest.raises(StoreError, match="version 2 already exists"):
        store.plans.save(v2.model_copy(update={"goal": "a rival v2"}))
    assert changed(before, snapshot(client)) == set()


def test_a_colliding_run_lands_under_a_fresh_id_and_touches_nothing(
        redis_url: str, client: redis.Redis) -> None:
    ids = ScriptedIds(["run-taken", "run-fresh"])
    store = Store.connect(redis_url, ids=ids)
    plan = store.plans.save(a_plan())
    first = store.runs.create(Run.for_plan(plan, NO_TARGETS, id="run-taken", created_at=1000.0))
    before = snapshot(client)
    second = store.runs.create(Run.for_plan(plan, NO_TARGETS, id="run-taken", created_at=2000.0))
    assert second.id == "run-fresh" and first.id == "run-taken"
    assert changed(before, snapshot(client)) == {b"dh:run:run-fresh", b"dh:runs",
                                                 b"dh:runs:ids", b"dh:runs:open"}
    assert client.zscore("dh:runs", "run-taken") == 1000.0  # its place in the index kept
    assert store.runs.get("run-taken").created_at == 1000.0


def test_a_create_that_never_finds_a_free_id_writes_nothing(
        redis_url: str, client: redis.Redis) -> None:
    store = Store.connect(redis_url, ids=lambda kind: "run-taken")
    plan = store.plans.save(a_plan())
    store.runs.create(Run.for_plan(plan, NO_TARGETS, id="run-taken"))
    before = snapshot(client)
    with pytest.raises(StoreError, match="no free run id"):
        store.runs.create(Run.for_plan(plan, NO_TARGETS, id="run-taken"))
    assert changed(before, snapshot(client)) == set()


def test_a_colliding_schedule_lands_under_a_fresh_id_and_touches_nothing(
        redis_url: str, client: redis.Redis) -> None:
    book = ScheduleBook(Store.connect(redis_url, ids=ScriptedIds(["sch-fresh"])))
    book.create(a_schedule("sch-taken"))
    before = snapshot(client)
    assert book.create(a_schedule("sch-taken")).id == "sch-fresh"
    assert changed(before, snapshot(client)) == {b"dh:schedule:sch-fresh", b"dh:schedules",
                                                 b"dh:schedules:version"}
    book.remove("sch-fresh")
    before = snapshot(client)
    with pytest.raises(NotFound):
        book.remove("sch-fresh")
    assert changed(before, snapshot(client)) == set()


# -- prefixes ------------------------------------------------------------------------------


def test_runs_are_found_by_any_unique_prefix(store: Store, client: redis.Redis) -> None:
    plan = store.plans.save(a_plan())
    one = store.runs.create(Run.for_plan(plan, NO_TARGETS, id="run-01aaaa1111"))
    two = store.runs.create(Run.for_plan(plan, NO_TARGETS, id="run-01aaab2222"))
    assert store.runs.find("01aaaa").id == one.id
    assert store.runs.find("RUN-01AAAB…").id == two.id
    assert store.runs.find(one.id).id == one.id
    with pytest.raises(AmbiguousId, match="run-01aaaa1111, run-01aaab2222"):
        store.runs.find("01aaa")
    with pytest.raises(NotFound, match="no run 01b"):
        store.runs.find("01b")
    with pytest.raises(NotFound):
        store.runs.find("01a*")  # no glob reaches Redis


def test_runs_written_before_the_prefix_index_still_load(store: Store, client: redis.Redis) -> None:
    plan = store.plans.save(a_plan())
    old = Run.for_plan(plan, NO_TARGETS, id="run-1a2b3c4d")
    client.set("dh:run:run-1a2b3c4d", old.model_dump_json())  # as the old code wrote it
    client.zadd("dh:runs", {"run-1a2b3c4d": old.created_at})
    assert store.runs.get("run-1a2b3c4d").id == old.id
    assert store.runs.find("1a2b").id == old.id


# -- the queue depth is the truth ----------------------------------------------------------


def test_runs_executed_in_process_leave_no_waiting_entry(tmp_path: Path, store: Store) -> None:
    services = build_services(make_config(tmp_path), store=store)
    worker = Worker(services, store, name="console", options=WorkerOptions(block=0.05))
    for _ in range(3):  # as `deckhand run` does: approve (which enqueues), then run here
        plan = store.plans.save(make_plan([{"id": "s", "tool": "log", "params": {"line": "x"}}]))
        run = store.runs.create(Run.for_plan(plan, NO_TARGETS))
        store.runs.approve(run.id, face="cli", user="bob", plan_version=1, plan_hash=plan.hash,
                           policy=services.config.policy)
        assert worker.process(run.id) is not None
    assert store.queue.backlog() == (0, 0) and store.queue.depth() == 0
    assert not worker.step(block=0.05)  # nothing left for a worker either


def _queued_run(tmp_path: Path, store: Store) -> tuple[Services, Run]:
    """A one-step run, approved and so queued (one entry waiting for a worker)."""
    services = build_services(make_config(tmp_path), store=store)
    plan = store.plans.save(make_plan([{"id": "s", "tool": "log", "params": {"line": "x"}}]))
    run = store.runs.create(Run.for_plan(plan, NO_TARGETS))
    store.runs.approve(run.id, face="cli", user="bob", plan_version=1, plan_hash=plan.hash,
                       policy=services.config.policy)
    return services, run


def test_acknowledged_entries_leave_the_stream(tmp_path: Path, store: Store,
                                               client: redis.Redis) -> None:
    services, run = _queued_run(tmp_path, store)
    assert store.queue.backlog() == (1, 0)
    assert Worker(services, store, name="w", options=WorkerOptions(block=0.05)).step()
    assert store.runs.get(run.id).status is RunStatus.SUCCEEDED
    assert client.xlen("dh:queue") == 0 and store.queue.backlog() == (0, 0)


# -- bounded reads -------------------------------------------------------------------------


def test_audit_reads_the_newest_entries_and_one_runs_own(store: Store) -> None:
    for i in range(50):
        store.audit.record("noise", actor="x", run_id=f"run-{i % 5}", n=i)
    mine = store.audit.entries(run_id="run-3", limit=4)
    assert [e.details["n"] for e in mine] == [33, 38, 43, 48]
    assert [e.details["n"] for e in store.audit.entries(limit=3)] == [47, 48, 49]


def test_runs_audited_before_per_run_streams_are_still_found(store: Store,
                                                             client: redis.Redis) -> None:
    fields = {"at": "1.0", "actor": "bob", "action": "approved", "run_id": "run-1a2b3c4d",
              "plan_id": "", "details": "{}"}
    client.xadd("dh:audit", fields)  # as the old code wrote it: the shared stream only
    assert [e.actor for e in store.audit.entries(run_id="run-1a2b3c4d")] == ["bob"]


def test_locks_are_listed_from_the_held_set(store: Store) -> None:
    store.locks.acquire(None, ["staging", "production"], run_id="run-a", worker="w", ttl=30)
    assert [lock.environment for lock in store.locks.all()] == ["production", "staging"]
    store.locks.release(None, ["staging"], run_id="run-a")
    assert [lock.run_id for lock in store.locks.all()] == ["run-a"]
    store.locks.release(None, ["production"], run_id="run-a")
    assert store.locks.all() == []


def test_cancelling_a_queued_run_takes_its_entry_along(tmp_path: Path, store: Store) -> None:
    _, run = _queued_run(tmp_path, store)
    assert store.queue.backlog() == (1, 0)
    assert store.runs.request_cancel(run.id, user="carol").status is RunStatus.CANCELLED
    assert store.queue.backlog() == (0, 0)


def test_schedules_are_found_by_any_unique_prefix(store: Store) -> None:
    book = store.schedules
    book.create(a_schedule("sch-01aa11"))
    book.create(a_schedule("sch-01ab22"))
    assert book.find("01aa").id == "sch-01aa11" and book.find("sch-01ab22").id == "sch-01ab22"
    with pytest.raises(AmbiguousId, match="sch-01aa11, sch-01ab22"):
        book.find("01a")
    with pytest.raises(NotFound):
        book.find("02")


def test_concurrent_creates_under_one_id_all_land_apart(redis_url: str,
                                                        client: redis.Redis) -> None:
    """Eight threads create runs that all start with the same id: each lands exactly once,
    under its own id, and the store keeps every invariant."""
    store = Store.connect(redis_url)
    plan = store.plans.save(a_plan())
    barrier = threading.Barrier(8)
    made: list[str] = []

    def create_many() -> None:
        barrier.wait()
        made.extend(store.runs.create(Run.for_plan(plan, NO_TARGETS, id="run-same")).id for _ in range(20))

    threads = [threading.Thread(target=create_many) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(made)) == 160 and client.zcard("dh:runs") == 160
    assert StoreCheck(store).violations() == []


def test_a_run_waiting_for_a_lock_is_woken_onto_the_queue_in_one_step(store: Store) -> None:
    store.queue.ensure_group()
    store.locks.wait_for(None, "staging", "run-a")
    store.locks.wait_for(None, "staging", "run-a")  # once only
    store.locks.wait_for(None, "staging", "run-b")
    assert store.queue.wake_next(None, "staging") == "run-a" and store.queue.backlog() == (1, 0)
    assert store.queue.wake_next(None, "staging") == "run-b" and store.queue.wake_next(None, "staging") is None
    assert [run for _, run in store.queue.entries()] == ["run-a", "run-b"]


def test_deckhand_run_leaves_no_queue_entry_behind(sample_config: Config, store: Store) -> None:
    """The issue's finding: runs executed by `deckhand run` stayed 'waiting' forever."""
    services = build_services(sample_config, store=store)
    flow = ConsoleFlow(services, Console(record=True, width=120), user="alice",
                       confirm=lambda word: word)
    deployed = flow.handle("deploy v2.3.1 to staging", yes=True)
    status = flow.handle("status production")  # read-only: runs at once, no approval
    assert deployed is not None and deployed.status is RunStatus.SUCCEEDED
    assert status is not None and status.status is RunStatus.SUCCEEDED
    assert store.queue.backlog() == (0, 0)
    assert StoreCheck(store).violations() == []
