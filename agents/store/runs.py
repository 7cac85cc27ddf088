"""Run records and their transitions: every change is one compare-and-set on ``run:ID``.

Approval rules are checked inside that transaction, and an approval that completes a run
enqueues it in the same EXEC.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from redis.client import Pipeline

from agents.approvals import approval_problem, approvals_needed
from agents.errors import ApprovalRefused, IllegalTransition, NotFound, StoreError
from agents.plan import Plan
from agents.policy import Policy
from agents.runs import Approval, Run, RunStatus, StepState
from agents.store._redis import RedisBase
from agents.targets import PlanTargets

Write = Callable[[Pipeline], Any]
"""A command queued in a transaction (e.g. ``queue_step``'s XADD)."""
Change = Callable[[Run], "list[Write] | None"]
"""Edits a run in place; may return extra commands to run in the same transaction."""


class RunStore(RedisBase):
    def create_run(self, run: Run) -> Run:
        with self.errors():
            pipe = self.r.pipeline()
            pipe.set(self.keys.run(run.id), run.model_dump_json(), nx=True)
            pipe.zadd(self.keys.runs(), {run.id: run.created_at})
            created, _ = pipe.execute()
        if not created:
            raise StoreError(f"run {run.id} already exists")
        return run

    def run(self, run_id: str) -> Run:
        with self.errors():
            raw = self.r.get(self.keys.run(run_id))
        if raw is None:
            raise NotFound(f"no run {run_id} — `deckhand runs` lists recent ones")
        return Run.model_validate_json(raw)

    def runs(self, *, limit: int = 20, statuses: Iterable[RunStatus] | None = None) -> list[Run]:
        """Most recent runs first, optionally only those in ``statuses``."""
        wanted = set(statuses) if statuses is not None else None
        with self.errors():
            ids = self.r.zrevrange(self.keys.runs(), 0, max(limit * 5, 100))
            raws = self.r.mget([self.keys.run(i.decode()) for i in ids]) if ids else []
        runs = [Run.model_validate_json(raw) for raw in raws if raw]
        return [r for r in runs if wanted is None or r.status in wanted][:limit]

    def update_run(self, run_id: str, change: Change) -> Run:
        """Apply ``change`` atomically: re-read and retry if anyone wrote the run meanwhile."""
        key = self.keys.run(run_id)

        def attempt(pipe: Pipeline) -> Run:
            raw = pipe.get(key)
            if raw is None:
                raise NotFound(f"no run {run_id}")
            run = Run.model_validate_json(raw)
            extras = change(run) or []
            pipe.multi()
            pipe.set(key, run.model_dump_json())
            for extra in extras:
                extra(pipe)
            pipe.execute()
            return run

        return self.cas([key], attempt, busy=f"run {run_id}")

    def transition(self, run_id: str, new: RunStatus, *,
                   expect: Iterable[RunStatus] | None = None, reason: str | None = None) -> Run:
        """Move a run to ``new`` (IllegalTransition if the state machine forbids it)."""
        expected = set(expect) if expect is not None else None

        def change(run: Run) -> None:
            if expected is not None and run.status not in expected:
                raise IllegalTransition(f"run {run_id} is {run.status.value}, not "
                                        f"{' or '.join(sorted(s.value for s in expected))}")
            run.move(new)
            run.reason = reason or run.reason
            if new.terminal:
                run.finished_at = self.clock()

        return self.update_run(run_id, change)

    def approve(self, run_id: str, *, user: str, user_groups: Iterable[str] = (),
                plan_version: int, plan_hash: str, policy: Policy) -> Run:
        """Record an approval; when it is the last one needed, queue the run (same EXEC)."""
        groups = list(user_groups)

        def change(run: Run) -> list[Write]:
            problem = approval_problem(run, user=user, user_groups=groups,
                                       plan_version=plan_version, plan_hash=plan_hash,
                                       policy=policy, now=self.clock())
            if problem:
                raise ApprovalRefused(problem)
            run.approvals.append(Approval(user=user, at=self.clock(), plan_version=plan_version,
                                          plan_hash=plan_hash))
            if approvals_needed(run, policy) > 0:
                return []
            run.move(RunStatus.APPROVED)
            run.move(RunStatus.QUEUED)
            return [self.queue_step(run_id)]

        return self.update_run(run_id, change)

    def queue_step(self, run_id: str) -> Write:
        """The XADD that queues ``run_id``; return it from an ``update_run`` change to
        queue the run in the same transaction as its state change."""
        return lambda pipe: pipe.xadd(self.keys.queue(), {"run": run_id})

    def revise(self, run_id: str, plan: Plan, targets: PlanTargets) -> Run:
        """Bind a waiting run to a new plan version; earlier approvals no longer count."""
        def change(run: Run) -> None:
            run.move(RunStatus.AWAITING_APPROVAL)
            run.plan_version, run.plan_hash = plan.version, plan.hash
            run.approvals = []
            run.set_targets(targets)
            run.goal = plan.goal
            run.plan_versions.append(plan.version)
            run.steps = {s.id: StepState(id=s.id) for s in plan.steps}
            run.rollback = {r.id: StepState(id=r.id) for r in plan.rollback}

        return self.update_run(run_id, change)

    def request_cancel(self, run_id: str, *, user: str) -> Run:
        """Cancel a waiting run at once; ask the worker of a running one to stop it."""
        def change(run: Run) -> list[Write]:
            if run.status.terminal:
                raise ApprovalRefused(f"run {run_id} already ended ({run.status.value})")
            if run.status in (RunStatus.RUNNING, RunStatus.ROLLING_BACK):
                return [lambda pipe: pipe.set(self.keys.cancel(run_id), user)]
            run.move(RunStatus.CANCELLED)
            run.reason = f"cancelled by {user}"
            run.finished_at = self.clock()
            return []

        return self.update_run(run_id, change)

    def cancel_requested(self, run_id: str) -> str | None:
        with self.errors():
            who = self.r.get(self.keys.cancel(run_id))
        return who.decode() if who else None
