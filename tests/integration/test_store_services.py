"""The store keyed by service (docs/services.md 2.4-2.6), on a real redis-server: locks per
(service, environment) and on shared hosts in one compare-and-set, lock queues, approval
counts, history and ``where`` per service, ``runs:svc:S``, and ``check --store`` on the
qualified keys."""

from __future__ import annotations

import threading

import pytest
import redis

from agents.errors import LimitReached, LockHeld
from agents.history.deploys import Deploy
from agents.policy.limits import Limits
from agents.policy.rules import Policy
from agents.run.record import Run, RunStatus
from agents.store import Store
from agents.store.check import StoreCheck

HOST = "10.0.0.5:22"


def deploy(run_id: str, environment: str, version: str, at: float) -> Deploy:
    return Deploy(run_id=run_id, environment=environment, version=version,
                  outcome=RunStatus.SUCCEEDED, requested_by="U1", started_at=at - 5,
                  finished_at=at, hosts={"web-1": version, "web-2": version})


def a_run(run_id: str, service: str | None, status: RunStatus = RunStatus.RUNNING) -> Run:
    return Run(id=run_id, plan_id="plan-1", plan_version=1, plan_hash="h", service=service,
               environments=["production"], status=status, created_at=1_700_000_000.0)


# -- locks ---------------------------------------------------------------------------------


def test_two_services_production_lock_at_once_and_one_services_twice_is_refused(
        store: Store, client: redis.Redis) -> None:
    store.locks.acquire("api", ["production"], run_id="run-api", worker="w1", ttl=60)
    store.locks.acquire("web", ["production"], run_id="run-web", worker="w2", ttl=60)
    store.locks.acquire(None, ["production"], run_id="run-legacy", worker="w3", ttl=60)
    with pytest.raises(LockHeld, match=r"api/production is locked by run-api"):
        store.locks.acquire("api", ["staging", "production"], run_id="run-api2", worker="w",
                            ttl=60)
    assert client.get("dh:lock:api:staging") is None  # all or nothing: staging not taken
    assert {m.decode() for m in client.smembers("dh:locks")} == {
        "api:production", "web:production", "production"}
    assert client.ttl("dh:lock:web:production") > 0
    held = {(i.service, i.environment): i.run_id for i in store.locks.all()}
    assert held == {("api", "production"): "run-api", ("web", "production"): "run-web",
                    (None, "production"): "run-legacy"}
    assert store.locks.of("web") == {"production": store.locks.get("web", "production")}

    store.locks.release("api", ["production"], run_id="run-web")  # not its holder: kept
    assert client.exists("dh:lock:api:production")
    store.locks.release("api", ["production"], run_id="run-api")
    assert not client.exists("dh:lock:api:production")
    assert "api:production" not in {m.decode() for m in client.smembers("dh:locks")}
    assert client.get("dh:lock:web:production") is not None  # web's untouched
    store.locks.acquire("api", ["staging", "production"], run_id="run-api2", worker="w", ttl=60)


def test_host_locks_are_taken_in_the_same_compare_and_set(store: Store,
                                                          client: redis.Redis) -> None:
    store.locks.acquire("api", ["production"], hosts=[HOST], run_id="run-api", worker="w",
                        ttl=60)
    assert client.smembers("dh:hostlocks") == {HOST.encode()}
    with pytest.raises(LockHeld, match=rf"host {HOST} is locked by run-api"):
        store.locks.acquire("web", ["production"], hosts=[HOST], run_id="run-web",
                            worker="w", ttl=60)
    assert client.get("dh:lock:web:production") is None  # nothing of web's taken
    assert [(i.environment, i.run_id) for i in store.locks.hosts()] == [(HOST, "run-api")]

    store.locks.refresh("api", ["production"], hosts=[HOST], run_id="run-api", ttl=600)
    assert client.pttl(f"dh:hostlock:{HOST}") > 60_000  # the heartbeat extends both
    assert client.pttl("dh:lock:api:production") > 60_000
    store.locks.release("api", ["production"], hosts=[HOST], run_id="run-api")
    assert client.keys("dh:hostlock*") == [] and store.locks.hosts() == []
    store.locks.acquire("web", ["production"], hosts=[HOST], run_id="run-web", worker="w",
                        ttl=60)
    assert store.locks.host(HOST) is not None and store.locks.host(HOST).run_id == "run-web"


