"""Random sequences of store operations against a real redis-server; after every step
``deckhand check --store`` finds no violation (issue 22).

The operations are those the bot, the console and workers make: create, approve, modify,
a worker taking an entry (locks, claim), step updates, finishing, cancel, expiry, a worker
dying and another taking its entry over, and a run executed in-process."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from agents.errors import ApprovalRefused, IllegalTransition, LockHeld, StoreError
from agents.plan.model import Plan
from agents.policy.rules import Policy
from agents.run.record import Run, RunStatus, StepStatus
from agents.store import Store
from agents.store.check import StoreCheck
from tests.fixtures.builders import NO_TARGETS, make_config, make_plan
from tests.fixtures.polling import wait_until

LEASE = 600.0
"""Long enough never to run out during a test: expiry is a rule of its own."""


def env_plan(env: str | None, goal: str) -> Plan:
    step: dict[str, object] = {"id": "s", "tool": "log", "params": {"line": "x"}}
    if env is None:
        return make_plan([step], goal=goal)
    return make_plan([step, {"id": "c", "tool": "change", "params": {"environment": env,
                                                                    "label": "l"}}],
                     rollback=[{"id": "u", "tool": "undo", "params": {"environment": env}}],
                     goal=goal)


def machine(url: str, policy: Policy) -> type[RuleBasedStateMachine]:
    class StoreMachine(RuleBasedStateMachine):
        runs = Bundle("runs")

        def __init__(self) -> None:
            super().__init__()
            redis.Redis.from_url(url).flushdb()
            self.store = Store.connect(url)
            self.store.queue.ensure_group()
            self.taken: dict[str, tuple[str, str]] = {}  # run → (entry, worker)
            self.goals = itertools.count()

        @rule(target=runs, env=st.sampled_from([None, "staging", "production"]))
        def create(self, env: str | None) -> str:
            plan = self.store.plans.save(env_plan(env, f"goal {next(self.goals)}"))
            return self.store.runs.create(Run.for_plan(plan, NO_TARGETS)).id

        @rule(run_id=runs, user=st.sampled_from(["bob", "carol"]))
        def approve(self, run_id: str, user: str) -> None:
            run = self.store.runs.get(run_id)
            with contextlib.suppress(ApprovalRefused):
                self.store.runs.approve(run_id, face="cli", user=user, plan_version=run.plan_version,
                                        plan_hash=run.plan_hash, policy=policy)

        @rule(run_id=runs)
        def modify(self, run_id: str) -> None:
            run = self.store.runs.get(run_id)
            if run.status is not RunStatus.AWAITING_APPROVAL:
                return
            latest = self.store.plans.get(run.plan_id)
            revised = self.store.plans.save(latest.revised(goal=f"goal {next(self.goals)}"))
            self.store.runs.revise(run_id, revised, NO_TARGETS)

        @rule(worker=st.sampled_from(["w1", "w2"]))
        def take(self, worker: str) -> None:
            entry = self.store.queue.read(worker, block=0.001)
            if entry is not None:
                self._handle(worker, *entry)

        @rule(worker=st.sampled_from(["w1", "w2"]))
        def take_over(self, worker: str) -> None:
            entry = self.store.queue.reclaim(worker, idle=0)
            if entry is not None and entry[1] not in self.taken:  # its worker died
                self._handle(worker, *entry)

        def _handle(self, worker: str, entry_id: str, run_id: str) -> None:
            run = self.store.runs.get(run_id)
            if run.status.terminal:
                self.store.queue.ack(entry_id)
                return
            try:
                self.store.locks.acquire(run.service, run.environments, run_id=run_id, worker=worker,
                                         ttl=LEASE)
            except LockHeld as exc:
                self.store.runs.transition(run_id, RunStatus.FAILED, expect={RunStatus.QUEUED},
                                           reason=str(exc))
                self.store.queue.ack(entry_id)
                return
            if self.store.leases.claim(run_id, worker=worker, lease=LEASE) is None:
                self.store.queue.ack(entry_id)
                return
            self.taken[run_id] = (entry_id, worker)

        @rule(data=st.data())
        def step_update(self, data: st.DataObject) -> None:
            if not self.taken:
                return
            run_id = data.draw(st.sampled_from(sorted(self.taken)))
            run = self.store.runs.get(run_id)
            run.steps["s"].status = StepStatus.SUCCEEDED
            self.store.leases.save_as_owner(run, worker=self.taken[run_id][1])

        @rule(data=st.data(), outcome=st.sampled_from([RunStatus.SUCCEEDED, RunStatus.FAILED]))
        def finish(self, data: st.DataObject, outcome: RunStatus) -> None:
            if not self.taken:
                return
            run_id = data.draw(st.sampled_from(sorted(self.taken)))
            entry_id, worker = self.taken.pop(run_id)
            run = self.store.runs.get(run_id)
            run.move(outcome)
            self.store.leases.save_as_owner(run, worker=worker)
            self.store.locks.release(run.service, run.environments, run_id=run_id)
            self.store.leases.release(run_id, worker=worker)
            self.store.queue.ack(entry_id)

        @rule(data=st.data())
        def worker_dies(self, data: st.DataObject) -> None:
            """Its lease runs out; its entry stays pending for another worker to take."""
            if not self.taken:
                return
            run_id = data.draw(st.sampled_from(sorted(self.taken)))
            del self.taken[run_id]
            redis.Redis.from_url(url).delete(self.store.keys.owner(run_id))

        @rule(run_id=runs)
        def in_process(self, run_id: str) -> None:
            """``deckhand run``: lock, claim, execute and settle here, with no entry read."""
            run = self.store.runs.get(run_id)
            if run.status is not RunStatus.QUEUED:
                return
            try:
                self.store.locks.acquire(run.service, run.environments, run_id=run_id, worker="console",
                                         ttl=LEASE)
            except LockHeld:
                return
            claimed = self.store.leases.claim(run_id, worker="console", lease=LEASE)
            assert claimed is not None
            claimed.move(RunStatus.SUCCEEDED)
            self.store.leases.save_as_owner(claimed, worker="console")
            self.store.locks.release(run.service, run.environments, run_id=run_id)
            self.store.leases.release(run_id, worker="console")
            self.store.queue.settle(run_id)

        @rule(run_id=runs)
        def cancel(self, run_id: str) -> None:
            with contextlib.suppress(ApprovalRefused):
                self.store.runs.request_cancel(run_id, user="carol")

        @rule(run_id=runs)
        def expire(self, run_id: str) -> None:
            with contextlib.suppress(IllegalTransition):
                self.store.runs.transition(run_id, RunStatus.EXPIRED,
                                           expect={RunStatus.AWAITING_APPROVAL})

        @rule(run_id=runs)
        def audit(self, run_id: str) -> None:
            self.store.audit.record("noted", actor="x", run_id=run_id)
            assert self.store.audit.entries(run_id=run_id, limit=1)[0].run_id == run_id

        @invariant()
        def store_is_consistent(self) -> None:
            try:
                found = StoreCheck(self.store).violations()
            except StoreError as exc:  # pragma: no cover - a failure to say, not to hide
                raise AssertionError(exc) from exc
            assert [v.describe() for v in found] == []

    return StoreMachine


def test_random_store_operations_keep_every_invariant(tmp_path: Path, redis_url: str) -> None:
    policy = make_config(tmp_path).policy
    run_state_machine_as_test(
        machine(redis_url, policy),
        settings=settings(max_examples=30, stateful_step_count=25, deadline=None,
                          suppress_health_check=list(HealthCheck), database=None))


@pytest.mark.parametrize("after_runs", [5, 23, 61])
def test_a_client_killed_mid_write_leaves_a_consistent_store(redis_url: str,
                                                             after_runs: int) -> None:
    """SIGKILL a writing client at an arbitrary point: every multi-key write is one MULTI,
    so no half of one lands. What a dead client can leave between two writes (the lock or
    queue entry of a run it had just finished) is reported and repaired safely."""
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    env = {**os.environ, "REDIS_URL": redis_url}
    proc = subprocess.Popen([sys.executable, "-m", "tests.fixtures.store_workload"], env=env,
                            cwd=Path(__file__).resolve().parents[2])
    try:
        wait_until(lambda: client.zcard("dh:runs") >= after_runs or proc.poll() is not None,
                   timeout=60, what=f"{after_runs} runs written")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL  # it was writing, not crashed
    checker = StoreCheck(Store.connect(redis_url))
    found = checker.violations()
    leftovers = {"dh:lock:staging", "dh:queue"}  # of a run it had just finished
    assert all(v.repair is not None and v.key in leftovers for v in found), found
    checker.repair(found)
    assert [v.describe() for v in checker.violations()] == []
    client.flushdb()
