"""The durable store and workers against a real redis-server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

from agents.config import Config
from agents.engine.worker import Worker, WorkerOptions
from agents.errors import ApprovalRefused, LockHeld, StoreUnavailable
from agents.ids import short_id
from agents.plan.model import Plan
from agents.run.record import Run, RunStatus, StepStatus
from agents.services import Services, build_services
from agents.store import Store
from tests.fixtures.builders import NO_TARGETS, make_config, make_plan
from tests.fixtures.polling import wait_until
from tests.fixtures.redis_server import RedisServer

GATE_TOOLS = """
tools:
  log:
    description: append a line to the shared log
    command: "echo {line} >> {vars.log}"
    params: {line: {type: string}}
  gate:
    description: mark started, then wait (bounded) for a release file
    command: "echo run >> {started}; for i in $(seq 1 1200); do [ -e {release} ] && exit 0; sleep 0.05; done; exit 1"
    params: {started: {type: string}, release: {type: string}}
    timeout: 90
    idempotent: IDEMPOTENT
  change:
    description: a mutating step on an environment
    command: "echo change {host.name} >> {vars.log}"
    target: environment
    mutates: true
    rollback: undo
  undo:
    description: undo a change
    command: "echo undo {host.name} >> {vars.log}"
    target: environment
    mutates: true
vars:
  log: "{config_dir}/log.txt"
