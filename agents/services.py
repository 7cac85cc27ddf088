"""The typed bundle of services every front end (terminal, Slack, worker) is handed."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agents.config import Config
from agents.errors import PlanError
from agents.executor import Executor, ExecutorDeps
from agents.plan import MAX_REQUEST, Plan, is_read_only, validate_plan
from agents.planning.planner import build_planner, changes_mutating_steps
from agents.runs import Run, RunStatus
from agents.settings import Settings
from agents.store import Store
from tools.redact import Redactor
from tools.runners.pool import RunnerPool


class Planner(Protocol):
    """Turns a request into a plan, or a plan plus an instruction into a new version."""

    def plan(self, request: str, *, requested_by: str) -> Plan: ...

    def modify(self, plan: Plan, instruction: str, *, requested_by: str) -> Plan: ...


@dataclass
class Services:
    """Everything the front ends need, passed explicitly (no module globals)."""

    config: Config
    settings: Settings
    planner: Planner
    executor: Executor
    runners: RunnerPool
    redact: Redactor
    store: Store
    clock: Callable[[], float] = field(default=time.time)

    def make_plan(self, request: str, *, requested_by: str) -> Plan:
        """Plan ``request`` and validate the result; raises PlanError subclasses.

        A request longer than MAX_REQUEST is refused here, once for every front end, rather
        than cut before the model or failing later as an invalid goal.
        """
        if len(request) > MAX_REQUEST:
            raise PlanError(f"the request is {len(request)} characters long; at most "
                            f"{MAX_REQUEST} can be planned")
        plan = self.planner.plan(request, requested_by=requested_by)
        self.check(plan)
        return plan

    def is_read_only(self, plan: Plan) -> bool:
        """The over-planning guard: one read-only tool call needs no approval."""
        return is_read_only(plan, self.config.catalog)

    def queue_read_only(self, plan: Plan, *, user: str,
                        before_enqueue: Callable[[Run], Run] | None = None) -> Run:
        """Store and queue a read-only plan without approval (``is_read_only`` must hold).

        ``before_enqueue`` runs first, e.g. to post the message a worker will update. If it
        fails, the run is left awaiting approval (and expires), never queued without an entry.
        """
        if not self.is_read_only(plan):
            raise PlanError("only a single read-only step may run without approval")
        self.store.save_plan(plan)
        run = self.store.create_run(Run.for_plan(plan))
        if before_enqueue is not None:
            run = before_enqueue(run)

        def queue(current: Run) -> list[Callable[[Any], Any]]:
            current.move(RunStatus.APPROVED)
            current.move(RunStatus.QUEUED)
            return [self.store.queue_step(current.id)]  # state and entry in one EXEC

        run = self.store.update_run(run.id, queue)
        self.store.audit("queued_read_only", actor=user, run_id=run.id, plan_id=plan.id)
        return run

    def check(self, plan: Plan) -> None:
        """Raise PlanInvalid unless ``plan`` passes every rule."""
        validate_plan(plan, self.config.catalog, self.config.inventory, self.config.policy)

    def close(self) -> None:
        self.runners.close()


def build_services(config: Config, settings: Settings | None = None, *,
                   store: Store | None = None) -> Services:
    """Wire the default services for ``config`` (the store: REDIS_URL, else in-process)."""
    settings = settings or Settings()
    if store is None:
        url = settings.redis_url.get_secret_value() if settings.redis_url else None
        store = Store.connect(url)
    redact = Redactor.from_env([*config.secrets, *settings.secret_values()])
    runners = RunnerPool(inventory=config.inventory)
    planner = build_planner(config, settings)
    deps = ExecutorDeps(config.catalog, config.inventory, runners.for_host, config.vars, redact,
                        replan=lambda plan, run: planner.replan(
                            plan, run, requested_by=run.requested_by),
                        needs_approval=lambda old, new: changes_mutating_steps(
                            old, new, config.catalog))
    executor = Executor(deps, on_failure=config.policy.on_failure)
    return Services(config, settings, planner, executor, runners, redact, store)