def test_a_run_waits_in_line_only_while_another_holds_a_lock(store: Store,
                                                            client: redis.Redis) -> None:
    """Queued behind every lock it wants (its environments' and the host's), once; and
    never once the holder has let go (its wake would have found nobody, stranding it)."""
    store.locks.acquire("api", ["production"], hosts=[HOST], run_id="run-api", worker="w",
                        ttl=60)
    for _ in range(2):
        assert store.locks.wait_in_line("web", ["production"], hosts=[HOST], run_id="run-web")
    assert client.lrange(f"dh:hostlockq:{HOST}", 0, -1) == [b"run-web"]
    assert client.lrange("dh:lockq:web:production", 0, -1) == [b"run-web"]
    assert store.queue.wake_next_host(HOST) == "run-web"  # onto the run queue
    store.locks.release("api", ["production"], hosts=[HOST], run_id="run-api")
    assert not store.locks.wait_in_line("web", ["production"], hosts=[HOST], run_id="run-web2")
    assert client.lrange(f"dh:hostlockq:{HOST}", 0, -1) == []
    assert client.lrange("dh:lockq:web:production", 0, -1) == [b"run-web"]


def test_racing_runs_sharing_a_host_never_both_hold_it(store: Store) -> None:
    """Each round, api/production and web/production race for the host they share: one
    wins and the other takes nothing (no lock order to deadlock on, no half-held set)."""
    def take(barrier: threading.Barrier, won: list[str], service: str, run_id: str) -> None:
        barrier.wait()
        try:
            store.locks.acquire(service, ["production"], hosts=[HOST, "local:box"],
                                run_id=run_id, worker="w", ttl=30)
            won.append(run_id)
        except LockHeld:
            pass

    for round_ in range(15):
        barrier, won = threading.Barrier(2), []
        threads = [threading.Thread(target=take, args=(barrier, won, s, f"run-{s}-{round_}"))
                   for s in ("api", "web")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(won) == 1, won
        holders = {i.run_id for i in store.locks.all()} | {i.run_id for i in store.locks.hosts()}
        assert holders == set(won)  # the loser holds not even its own environment
        service = won[0].split("-")[1]
        store.locks.release(service, ["production"], hosts=[HOST, "local:box"], run_id=won[0])


def test_lock_queues_are_per_service(store: Store, client: redis.Redis) -> None:
    store.queue.ensure_group()
    store.locks.wait_for("api", "production", "run-a")
    store.locks.wait_for("api", "production", "run-a")  # once only
    store.locks.wait_for(None, "production", "run-legacy")
    assert client.lrange("dh:lockq:api:production", 0, -1) == [b"run-a"]
    assert client.lrange("dh:lockq:production", 0, -1) == [b"run-legacy"]
    assert store.queue.wake_next("web", "production") is None  # web's queue: nobody
    assert store.queue.wake_next("api", "production") == "run-a"
    assert [run for _, run in store.queue.entries()] == ["run-a"]
    assert client.lrange("dh:lockq:production", 0, -1) == [b"run-legacy"]  # still waits


# -- approval counts -----------------------------------------------------------------------


def test_approval_limits_count_per_service(store: Store, client: redis.Redis) -> None:
    policy = Policy(limits={"production": Limits(runs_per_hour=1)})
    store.commit([store.limits.counted(policy, "api", ["production"], run_id="run-1",
                                       user="U1")])
    with pytest.raises(LimitReached, match="1 production run"):
        store.commit([store.limits.counted(policy, "api", ["production"], run_id="run-2",
                                           user="U1")])
    store.commit([store.limits.counted(policy, "web", ["production"], run_id="run-3",
                                       user="U1")])  # web's production counts apart
    assert client.zrange("dh:limits:api:production:U1", 0, -1) == [b"run-1"]
    assert client.zrange("dh:limits:web:production:U1", 0, -1) == [b"run-3"]
    assert not client.exists("dh:limits:production:U1")
    assert len(store.limits.recent("api", "production", "U1")) == 1
    assert store.limits.recent(None, "production", "U1") == []


# -- history and where ---------------------------------------------------------------------


def test_history_and_where_of_two_services_never_overwrite_each_other(
        store: Store, client: redis.Redis) -> None:
    assert store.history.record("api", "run-api", [deploy("run-api", "production", "v1.0", 100)])
    assert store.history.record("web", "run-web", [deploy("run-web", "production", "v9.0", 200)])
    assert store.history.record(None, "run-old", [deploy("run-old", "production", "v5.0", 300),
                                                  deploy("run-old", "staging", "v5.0", 300)])
    assert not store.history.record("web", "run-web", [deploy("run-web", "production", "x", 9)])

    assert store.history.current("api", "production").version == "v1.0"
    assert store.history.current("web", "production").version == "v9.0"
    assert store.history.current(None, "production").version == "v5.0"
    assert [d.run_id for d in store.history.recent("web", "production")] == ["run-web"]
    assert [f.run_id for f in store.history.facts_since("api", "production", 0)] == ["run-api"]
    assert store.history.versions("api", "production") == ["v1.0"]
    assert {m.decode() for m in client.smembers("dh:history:envs")} == {
        "api:production", "web:production", "production", "staging"}
    assert b'"service"' not in client.get("dh:where:api:production")  # the key says whose

    matrix = store.history.matrix()
    assert [(w.service, w.environment, w.version) for w in matrix] == [
        (None, "production", "v5.0"), (None, "staging", "v5.0"),
        ("api", "production", "v1.0"), ("web", "production", "v9.0")]
    assert [(w.service, w.version) for w in store.history.matrix(["web"])] == [("web", "v9.0")]
    assert [w.environment for w in store.history.everywhere(None)] == ["production", "staging"]
    assert store.history.environments("api") == ["production"]


def test_the_matrix_is_read_in_one_mget(store: Store, client: redis.Redis) -> None:
    for n in range(30):
        service = f"svc{n}"
        store.history.record(service, f"run-{n}", [deploy(f"run-{n}", "production", "v1", n)])
    client.config_resetstat()
    assert len(store.history.matrix()) == 30
    stats = client.info("commandstats")
    assert stats["cmdstat_mget"]["calls"] == 1 and "cmdstat_get" not in stats


# -- runs by service and check --store -------------------------------------------------------


def test_a_named_services_run_is_indexed_with_its_creation(store: Store,
                                                          client: redis.Redis) -> None:
    api = store.runs.create(a_run("run-api", "api", RunStatus.AWAITING_APPROVAL))
    store.runs.create(a_run("run-old", None, RunStatus.AWAITING_APPROVAL))
    assert client.zrange("dh:runs:svc:api", 0, -1, withscores=True) == [
        (b"run-api", api.created_at)]
    assert client.keys("dh:runs:svc:*") == [b"dh:runs:svc:api"]  # the legacy run: none


def test_a_services_runs_stored_before_its_index_are_indexed_once(
        store: Store, client: redis.Redis) -> None:
    store.runs.create(a_run("run-api", "api"))
    client.delete("dh:runs:svc:api")  # as step 1 stored it: `service`, no index
    store.runs.create(a_run("run-web", "web"))
    assert [r.id for r in store.runs.of_service("api")] == ["run-api"]
    assert client.get("dh:runs:svc:complete") == b"1"
    assert [r.id for r in store.runs.of_service("web")] == ["run-web"]
    assert store.runs.of_service("docs") == []


def test_check_store_reads_and_repairs_qualified_and_host_locks(store: Store,
                                                                client: redis.Redis) -> None:
    live = store.runs.create(a_run("run-live", "web", RunStatus.RUNNING))
    store.runs.create(a_run("run-ended", "api", RunStatus.SUCCEEDED))
    store.locks.acquire("web", ["production"], hosts=[HOST], run_id=live.id, worker="w",
                        ttl=60)
    client.set(store.keys.owner(live.id), "w")  # a live worker: not orphaned
    store.locks.acquire("api", ["production"], hosts=["local:box"], run_id="run-ended",
                        worker="gone", ttl=60)
    client.sadd("dh:locks", "api:staging")  # listed, yet free
    client.zrem("dh:runs:svc:web", live.id)  # an index entry lost

    check = StoreCheck(store)
    found = {(v.key, v.problem) for v in check.violations()}
    assert found == {
        ("dh:lock:api:production", "is held by run-ended, which is succeeded"),
        ("dh:hostlock:local:box", "is held by run-ended, which is succeeded"),
        ("dh:locks", "lists api:staging, whose lock is free"),
        ("dh:run:run-live", "is missing from web's index of runs")}
    check.repair(check.violations())
    assert check.violations() == []
    assert client.keys("dh:lock:api:*") == [] and not client.exists("dh:hostlock:local:box")
    assert client.get("dh:lock:web:production") and client.get(f"dh:hostlock:{HOST}")
    assert client.zscore("dh:runs:svc:web", live.id) is not None


def test_check_store_reports_keys_and_runs_of_services_the_config_lacks(
        store: Store, client: redis.Redis) -> None:
    store.runs.create(a_run("run-gone", "gone", RunStatus.SUCCEEDED))
    store.runs.create(a_run("run-old", None, RunStatus.SUCCEEDED))
    store.history.record("gone", "run-gone", [deploy("run-gone", "production", "v1", 1)])
    store.history.record("api", "run-api", [deploy("run-api", "production", "v1", 1)])
    assert StoreCheck(store).violations() == []  # one service: nothing is foreign
    found = {(v.key, v.problem) for v in StoreCheck(store, services=["api"]).violations()}
    assert found == {
        ("dh:history:envs", "lists gone:production, of service gone, which the config lacks"),
        ("dh:runs:svc:gone", "holds 1 run(s) of service gone, which the config lacks"),
        ("dh:runs", "holds 1 run(s) of no service, and the config names no legacy_service "
                    "to own them")}
    assert {v.key for v in StoreCheck(store, services=[None, "api", "gone"]).violations()} \
        == set()
