"""A freeze refuses a change at planning, at approval and at run start; break-glass needs
one more approval, from the incident commanders."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agents.config import Config
from agents.engine.worker import Worker, WorkerOptions
from agents.errors import ApprovalRefused, FreezeRefused
from agents.policy.freeze import BreakGlass, FreezeWindow
from agents.run.record import Run, RunStatus
from agents.services import Services, build_services
from agents.store import Store
from bot.cli.demo import probe

FRIDAY_NOON = datetime(2026, 11, 27, 12, tzinfo=UTC).timestamp()
FRIDAY_EVENING = datetime(2026, 11, 27, 19, tzinfo=UTC).timestamp()


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def frozen_config(sample_config: Config) -> Config:
    sample_config.policy.freeze = [FreezeWindow(
        environments=["production"], reason="weekend: nobody on call", cron="0 18 * * fri",
        hours=62, timezone="UTC")]
    sample_config.policy.break_glass = BreakGlass(users=["ic-ann"])
    return sample_config


def _at(now: float, config: Config, redis_url: str) -> tuple[Clock, Store, Services]:
    """Services on an empty real Redis whose clock (store and planning) reads ``now``."""
    clock = Clock(now)
    store = Store.connect(redis_url, clock=clock)
    store.r.flushdb()
    services = build_services(config, store=store)
    services.clock = clock
    return clock, store, services


def test_freeze_refuses_at_planning_approval_and_run_start(frozen_config: Config,
                                                           redis_url: str) -> None:
    clock, store, services = _at(FRIDAY_NOON, frozen_config, redis_url)
    plan = services.make_plan("deploy v2.3.1", requested_by="alice", face="cli")  # before the freeze
    store.plans.save(plan)
    waiting = store.runs.create(Run.for_plan(plan, services.targets(plan)))
    queued = store.runs.create(Run.for_plan(plan, services.targets(plan)))
    store.runs.approve(queued.id, face="cli", user="bob", plan_version=1, plan_hash=plan.hash,
                       policy=frozen_config.policy)

    clock.now = FRIDAY_EVENING  # the weekend freeze has begun
    with pytest.raises(FreezeRefused, match="production is frozen until Mon 2026-11-30 "
                                            "08:00 UTC: weekend: nobody on call"):
        services.make_plan("deploy v2.3.1", requested_by="alice", face="cli")
    with pytest.raises(ApprovalRefused, match="production is frozen"):
        store.runs.approve(waiting.id, face="cli", user="bob", plan_version=1, plan_hash=plan.hash,
                           policy=frozen_config.policy)
    worker = Worker(services, store, name="w1", options=WorkerOptions(block=0.1))
    assert worker.process(queued.id) is None
    after = store.runs.get(queued.id)
    assert after.status is RunStatus.CANCELLED and "frozen" in (after.reason or "")
    assert not any(p.status for p in probe(frozen_config))  # nothing was deployed
    store.r.flushdb()


def test_break_glass_needs_the_approvals_plus_one_grant(frozen_config: Config,
                                                        redis_url: str) -> None:
    _, store, services = _at(FRIDAY_EVENING, frozen_config, redis_url)
    plan = services.make_plan("deploy v2.3.1", requested_by="alice", face="cli",
                              break_glass="checkout is down, the fix is in v2.3.1")
    assert "plus one grant from ic-ann" in services.break_glass_note(plan, "x")
    store.plans.save(plan)
    run = store.runs.create(Run.for_plan(plan, services.targets(plan),
                                         break_glass="checkout is down"))
    approve = {"plan_version": 1, "plan_hash": plan.hash, "policy": frozen_config.policy}
    assert store.runs.approve(run.id, face="cli", user="bob", **approve).status is RunStatus.AWAITING_APPROVAL
    with pytest.raises(ApprovalRefused, match="one break-glass grant is still needed"):
        store.runs.approve(run.id, face="cli", user="carol", **approve)  # production's one approval is given
    done = store.runs.approve(run.id, face="cli", user="ic-ann", **approve)
    assert done.status is RunStatus.QUEUED
    assert [(a.user, a.break_glass) for a in done.approvals] == [("bob", False),
                                                                 ("ic-ann", True)]
    worker = Worker(services, store, name="w1", options=WorkerOptions(block=0.1))
    done = worker.process(run.id)
    assert done is not None and done.status is RunStatus.SUCCEEDED
    assert {p.body for p in probe(frozen_config)} == {"v2.3.1"}
    store.r.flushdb()