"""

def config_for(tmp_path: Path, *, idempotent: bool = True, lock: str = "refuse") -> Config:
    tools = GATE_TOOLS.replace("IDEMPOTENT", str(idempotent).lower())
    config = make_config(tmp_path, tools=tools)
    config.policy = config.policy.model_validate({
        "promotion": ["staging", "production"],
        "environments": {"production": {"min_approvals": 2, "self_approval": False,
                                        "approval_ttl": 60, "approvers": {"anyone": True}},
                         "staging": {"lock": lock, "approvers": {"anyone": True}}}})
    return config


def gated_plan(tmp_path: Path, env: str = "staging") -> Plan:
    return make_plan(
        [{"id": "first", "tool": "log", "params": {"line": "first"}},
         {"id": "wait", "tool": "gate", "depends_on": ["first"],
          "params": {"started": str(tmp_path / "started"), "release": str(tmp_path / "go")}},
         {"id": "touch", "tool": "change", "params": {"environment": env},
          "depends_on": ["wait"]}],
        rollback=[{"id": "undo", "tool": "undo", "params": {"environment": env}},
                  {"id": "tell", "tool": "log", "params": {"line": "rolled back"}}])


def submit(services: Services, plan: Plan, *, by: str = "alice",
           approvers: tuple[str, ...] = ("bob",)) -> Run:
    plan = plan.model_copy(update={"requested_by": by})
    services.store.plans.save(plan)
    run = services.store.runs.create(Run.for_plan(plan, services.targets(plan)))
    for user in approvers:
        run = services.store.runs.approve(run.id, face="cli", user=user, plan_version=plan.version,
                                          plan_hash=plan.hash, policy=services.config.policy)
    return run


def start_gated_run(services: Services, store: Store, tmp_path: Path) -> threading.Thread:
    """A worker thread that has taken the queued run and is waiting at its gate step."""
    worker = Worker(services, store, name="w", options=WorkerOptions(block=0.1))
    thread = threading.Thread(target=worker.step)
    thread.start()
    wait_until(lambda: (tmp_path / "started").exists(), what="the gate step")
    return thread


def log_lines(tmp_path: Path) -> list[str]:
    path = tmp_path / "log.txt"
    return path.read_text().splitlines() if path.exists() else []


def test_fifty_concurrent_approvals_start_exactly_one_run(tmp_path: Path, store: Store) -> None:
    services = build_services(config_for(tmp_path), store=store)
    plan = gated_plan(tmp_path)
    store.plans.save(plan)
    run = store.runs.create(Run.for_plan(plan, services.targets(plan)))
    barrier = threading.Barrier(50)
    outcomes: list[str] = []

    def click(user: str) -> None:
        barrier.wait()
        try:
            store.runs.approve(run.id, face="cli", user=user, plan_version=1, plan_hash=plan.hash,
                               policy=services.config.policy)
            outcomes.append("ok")
        except ApprovalRefused:
            outcomes.append("refused")

    threads = [threading.Thread(target=click, args=(f"U{i}",)) for i in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count("ok") == 1 and outcomes.count("refused") == 49
    assert store.queue.depth() == 1
    final = store.runs.get(run.id)
    assert final.status is RunStatus.QUEUED and len(final.approvals) == 1


def test_stale_version_refused_and_production_rules(tmp_path: Path, store: Store) -> None:
    services = build_services(config_for(tmp_path), store=store)
    now = [1000.0]
    store.clock = lambda: now[0]
    plan = gated_plan(tmp_path, env="production").model_copy(update={"requested_by": "alice"})
    store.plans.save(plan)
    run = store.runs.create(Run.for_plan(plan, services.targets(plan)))
    revised = plan.revised(goal="changed goal")
    store.plans.save(revised)
    store.runs.revise(run.id, revised, services.targets(revised))
    policy = services.config.policy
    with pytest.raises(ApprovalRefused, match="version 1, but the plan is now version 2"):
        store.runs.approve(run.id, face="cli", user="bob", plan_version=1, plan_hash=plan.hash, policy=policy)
    with pytest.raises(ApprovalRefused, match="your own request"):
        store.runs.approve(run.id, face="cli", user="alice", plan_version=2, plan_hash=revised.hash, policy=policy)
    store.runs.approve(run.id, face="cli", user="bob", plan_version=2, plan_hash=revised.hash, policy=policy)
    with pytest.raises(ApprovalRefused, match="already approved; 1 more"):
        store.runs.approve(run.id, face="cli", user="bob", plan_version=2, plan_hash=revised.hash, policy=policy)
    now[0] += 120  # bob's approval expires
    after = store.runs.approve(run.id, face="cli", user="carol", plan_version=2, plan_hash=revised.hash,
                               policy=policy)
    assert after.status is RunStatus.AWAITING_APPROVAL and [a.user for a in after.approvals] == [
        "carol"]
    final = store.runs.approve(run.id, face="cli", user="bob", plan_version=2, plan_hash=revised.hash,
                               policy=policy)
    assert final.status is RunStatus.QUEUED
    assert store.plans.get(plan.id, 1).goal != store.plans.get(plan.id).goal  # both versions kept


def test_worker_runs_a_queued_run_and_audits_it(tmp_path: Path, store: Store) -> None:
    services = build_services(config_for(tmp_path), store=store)
    (tmp_path / "go").touch()
    run = submit(services, gated_plan(tmp_path))
    worker = Worker(services, store, name="w1", options=WorkerOptions(block=0.1))
    assert worker.step()
    final = store.runs.get(run.id)
    assert final.status is RunStatus.SUCCEEDED and final.worker == "w1"
    assert all(s.status is StepStatus.SUCCEEDED for s in final.steps.values())
    actions = [e.action for e in store.audit.entries(run_id=run.id)]
    assert actions[:2] == ["approved", "started"] and actions[-1] == "run_finished"
    assert store.locks.all() == []
    assert not worker.step(block=0.05)  # nothing left; the entry was acknowledged


def _spawn_worker(config: Config, redis_url: str, name: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "REDIS_URL": redis_url}
    return subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "worker", "--config", str(config.path), "--name",
         name, "--lease", "1", "--claim-after", "1"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        cwd=Path(__file__).resolve().parents[2])


@pytest.mark.parametrize("idempotent", [True, False])
def test_killed_worker_is_taken_over(tmp_path: Path, store: Store, redis_url: str,
                                     idempotent: bool) -> None:
    config = config_for(tmp_path, idempotent=idempotent)
    config.path.write_text(config.path.read_text())  # the subprocess loads the same file
    services = build_services(config, store=store)
    run = submit(services, gated_plan(tmp_path))
    proc = _spawn_worker(config, redis_url, "doomed")
    try:
        wait_until(lambda: (tmp_path / "started").exists(), what="the gate step to start")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert store.runs.get(run.id).status is RunStatus.RUNNING  # left behind by the dead worker
    (tmp_path / "go").touch()
    rescuer = Worker(services, store, name="rescuer",
                     options=WorkerOptions(lease=1, claim_after=1, block=0.1))
    # The first takeover attempt may come while the dead worker's lease is still alive: the
    # entry then stays pending and is taken over once the lease has run out.
    wait_until(lambda: rescuer.step(block=0.1) and store.runs.get(run.id).status.terminal,
               timeout=30, what="the rescuer to take the run over and finish it")
    final = store.runs.get(run.id)
    resumed = [e for e in store.audit.entries(run_id=run.id) if e.action == "resumed"]
    assert resumed and resumed[0].details["previous_worker"] == "doomed"
    assert log_lines(tmp_path).count("first") == 1  # finished steps are not repeated
    if idempotent:
        assert final.status is RunStatus.SUCCEEDED
    else:
        assert final.status is RunStatus.ROLLED_BACK
        assert "not idempotent" in (final.steps["wait"].error or "")
        assert log_lines(tmp_path)[-1] == "rolled back"


def test_lock_refuse_and_ttl_expiry(tmp_path: Path, store: Store) -> None:
    services = build_services(config_for(tmp_path, lock="refuse"), store=store)
    store.locks.acquire(None, ["staging"], run_id="run-dead", worker="gone", ttl=0.5)
    run = submit(services, gated_plan(tmp_path))
    worker = Worker(services, store, name="w", options=WorkerOptions(block=0.1))
    assert worker.process(run.id) is None
    refused = store.runs.get(run.id)
    assert refused.status is RunStatus.FAILED
    assert "staging is locked by run-dead" in (refused.reason or "")
    with pytest.raises(LockHeld):
        store.locks.acquire(None, ["staging"], run_id="run-2", worker="w", ttl=5)

    def free() -> bool:
        try:
            store.locks.acquire(None, ["staging"], run_id="run-2", worker="w", ttl=5)
            return True
        except LockHeld:
            return False

    wait_until(free, timeout=5, what="the dead owner's lock to expire")


def test_lock_wait_queues_in_order(tmp_path: Path, store: Store) -> None:
    services = build_services(config_for(tmp_path, lock="wait"), store=store)
    first = submit(services, gated_plan(tmp_path))
    w1 = Worker(services, store, name="w1", options=WorkerOptions(block=0.1))
    w2 = Worker(services, store, name="w2", options=WorkerOptions(block=0.1))
    holder = threading.Thread(target=w1.step)
    holder.start()
    wait_until(lambda: (tmp_path / "started").exists(), what="the first run to hold the lock")
    second = submit(services, make_plan([{"id": "c", "tool": "change",
                                          "params": {"environment": "staging"}}],
                                        rollback=[{"id": "u", "tool": "undo",
                                                   "params": {"environment": "staging"}}]))
    assert w2.step(block=0.5)
    assert store.runs.get(second.id).status is RunStatus.QUEUED  # waiting, not refused
    (tmp_path / "go").touch()
    holder.join(60)
    assert store.runs.get(first.id).status is RunStatus.SUCCEEDED
    wait_until(lambda: w2.step(block=0.1), what="the waiting run to be re-queued")
    assert store.runs.get(second.id).status is RunStatus.SUCCEEDED


def test_redis_restart_mid_run(tmp_path: Path, own_redis: RedisServer) -> None:
    store = Store.connect(own_redis.url)
    services = build_services(config_for(tmp_path), store=store)
    run = submit(services, gated_plan(tmp_path))
    thread = start_gated_run(services, store, tmp_path)
    own_redis.restart()
    (tmp_path / "go").touch()
    thread.join(60)
    final = store.runs.get(run.id)
    assert final.status is RunStatus.SUCCEEDED
    actions = [e.action for e in store.audit.entries(run_id=run.id)]
    assert actions[:2] == ["approved", "started"] and "run_finished" in actions


def test_unreachable_redis_is_a_clear_error_and_writes_nothing(
        tmp_path: Path, own_redis: RedisServer) -> None:
    store = Store.connect(own_redis.url)
    services = build_services(config_for(tmp_path), store=store)
    plan = gated_plan(tmp_path)
    store.plans.save(plan)
    run = store.runs.create(Run.for_plan(plan, services.targets(plan)))
    own_redis.stop()
    with pytest.raises(StoreUnavailable, match="cannot reach Redis at redis://127.0.0.1"):
        store.runs.approve(run.id, face="cli", user="bob", plan_version=1, plan_hash=plan.hash,
                           policy=services.config.policy)
    own_redis.start()
    after = store.runs.get(run.id)
    assert after.status is RunStatus.AWAITING_APPROVAL and after.approvals == []
    assert store.queue.depth() == 0


def test_dedupe_and_cancel(tmp_path: Path, store: Store) -> None:
    assert store.dedupe.first_time("slack:evt-1") and not store.dedupe.first_time("slack:evt-1")
    services = build_services(config_for(tmp_path), store=store)
    run = submit(services, gated_plan(tmp_path), approvers=())
    cancelled = store.runs.request_cancel(run.id, user="carol")
    assert cancelled.status is RunStatus.CANCELLED
    with pytest.raises(ApprovalRefused, match="already ended"):
        store.runs.request_cancel(run.id, user="carol")


def test_cancel_a_running_run_from_another_process(tmp_path: Path, store: Store) -> None:
    services = build_services(config_for(tmp_path), store=store)
    run = submit(services, gated_plan(tmp_path))
    thread = start_gated_run(services, store, tmp_path)
    Store.connect(store.where).runs.request_cancel(run.id, user="dave")  # a second client
    thread.join(60)
    final = store.runs.get(run.id)
    assert final.status is RunStatus.CANCELLED and "dave" in (final.reason or "")
    assert final.steps["touch"].status is StepStatus.SKIPPED


def test_same_flow_on_fakeredis(tmp_path: Path) -> None:
    store = Store.connect(None)
    services = build_services(config_for(tmp_path), store=store)
    (tmp_path / "go").touch()
    run = submit(services, gated_plan(tmp_path))
    assert Worker(services, store, name="embedded").step(block=0.1)
    assert store.runs.get(run.id).status is RunStatus.SUCCEEDED


def test_terminal_approve_and_runs_commands(tmp_path: Path, store: Store, redis_url: str,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from bot.cli import main

    config = config_for(tmp_path)
    data = yaml.safe_load(config.path.read_text())
    data["policy"] = config.policy.model_dump(mode="json", exclude_unset=True)  # as written
    config.path.write_text(yaml.safe_dump(data))
    services = build_services(config, store=store)
    run = submit(services, gated_plan(tmp_path, env="production"), approvers=())
    monkeypatch.setenv("REDIS_URL", redis_url)
    args = ["--config", str(config.path)]
    assert main(["approve", run.id, "--user", "alice", *args]) == 3  # asked for it herself
    assert "your own request" in capsys.readouterr().out
    assert main(["approve", run.id, "--user", "bob", *args]) == 0
    assert "1 more approval" in capsys.readouterr().out
    assert main(["approve", run.id, "--user", "carol", *args]) == 0
    assert store.runs.get(run.id).status is RunStatus.QUEUED
    assert main(["runs", *args]) == 0 and short_id(run.id) in capsys.readouterr().out
    assert main(["runs", "show", short_id(run.id).upper(), *args]) == 0  # any unique prefix
    assert f"run {short_id(run.id)} — queued" in capsys.readouterr().out
    assert main(["audit", "--json", "--run", run.id, *args]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    # alice's own approval was refused, and the refusal is on the record too
    assert [entry["action"] for entry in lines] == ["refused", "approved", "approved"]
    assert lines[0]["actor"] == "alice" and lines[0]["details"]["what"] == "approve"


def test_unapproved_plans_expire(tmp_path: Path, store: Store) -> None:
    services = build_services(config_for(tmp_path), store=store)
    waiting = submit(services, gated_plan(tmp_path), approvers=())
    worker = Worker(services, store, name="w", options=WorkerOptions(block=0.05))
    assert worker.expire_stale() == []
    store.clock = lambda: time.time() + 7200  # the default approval window is an hour
    assert not worker.step(block=0.05)  # an idle worker sweeps
    expired = store.runs.get(waiting.id)
    assert expired.status is RunStatus.EXPIRED and "not approved within" in (expired.reason or "")
    with pytest.raises(ApprovalRefused, match="expired"):
        store.runs.approve(waiting.id, face="cli", user="bob", plan_version=1, plan_hash=waiting.plan_hash,
                           policy=services.config.policy)


def test_entry_of_a_run_another_worker_holds_stays_pending(tmp_path: Path, store: Store) -> None:
    services = build_services(config_for(tmp_path), store=store)
    run = submit(services, gated_plan(tmp_path))
    assert store.leases.claim(run.id, worker="alive-elsewhere", lease=30) is not None
    worker = Worker(services, store, name="w2", options=WorkerOptions(block=0.1))
    assert worker.step(block=0.1)  # it read the entry, but the run is someone else's
    assert store.runs.get(run.id).worker == "alive-elsewhere"
    assert store.queue.backlog() == (0, 1)  # not acknowledged: takeover stays possible


def test_an_unfinished_run_is_found_behind_any_number_of_newer_finished_ones(
        tmp_path: Path, store: Store, client: redis.Redis) -> None:
    plan = store.plans.save(gated_plan(tmp_path))
    waiting = store.runs.create(Run.for_plan(plan, NO_TARGETS, created_at=1.0))
    for n in range(150):  # more than the window of newest runs a status filter looks through
        store.runs.create(Run.for_plan(plan, NO_TARGETS, status=RunStatus.SUCCEEDED,
                                       created_at=10.0 + n))
    found = store.runs.recent(limit=5, statuses=[RunStatus.AWAITING_APPROVAL])
    assert [r.id for r in found] == [waiting.id]
    store.runs.transition(waiting.id, RunStatus.REJECTED)
    assert store.runs.recent(limit=5, statuses=[RunStatus.AWAITING_APPROVAL]) == []
    assert client.zcard("dh:runs:open") == 0  # an ended run leaves the index


def test_the_owners_record_write_keeps_what_others_added_to_meta(tmp_path: Path,
                                                                 store: Store) -> None:
    services = build_services(config_for(tmp_path), store=store)
    run = submit(services, gated_plan(tmp_path))
    mine = store.leases.claim(run.id, worker="w", lease=60)
    assert mine is not None
    # the Slack poster records the thread while the worker already runs the run
    store.runs.update(run.id, lambda r: r.meta.update(slack={"channel": "C1", "thread_ts": "1.1"}))
    store.runs.update(run.id, lambda r: r.meta["slack"].update(plan_ts="1.2"))
    mine.steps["first"].status = StepStatus.SUCCEEDED
    store.leases.save_as_owner(mine, worker="w")
    stored = store.runs.get(run.id)
    assert stored.meta["slack"] == {"channel": "C1", "thread_ts": "1.1", "plan_ts": "1.2"}
    assert stored.steps["first"].status is StepStatus.SUCCEEDED  # the owner's own change
    mine.meta["slack"] = {"channel": "C1", "thread_ts": "1.1"}  # an older copy of it
    store.leases.save_as_owner(mine, worker="w")
    assert store.runs.get(run.id).meta["slack"]["plan_ts"] == "1.2"
