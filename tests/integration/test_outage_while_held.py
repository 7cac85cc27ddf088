"""A Redis outage longer than the lease while a run is held — by a pause, or at a go/no-go —
with a real redis-server stopped and restarted on the same port, real sshd hosts and a
worker with a 2 s lease.

Nothing starts on a host while the store is away (the fence holds the next command, the
rollback's included, until the lease is renewed); what the worker decided or audited
meanwhile lands once the store is back; the decision acted on is the recorded one; the run
stays its own worker's, and the outage is audited with its true reason.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
import redis

from agents.config import load_config
from agents.engine.control import Control, steer
from agents.engine.worker import Worker, WorkerOptions
from agents.errors import ApprovalRefused
from agents.run.record import Run, RunStatus, Verdict
from agents.services import build_services
from agents.store import Store
from agents.store.audit import AuditEntry
from tests.fixtures.builders import make_plan
from tests.fixtures.polling import wait_until
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.sshd import SSHFleet
from tests.integration.test_go_no_go import HOSTS, Clock, write
from tests.integration.test_pause import _config, _marks
from tests.integration.test_store import submit

LEASE = 2.0


def _logged(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(text in r.getMessage() for r in caplog.records)


def _outlive_the_lease(caplog: pytest.LogCaptureFixture) -> None:
    """Two more failed heartbeats: each first spends the client's retry budget (over a
    second), so the 2 s lease has run out with Redis away."""
    beats = _logged(caplog, "heartbeat for")
    wait_until(lambda: _logged(caplog, "heartbeat for") >= beats + 2, timeout=30,
               what="the lease to run out with Redis away")


def _assert_own_run_with_a_true_outage(final: Run, audit: list[AuditEntry], worker: str) -> None:
    actions = [e.action for e in audit]
    assert final.worker == worker and "resumed" not in actions  # never taken over by itself
    assert actions.count("run_finished") == 1 and "lease_lost" not in actions
    outages = [e.details for e in audit if e.action == "store_outage"]
    assert any(o["lease_lapsed"] and o["seconds"] >= LEASE for o in outages), outages


class HeldDeploy:
    """`ship v1.2.3` to prod-1..3 one batch at a time, approved, executed by worker w1 (2 s
    lease) on a thread, holding for a go/no-go after batch 1; the executor's clock is ours."""

    def __init__(self, tmp_path: Path, fleet: SSHFleet, redis_url: str):
        self.tmp_path = tmp_path
        self.config = load_config(write(tmp_path, fleet, {
            "after_batches": [1], "timeout": "30m", "on_timeout": "rollback"}))
        self.store = store = Store.connect(redis_url)
        services = build_services(self.config, store=store)
        self.clock = Clock(1_800_000_000.0)
        services.executor.deps.clock = self.clock
        plan = services.make_plan("ship v1.2.3", requested_by="alice", face="cli")
        store.plans.save(plan)
        run = store.runs.create(Run.for_plan(plan, services.targets(plan)))
        self.run_id = store.runs.approve(
            run.id, face="cli", user="bob", plan_version=run.plan_version,
            plan_hash=run.plan_hash, policy=self.config.policy).id
        worker = Worker(services, store, name="w1", options=WorkerOptions(lease=LEASE, block=0.1))
        self.thread = threading.Thread(target=worker.process, args=(self.run_id,))
        self.thread.start()
        self.held = wait_until(lambda: (r := store.runs.get(self.run_id)).awaiting and r,
                               what="the run to hold for a go/no-go after batch 1")

    def host(self, name: str) -> list[str | None]:
        """The host's version marker and undo marker (None where absent)."""
        return [(p.read_text().strip() if p.exists() else None)
                for p in (self.tmp_path / "hosts" / name / f for f in ("version", "undo"))]


def test_a_go_no_go_deadline_during_an_outage_is_decided_as_recorded(
        tmp_path: Path, own_redis: RedisServer, sshd_hosts: SSHFleet,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    deploy = HeldDeploy(tmp_path, sshd_hosts, own_redis.url)
    store, config, run_id, held, clock, thread = (deploy.store, deploy.config, deploy.run_id,
                                                  deploy.held, deploy.clock, deploy.thread)
    assert held.awaiting is not None
    clicked = None
    try:
        own_redis.stop()
        clock.now = held.awaiting.deadline + 1  # nobody decided in time: the store is away
        wait_until(lambda: _logged(caplog, "record the timeout"), timeout=30,
                   what="the worker to reach the deadline with Redis away")
        _outlive_the_lease(caplog)
        assert [deploy.host(h)[1] for h in HOSTS] == [None] * 3  # nothing undone yet
        own_redis.start()
        try:  # a click as the store comes back: the timeout and it cannot both stand
            store.judgments.decide(run_id, Verdict.CONTINUE, user="carol", via="cli",
                                   policy=config.policy)
            clicked = True
        except ApprovalRefused:
            clicked = False
    finally:
        if own_redis.proc is None:
            own_redis.start()
        thread.join(60)
    assert not thread.is_alive()
    final = store.runs.get(run_id)
    audit = store.audit.entries(run_id=run_id)
    (judged,) = [e for e in audit if e.action == "judged"]  # recorded, and only once
    stored = store.judgments.decided(run_id, held.awaiting.hold)
    (acted,) = final.judgments
    assert stored is not None and acted.decision is not None
    assert (acted.decision.verdict, acted.decision.via) == (stored.verdict, stored.via)
    assert (judged.details["decision"], judged.details["via"]) == (stored.verdict.value,
                                                                  stored.via)
    hosts = [deploy.host(h) for h in HOSTS]
    if stored.via == "timeout":  # the worker's retry landed first; the click was refused
        assert clicked is False and stored.verdict is Verdict.ROLLBACK
        assert final.status is RunStatus.ROLLED_BACK, final.reason
        assert hosts == [["v1.2.3", "undone"], [None, None], [None, None]]
    else:  # carol's click landed first, and the worker acted on it
        assert clicked is True and stored.verdict is Verdict.CONTINUE
        assert final.status is RunStatus.SUCCEEDED, final.reason
        assert hosts == [["v1.2.3", None]] * 3
    _assert_own_run_with_a_true_outage(final, audit, "w1")


def test_a_pause_that_expires_during_an_outage_rolls_back_once_the_lease_is_back(
        tmp_path: Path, own_redis: RedisServer, sshd_hosts: SSHFleet,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    skew = [0.0]
    store = Store.connect(own_redis.url, clock=lambda: time.time() + skew[0])
    config = _config(tmp_path, sshd_hosts)
    services = build_services(config, store=store)
    plan = make_plan(
        [{"id": "roll", "tool": "mark_and_wait",
          "params": {"environment": "production", "label": "roll"}}],
        rollback=[{"id": "undo", "tool": "undo", "params": {"environment": "production"}}])
    run_id = submit(services, plan, by="alice", approvers=("bob",)).id
    worker = Worker(services, store, name="w", options=WorkerOptions(lease=LEASE, block=0.1))
    thread = threading.Thread(target=worker.step)
    thread.start()
    try:
        wait_until((tmp_path / "hosts" / "prod-1" / "started").exists,
                   what="batch 1 of 2 to start")
        steer(config.policy, Control.PAUSE, run_id, runs=store.runs, audit=store.audit,
              user="alice", via="cli")
        wait_until(lambda: _logged(caplog, "paused by alice"), what="the worker to see it")
        (tmp_path / "go").touch()  # batch 1 ends; batch 2 is held
        wait_until(lambda: store.runs.get(run_id).paused, what="the run to be held")
        own_redis.stop()
        skew[0] = config.policy.pause_timeout + 1  # nobody resumed it; the store is away
        wait_until(lambda: _logged(caplog, "pause expired"), timeout=30,
                   what="the pause to expire with Redis away")
        _outlive_the_lease(caplog)
        assert _marks(tmp_path, "prod-1") == ["roll"]  # the undo waits for the lease
        own_redis.start()
    finally:
        (tmp_path / "go").touch()
        if own_redis.proc is None:
            own_redis.start()
        thread.join(60)
    assert not thread.is_alive()
    final = store.runs.get(run_id)
    assert final.status is RunStatus.CANCELLED, final.reason
    assert "paused by alice for 30m; pause expired" in (final.reason or "")
    assert _marks(tmp_path, "prod-1") == ["roll", "undo"]  # changed, so undone, once
    assert _marks(tmp_path, "prod-2") == []  # never started, never touched
    audit = store.audit.entries(run_id=run_id)
    expired = [e for e in audit if e.action == "pause_expired"]  # kept through the outage
    assert [(e.actor, e.details["paused_by"]) for e in expired] == [("w", "alice")]
    finished = [e.details["step"] for e in audit if e.action == "step_finished"]
    assert finished == ["roll", "undo"]
    _assert_own_run_with_a_true_outage(final, audit, "w")


def test_a_worker_that_lost_its_run_at_a_go_no_go_records_no_end_of_it(
        tmp_path: Path, own_redis: RedisServer, sshd_hosts: SSHFleet) -> None:
    deploy = HeldDeploy(tmp_path, sshd_hosts, own_redis.url)
    store, run_id = deploy.store, deploy.run_id
    try:  # another worker's claim, as after an outage that outlived the lease
        redis.Redis.from_url(own_redis.url).set(store.keys.owner(run_id), "thief", px=60_000)
    finally:
        deploy.thread.join(60)
    assert not deploy.thread.is_alive()
    assert [deploy.host(h) for h in HOSTS] == [["v1.2.3", None], [None, None], [None, None]]
    stored = store.runs.get(run_id)  # the thief's to go on with: w1 wrote no end over it
    assert stored.status is RunStatus.RUNNING and stored.awaiting is not None
    assert not store.r.exists(store.keys.history_recorded(run_id))  # nor its history
    assert store.history.current(None, "production").hosts == {}
    actions = [(e.actor, e.action) for e in store.audit.entries(run_id=run_id)]
    assert ("w1", "lease_lost") in actions and ("w1", "run_finished") not in actions
