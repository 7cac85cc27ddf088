"""The DAG engine: runs a plan's steps as soon as their dependencies succeed, then rollback.

Steps run on a bounded thread pool (paramiko and subprocesses block; threads keep one
interface for both). A step that targets an environment fans out over its hosts in
rollout batches. Every state change is an Event: ``Run.apply`` folds it into the record,
then every listener sees it (terminal table, Slack thread, store, audit).

On failure no new step starts; running steps finish (or are cancelled, per policy);
steps that did not run are marked skipped; then the rollback steps run in order, each
only on the hosts this run changed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from agents import logcontext, tracing
from agents.plan.limit import allowed_hosts
from agents.plan.model import Criteria, Plan, RollbackStep, Step, success_criteria
from agents.plan.targets import environment_of, resolve
from agents.run.explain import explaining
from agents.run.gates import gate_check, stop_reason
from agents.run.hold_watch import HoldWatch, JudgeGates
from agents.run.judgment import Judge, MemoryJudge, applies, awaiting, hold_of, wait_for
from agents.run.record import (
    Decision,
    Event,
    EventKind,
    GateCheck,
    HostResult,
    Judgment,
    Pause,
    Phase,
    ReplicaWait,
    Run,
    RunStatus,
    StepState,
    StepStatus,
    Verdict,
)
from tools.catalog import OUTPUT_REF, Catalog, ParamValue, Tool
from tools.errors import CommandInterrupted, DeckhandError
from tools.inventory import LOCAL_HOST, Host, Inventory, Rollout
from tools.inventory import Judgment as JudgmentConfig
from tools.redact import redact as default_redact
from tools.regex import compile_safe
from tools.runners.base import CancelToken, CommandResult, Runner
from tools.runners.gate import GateRunner

log = logging.getLogger("deckhand.executor")

Deferred = Callable[[], None]
Listener = Callable[[Event, Run], Deferred | None]
"""Sees every event, in order, under the execution's lock: it must be quick. I/O that need
not be ordered with other hosts' events goes in the callable it may return, which runs once
the lock is released and before the emitting thread carries on (so what it writes about a
host's start has landed before the command starts)."""


class NotReplicated(str):
    """Why a start is not durable when the one reason is that no Redis replica confirmed
    its record within the bounded wait (the record is on the primary). A forward step does
    not start; a rollback goes ahead, said in the record (``_Execution._durable``)."""


class ReplicaWaits(Protocol):
    """What ``Durable`` tells the run while a start waits for a replica, and asks it."""

    def waiting(self, what: str, seconds: float) -> None:
        """``what`` waits for a replica, at most ``seconds`` more."""

    def waited(self, outcome: str) -> None:
        """That wait ended: confirmed, no_replica (none left to wait for), timed_out or
        stopped."""

    def stopped(self) -> bool:
        """Whether to stop waiting (the run was stopped: nothing new starts)."""


Durable = Callable[[str, ReplicaWaits], str | None]
"""The one check every mutating start crosses: None once everything recorded so far (that
it may start there, and its process group) is durable (or there is nothing to wait for),
else why it is not — the command then does not start there, unless it is a rollback and
the reason a ``NotReplicated``. Asked for every batch, every retry, and by each command's
start gate; its first argument says what is waited for, for logs and the record; a wait for
a replica is told to (and may be stopped by) its second."""
MayStart = Callable[[str], str | None]
"""Right before any command starts (each batch, each attempt): blocks while the worker
cannot vouch for its lease on the run (see ``agents.engine.fence``); None once it may
start, else why not (the run is another worker's now). Its argument names what would start."""


class Hold(Protocol):
    """Pause, resume and stop, as the worker relays them (``agents.engine.pause``)."""

    def paused(self) -> Pause | None:
        """The pause in force now (with when it expires), or None to carry on; read from
        the store, so a stop seen on the way cancels the run first."""

    def stopped(self) -> str | None:
        """Why nothing may start now — the run was stopped (read from the store now) or
        cancelled otherwise — or None."""

    def wait(self, until: Callable[[], bool]) -> None:
        """Block while paused: until resumed, cancelled (a lost lease cancels too),
        ``until()`` holds, or the pause expires — which cancels the run into rollback."""


class _NoHold:
    """A run nobody can pause or stop but through its token (no worker relays requests)."""

    def paused(self) -> Pause | None:
        return None

    def stopped(self) -> str | None:
        return None

    def wait(self, until: Callable[[], bool]) -> None:
        return None


RunnerFor = Callable[[Host], Runner]
Replanner = Callable[[Plan, Run], "Plan | None"]


@dataclass
class ExecutorDeps:
    """What the executor needs from the outside world."""

    catalog: Catalog
    inventory: Inventory
    runner_for: RunnerFor
    config_vars: dict[str, Any] = field(default_factory=dict)
    redact: Callable[[str], str] = default_redact
    replan: Replanner | None = None
    """The adaptive variant: after a failure, revised remaining steps, or None to roll back."""
    needs_approval: Callable[[Plan, Plan], bool] = lambda old, new: True
    """Whether a revised plan must be approved again (it changes a mutating step)."""
    gate_runner: Runner = field(default_factory=GateRunner)
    """Evaluates tools that are gates (on this machine, whatever the target)."""
    clock: Callable[[], float] = time.time
    """When a go/no-go hold times out (tests advance their own)."""


class Executor:
    """Runs plans. One Executor can run many plans, one ``execute`` call per run."""

    def __init__(self, deps: ExecutorDeps, *, max_parallel: int = 8,
                 on_failure: Literal["finish", "cancel"] = "finish",
                 listeners: Iterable[Listener] = ()):
        self.deps = deps
        self.max_parallel = max_parallel
        self.on_failure = on_failure
        self.listeners = list(listeners)

    def execute(self, plan: Plan, run: Run | None = None, *,
                cancel: CancelToken | None = None,
                listeners: Iterable[Listener] = (), durable: Durable | None = None,
                may_start: MayStart | None = None, hold: Hold | None = None,
                judge: Judge | None = None) -> Run:
        """Run ``plan`` to its end and return the final record.

        ``run`` may be a record from an earlier, interrupted execution: finished steps are
        not repeated. ``cancel`` stops the run the same way a failure does. ``durable`` is
        asked before any mutating command starts (see ``Durable``); ``may_start`` before
        every batch and attempt (see ``MayStart``); ``hold`` before every step and rollout
        batch of the plan (see ``Hold``); ``judge`` holds the go/no-go decisions between
        batches (``agents.run.judgment``; none given: only a timeout decides).
        """
        targets = resolve(plan, self.deps.catalog, self.deps.inventory)
        run = run or Run.for_plan(plan, targets, status=RunStatus.APPROVED)  # caller approved
        execution = _Execution(self, plan, run, cancel or CancelToken(),
                               [*self.listeners, *listeners], durable or _always_durable,
                               may_start or _nothing_to_wait_for, hold or _NoHold())
        execution.judge = judge or execution.judge
        parent = tracing.context_of(run.meta.get("traceparent") or plan.planner.traceparent)
        lost = tracing.attempt_lost(run.meta, parent=parent, run_id=run.id)  # a dead worker's
        with tracing.span("deckhand.run", {
                "deckhand.run.id": run.id, "deckhand.plan.id": plan.id,
                "deckhand.service": run.service,
                "deckhand.plan.version": plan.version, "deckhand.worker": run.worker,
                "deckhand.run.taken_over_from": run.meta.get("previous_worker"),
                "deckhand.run.environments": ",".join(run.environments)},
                parent=parent, links=[lost] if lost else ()) as span:
            tracing.attempt_started(run.meta, span, worker=run.worker)
            final = execution.go()
            tracing.finish(span, ok=final.status is RunStatus.SUCCEEDED,
                           **{"deckhand.run.status": final.status.value,
                              "deckhand.run.hosts_changed": len(final.changed_hosts)})
            if final.status is not RunStatus.SUCCEEDED:
                tracing.failed(span, self._why(final))
        if final.status.terminal:  # the request's root: the trace's status is the run's
            tracing.request_ended(final.meta.get(tracing.ROOT), status=final.status.value,
                                  ok=final.status is RunStatus.SUCCEEDED,
                                  why=self._why(final), run_id=final.id,
                                  service=final.service)
        return final

    def _why(self, run: Run) -> str:
        """A run span's error description: how the run ended and why, redacted, bounded."""
        reason = self.deps.redact(run.reason or "")[:200]
        return f"{run.status.value}: {reason}" if reason else run.status.value


def _step_span_name(step: Step | RollbackStep, phase: Phase) -> str:
    """"step deploy_web (deploy)", "rollback undo_web (rollback)": what a trace view lists."""
    kind = "rollback" if phase is Phase.ROLLBACK else "step"
    return f"{kind} {step.id} ({step.tool})"


@dataclass
class _HostOutcome:
    ok: bool
    error: str | None = None
    outputs: dict[str, str] = field(default_factory=dict)


def _ended(result: HostResult) -> _HostOutcome:
    """The outcome of a host whose command ended under an earlier worker."""
    ok = result.status is StepStatus.SUCCEEDED
    return _HostOutcome(ok=ok, error=None if ok else (result.error or result.status.value),
                        outputs=dict(result.outputs))


class _Execution:
    """State of one ``execute`` call."""

    def __init__(self, executor: Executor, plan: Plan, run: Run, cancel: CancelToken,
                 listeners: list[Listener], durable: Durable, may_start: MayStart,
                 hold: Hold):
        self.ex, self.deps, self.plan, self.run = executor, executor.deps, plan, run
        self.cancel, self.durable, self.may_start = cancel, durable, may_start
        self.hold = hold
        self.steps_token = cancel.child()  # failure with on_failure=cancel kills running steps
        self.listeners = listeners
        self.lock = threading.RLock()
        self.stop_reason: str | None = None
        self.ran = False
        """Whether any command of this run may have run (a refused start did not)."""
        self.judge: Judge = MemoryJudge()
        self.replica_waiters = 0
        """Starts waiting for a replica now (one REPLICA_WAIT in the record for them all)."""
        self.resumed: dict[str, dict[str, HostResult]] = {}
        """Steps an earlier worker left between hosts (its commands had all ended): per
        step, the hosts whose command ended there. They are not run again; the rollout goes
        on with the others, its holds (go/no-go) as they were (see ``_prepare_resume``)."""

    # -- top level ---------------------------------------------------------------------

    def go(self) -> Run:
        self.emit(EventKind.RUN_STARTED)
        if self.run.status is not RunStatus.ROLLING_BACK:
            self._prepare_resume()
            if self._run_until_settled() == "approval":
                return self.run  # a revised plan waits for approval; nothing is rolled back
            if not self.stop_reason and self.hold.stopped() is not None:
                # a Stop acknowledged after the last command started: it said "rolls back"
                self.stop_reason = f"cancelled: {self.cancel.reason}"
            self._skip_pending()
        else:
            self.stop_reason = self.run.reason or "resumed during rollback"
        final = RunStatus.SUCCEEDED
        if self.stop_reason and self._nothing_started():
            final = RunStatus.CANCELLED if self.cancel.cancelled else RunStatus.FAILED
            self.stop_reason = f"not started, nothing to roll back: {self.stop_reason}"
        elif self.stop_reason:
            final = self._rollback()
        tracing.attempt_ended(self.run.meta)  # recorded with the event: this span is ended
        self.emit(EventKind.RUN_FINISHED, status=final.value, error=self.stop_reason)
        return self.run

    def _nothing_started(self) -> bool:
        """No command ran and no host may differ (every start was refused, or the first
        batch never began): the run ends "not started", with nothing to roll back."""
        return not self.ran and not self.run.changed_hosts and not any(
            state.status is StepStatus.SUCCEEDED for state in self.run.steps.values())

    def emit(self, kind: EventKind, **fields: Any) -> None:
        event = Event(kind=kind, run_id=self.run.id, **fields)
        with self.lock:
            self.run.apply(event)
            later = [_notify(listener, event, self.run) for listener in self.listeners]
        for work in later:  # outside the lock: one host's I/O does not hold up the others
            if work is not None:
                _finish(work, event)

    # -- plan phase ----------------------------------------------------------------------

    def _run_until_settled(self) -> str:
        """Run steps; after a failure, let the replanner revise the rest. Returns how it
        ended: "done" (succeeded, or failed into rollback) or "approval"."""
        while True:
            self._run_steps()
            if self.cancel.cancelled and not self.stop_reason:
                self.stop_reason = f"cancelled: {self.cancel.reason}"
            if not self.stop_reason or self.cancel.cancelled:
                return "done"
            outcome = self._replan()
            if outcome != "continue":
                return outcome

    def _replan(self) -> str:
        """Ask for revised remaining steps: "continue", "approval", or "done" (roll back)."""
        if self.deps.replan is None:
            return "done"
        try:
            revised = self.deps.replan(self.plan, self.run)
        except DeckhandError as exc:
            log.warning("replanning %s failed, rolling back: %s", self.run.id, exc)
            return "done"
        if revised is None:
            return "done"
        approval = self.deps.needs_approval(self.plan, revised)
        if approval:  # this execution ends here; the approved revision is a new attempt
            tracing.attempt_ended(self.run.meta)
        self.emit(EventKind.REPLANNED, plan=revised.model_dump(mode="json"),
                  plan_hash=revised.hash, status="needs_approval" if approval else "continue",
                  error=self.stop_reason)
        self.plan = revised
        if approval:
            return "approval"
        self.stop_reason = None
        return "continue"

    def _prepare_resume(self) -> None:
        """Steps that were running when the last worker's lease lapsed resume where they
        stood: hosts whose command ended are not run again, the others run. A host whose
        command was still running there (started, not ended) is re-run only if the tool is
        idempotent, else the step fails — and never where a mutating command may still run
        with no process group recorded to stop it by. So a run held between batches (a
        pause, a go/no-go) stays held on the worker that takes it over, and goes on with the
        hosts still pending. A step that had failed stops the run (its worker went before
        the rollback began)."""
        for step in self.plan.steps:
            state = self.run.steps.get(step.id)
            if state is not None and state.status in (StepStatus.FAILED, StepStatus.CANCELLED):
                self.stop_reason = self.stop_reason or f"step {step.id} failed: {state.error}"
            if state is None or state.status is not StepStatus.RUNNING:
                continue
            tool = self.deps.catalog.tools.get(step.tool)
            running = [name for name, result in state.hosts.items()
                       if result.status is StepStatus.RUNNING]  # started, not ended
            if tool is not None and tool.mutates:  # it may have changed its hosts: undo them
                for host in running:
                    self.run.mark_changed(host)
            unstoppable = self._unstoppable(step, state)
            if unstoppable:  # fail closed: what may still run there could not be stopped
                self._interrupted(step.id, f"was running on {', '.join(unstoppable)} when "
                                  f"its worker stopped renewing its lease, with no record of "
                                  f"its process group to stop it by, so it is not re-run")
            elif running and not (tool is not None and tool.idempotent):
                # the last worker may have died or only lost the store: say what is known
                self._interrupted(step.id, f"was running on {', '.join(running)} when its "
                                  f"worker stopped renewing its lease (the worker died or "
                                  f"lost touch with the store), and its tool is not "
                                  f"idempotent, so it is not re-run")
            else:  # every command of it had ended (or it is idempotent): go on from there
                state.status = StepStatus.PENDING
                self.resumed[step.id] = {name: result for name, result in state.hosts.items()
                                         if result.status.done}
                if self.resumed[step.id]:
                    log.info("run %s: step %s resumes after %s (done there, not run again)",
                             self.run.id, step.id, ", ".join(self.resumed[step.id]))

    def _unstoppable(self, step: Step | RollbackStep, state: StepState) -> list[str]:
        """Hosts a dead worker's mutating command may still run on, with no process group
        recorded to stop it by (the start gate makes that "never started"; fail closed)."""
        tool = self.deps.catalog.tools.get(step.tool)
        if state.status is not StepStatus.RUNNING or (tool is not None and not tool.mutates):
            return []
        return [name for name, result in state.hosts.items()
                if result.status is StepStatus.RUNNING and result.pid is None]

    def _interrupted(self, step_id: str, error: str) -> None:
        self.emit(EventKind.STEP_FINISHED, step_id=step_id, status="failed", error=error)
        self.stop_reason = f"step {step_id} was interrupted"

    def _run_steps(self) -> None:
        running: dict[Future[bool], str] = {}
        with ThreadPoolExecutor(self.ex.max_parallel, thread_name_prefix="step",
                                initializer=logcontext.inherit()) as pool:
            while True:
                stopped = bool(self.stop_reason) or self.cancel.cancelled
                ready = [] if stopped else self._ready(running.values())
                if ready and self._held(f"step {ready[0].id}", list(running)):
                    for step in ready:
                        self.emit(EventKind.STEP_STARTED, step_id=step.id)
                        future = pool.submit(self._run_step, step, Phase.PLAN, self.steps_token)
                        running[future] = step.id
                if not running:
                    return
                done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for future in done:
                    step_id = running.pop(future)
                    if not future.result() and not self.stop_reason:
                        self._on_step_failed(step_id)

    def _ready(self, running: Iterable[str]) -> list[Step]:
        busy = set(running)
        states = self.run.steps
        free = self.ex.max_parallel - len(busy)
        ready = [s for s in self.plan.steps
                 if s.id not in busy and states[s.id].status is StepStatus.PENDING
                 and all(states[d].status is StepStatus.SUCCEEDED for d in s.depends_on)]
        return ready[:max(free, 0)]

    def _on_step_failed(self, step_id: str) -> None:
        if self.cancel.cancelled:
            self.stop_reason = f"cancelled: {self.cancel.reason}"
            return
        self.stop_reason = f"step {step_id} failed: {self.run.steps[step_id].error}"
        if self.ex.on_failure == "cancel":
            self.steps_token.cancel(f"step {step_id} failed")

    def _skip_pending(self) -> None:
        for step in self.plan.steps:
            if self.run.steps[step.id].status is StepStatus.PENDING:
                self.emit(EventKind.STEP_FINISHED, step_id=step.id, status="skipped",
                          error=f"not run: {self.stop_reason}")

    # -- rollback phase --------------------------------------------------------------------

    def _rollback(self) -> RunStatus:
        cancelled = self.cancel.cancelled
        if not self.plan.rollback:
            return RunStatus.CANCELLED if cancelled else RunStatus.FAILED
        if self.run.status is not RunStatus.ROLLING_BACK:
            self.emit(EventKind.ROLLBACK_STARTED, phase=Phase.ROLLBACK, error=self.stop_reason)
        self._stop_left_running()
        all_ok = True
        for step in self.plan.rollback:
            if self.run.rollback[step.id].status.done:
                continue
            unstoppable = self._unstoppable(step, self.run.rollback[step.id])
            if unstoppable:  # a takeover mid-rollback: fail closed, as in _prepare_resume
                self.emit(EventKind.STEP_FINISHED, step_id=step.id, phase=Phase.ROLLBACK,
                          status="failed", error=f"was running on {', '.join(unstoppable)} "
                          f"when its worker died, with no record of its process group to "
                          f"stop it by, so it is not re-run")
                all_ok = False
                continue
            self.emit(EventKind.STEP_STARTED, step_id=step.id, phase=Phase.ROLLBACK)
            # Rollback gets a fresh token: the cancel that stopped the run must not stop it.
            all_ok &= self._run_step(step, Phase.ROLLBACK, CancelToken())
        self.emit(EventKind.ROLLBACK_FINISHED, phase=Phase.ROLLBACK,
                  status="succeeded" if all_ok else "failed")
        if not all_ok:
            return RunStatus.ROLLBACK_FAILED
        return RunStatus.CANCELLED if cancelled else RunStatus.ROLLED_BACK

    # -- one step ------------------------------------------------------------------------

    def _run_step(self, step: Step | RollbackStep, phase: Phase, token: CancelToken) -> bool:
        """Run one step on all its hosts; emits its STEP_FINISHED and returns success."""
        with tracing.span(_step_span_name(step, phase), {
                "deckhand.step.id": step.id, "deckhand.tool": step.tool,
                "deckhand.phase": phase.value,
                # GenAI conventions: a step is a tool the plan runs
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": step.tool}) as span:
            try:
                status, error, outputs = self._attempt_step(step, phase, token)
            except DeckhandError as exc:
                status, error, outputs = StepStatus.FAILED, str(exc), {}
            except Exception as exc:  # a bug must fail the step, never leave the run "running"
                log.exception("step %s crashed", step.id)
                status, error, outputs = StepStatus.FAILED, f"internal error: {exc!r}", {}
            tracing.finish(span, ok=status is not StepStatus.FAILED,
                           **{"deckhand.step.status": status.value,
                              "deckhand.error": self.deps.redact(error) if error else None})
        self.emit(EventKind.STEP_FINISHED, step_id=step.id, phase=phase, status=status.value,
                  error=error, outputs=outputs)
        return status is not StepStatus.FAILED

    def _attempt_step(self, step: Step | RollbackStep, phase: Phase,
                      token: CancelToken) -> tuple[StepStatus, str | None, dict[str, str]]:
        tool = self.deps.catalog.get(step.tool)
        params = self._resolve_refs(step.params)
        env = environment_of(tool, self.deps.catalog.with_defaults(tool, params))
        if tool.target == "environment" and env not in self.deps.inventory.environments:
            return StepStatus.FAILED, f"no hosts: environment {env!r} is not in the inventory", {}
        hosts = self.deps.inventory.hosts_of(tool.target, env)
        if self.plan.limit and hosts:  # --limit: only ever fewer hosts (agents.plan.limit)
            allowed = allowed_hosts(self.plan.limit, self.deps.inventory)
            hosts = [h for h in hosts if h.name in allowed]
        if tool.target != "local" and not hosts:  # never fall back to this machine
            return StepStatus.FAILED, f"no hosts for target {tool.target}", {}
        if phase is Phase.ROLLBACK and hosts:
            hosts = [h for h in hosts if h.name in self.run.changed_hosts]
            if not hosts:
                return StepStatus.SKIPPED, "no host was changed by this run", {}
        rollout = self.deps.inventory.rollout_of(env)
        done = self.resumed.get(step.id, {}) if phase is Phase.PLAN else {}
        pending = [h for h in hosts if h.name not in done]  # resumed: the hosts still to do
        if tool.mutates and phase is Phase.PLAN and len(hosts) > 1 and pending:
            problems = self._preflight(pending)
            if problems:
                where = "the hosts still to do" if done else "any host"
                return StepStatus.FAILED, (f"not started on {where}: " + "; ".join(problems)
                                           + " — fix that host, then run it again"), {}
        outcomes = self._fan_out(step, phase, tool, params, hosts or [LOCAL_HOST], token, rollout)
        failed = [o.error for o in outcomes if not o.ok]
        if token.cancelled and failed:
            return StepStatus.CANCELLED if phase is Phase.PLAN else StepStatus.FAILED, \
                f"cancelled: {token.reason}", {}
        outputs = {k: v for o in outcomes for k, v in o.outputs.items()}
        if failed:
            more = f" (and {len(failed) - 1} more host(s))" if len(failed) > 1 else ""
            return StepStatus.FAILED, f"{failed[0]}{more}", outputs
        return StepStatus.SUCCEEDED, None, outputs

    def _preflight(self, hosts: list[Host]) -> list[str]:
        """Every host a rollout will touch is reachable with a verified key, checked before
        the first one changes, so one bad host does not get the others deployed and then
        rolled back. Connections opened here are the ones the commands then use."""
        def problem(host: Host) -> str | None:
            try:
                self.deps.runner_for(host).check_ready()
            except DeckhandError as exc:
                return f"{host.name}: {exc}"
            return None

        workers = min(len(hosts), 32)
        with ThreadPoolExecutor(workers, thread_name_prefix="preflight",
                                initializer=logcontext.inherit()) as pool:
            return [p for p in pool.map(problem, hosts) if p is not None]

    def _fan_out(self, step: Step | RollbackStep, phase: Phase, tool: Tool,
                 params: dict[str, ParamValue], hosts: list[Host], token: CancelToken,
                 rollout: Rollout) -> list[_HostOutcome]:
        outcomes: list[_HostOutcome] = []
        batches = rollout.batches(hosts)
        done = self.resumed.pop(step.id, {}) if phase is Phase.PLAN else {}
        for number, batch in enumerate(batches, start=1):
            outcomes += [_ended(done[h.name]) for h in batch if h.name in done]
            todo = [h for h in batch if h.name not in done]
            if todo and phase is Phase.PLAN and not self._held(
                    f"batch {number} of {len(batches)} of {step.id}"):
                outcomes.append(_HostOutcome(ok=False, error=f"not started: {token.reason}"))
                break
            refused = self._start_batch(step, phase, tool, params, todo) if todo else []
            if refused:
                outcomes += refused
                break
            if len(todo) == 1:
                outcomes.append(self._run_on_host(step, phase, tool, params, todo[0], token))
            elif todo:
                workers = min(len(todo), rollout.max_parallel)
                with ThreadPoolExecutor(workers, thread_name_prefix="host",
                                        initializer=logcontext.inherit()) as pool:
                    outcomes += pool.map(
                        lambda h: self._run_on_host(step, phase, tool, params, h, token), todo)
            if rollout.stop_on_failure and not all(o.ok for o in outcomes):
                break
            if phase is Phase.PLAN and tool.mutates:  # after every batch, the last included
                where = (number, len(batches))
                judged = not todo and self._gates_passed(step, rollout, number)
                failure = (None if judged else self._batch_gates(step, params, rollout,
                                                                 where, token)) \
                    or self._go_no_go(step, params, rollout, where, token, resumed=not todo)
                if failure is not None:
                    outcomes.append(_HostOutcome(ok=False, error=failure))
                    break
        return outcomes

    def _gates_passed(self, step: Step | RollbackStep, rollout: Rollout, batch: int) -> bool:
        """A batch an earlier worker finished: whether every gate after it passed there
        (else they are evaluated again: they only read)."""
        latest = {c.name: c for c in self.run.gates if c.step == step.id
                  and c.after_batch == batch}
        return all(name in latest and latest[name].ok for name in rollout.after_each_batch)

    def _held(self, what: str, running: list[Future[bool]] | None = None) -> bool:
        """The hold point, before a step or rollout batch of the plan starts: while the run
        is paused nothing new starts (what runs carries on) until it is resumed, stopped,
        or the pause expires into a rollback (see ``Hold``). Whether ``what`` may start
        now; False early, still paused, once one of ``running`` ends (its outcome counts)."""
        pause = self.hold.paused()  # each look reads the store: look once, before and after
        if pause is not None and not self.cancel.cancelled:
            log.info("run %s: paused by %s; %s waits until it is resumed (or the pause "
                     "expires at %s)", self.run.id, pause.by, what,
                     time.strftime("%H:%M:%S UTC", time.gmtime(pause.until or 0.0)))
            self._show_pause(pause, what)
            self.hold.wait(lambda: any(f.done() for f in running or ()))
            pause = self.hold.paused()
            self._show_pause(pause, what)
        return pause is None and not self.cancel.cancelled

    def _show_pause(self, pause: Pause | None, what: str) -> None:
        """Put the pause (or its end) in the record, once, whichever thread sees it first."""
        with self.lock:
            shown = self.run.paused
            if pause is None and shown is not None:
                self.emit(EventKind.RUN_RESUMED)
            elif pause is not None and (shown is None or shown.at != pause.at):
                self.emit(EventKind.RUN_PAUSED,
                          pause=pause.model_copy(update={"before": what}).model_dump())

    def _start_batch(self, step: Step | RollbackStep, phase: Phase, tool: Tool,
                     params: dict[str, ParamValue], batch: list[Host]) -> list[_HostOutcome]:
        """Before a mutating command starts on a batch: one event records that it may start
        on each of its hosts, and one wait makes that durable for the whole batch. The
        outcomes of a batch that must not start (nothing ran there), else none."""
        names = [h.name for h in batch]
        fenced = self.may_start(f"{step.id} on {', '.join(names[:3])}"
                                + (f" and {len(names) - 3} more" if len(names) > 3 else ""))
        if fenced is not None:  # no host of the batch started: none is counted as changed
            return [_HostOutcome(ok=False, error=f"not started on {', '.join(names)}: {fenced}")]
        if not tool.mutates:
            return []
        for host in batch:  # a command that cannot be built fails the step before any host
            self._command(tool, params, host)  # is counted as changed
        self.emit(EventKind.HOSTS_STARTING, step_id=step.id, phase=phase, hosts=names,
                  mutating=True)
        # every batch, already-changed hosts and rollback included: a record lost in a
        # failover would let a takeover run the step there again while this copy runs
        problem = self._durable(f"the start of {step.id} on {len(names)} host(s)", phase)
        if problem is None:
            return []
        return [self._not_started({"step_id": step.id, "phase": phase, "host": name}, problem)
                for name in names]

    def _durable(self, what: str, phase: Phase) -> str | None:
        """``durable`` for a start in ``phase``. The replication gate holds a forward step
        back; it does not hold a rollback back: a rollback start no replica confirmed within
        the bounded wait (its record is on the primary only) goes ahead, and the record says
        so (``meta.unreplicated``). What the gate protects is the record that a command
        started, so that a takeover after a failover neither misses a changed host nor runs
        the command again; a rollback's host is already recorded as changed, so losing its
        start can only make a takeover run the rollback there again — what a rollback is
        for. Refusing it instead leaves the host on the new version for certain. Any other
        reason (the store unreachable, the run another worker's) stops a rollback too."""
        problem = self.durable(what, _ReplicaWaits(self, phase))
        if phase is Phase.PLAN or not isinstance(problem, NotReplicated):
            return problem
        fenced = self.may_start(what)  # after the wait: the run is still this worker's
        if fenced is not None:
            return fenced
        now = time.time()
        log.warning("run %s: %s goes ahead without a replica's confirmation: %s", self.run.id,
                    what, problem)
        self.emit(EventKind.REPLICA_WAIT, phase=phase, status="unconfirmed", error=problem,
                  wait=ReplicaWait(what=what, since=now, until=now,
                                   outcome="unconfirmed").model_dump())
        return None

    def _not_started(self, ids: dict[str, Any], problem: str) -> _HostOutcome:
        error = f"{ids['host']}: not started: {problem}"
        self.emit(EventKind.HOST_FINISHED, status="failed", error=error, mutating=False, **ids)
        return _HostOutcome(ok=False, error=error)

    def _batch_gates(self, step: Step | RollbackStep, params: dict[str, ParamValue],
                     rollout: Rollout, batch: tuple[int, int], token: CancelToken, *,
                     when: str = "") -> str | None:
        """Run the rollout's gates after batch ``batch`` = (number, of); why the rollout
        stops, or None. Each evaluation is recorded with every sample (GATE_JUDGED)."""
        ids = {"step_id": step.id, "phase": Phase.PLAN, "host": LOCAL_HOST.name}
        done, total = batch
        for name in rollout.after_each_batch:
            self._output(f"gate {name} after batch {done} of {total}{when}:", ids)
            check = self._gate(name, step, params, batch, token,
                               on_output=lambda line: self._output(line, ids))
            if isinstance(check, str):  # a gate that cannot run fails closed
                return f"gate {name} could not run after batch {done} of {total}{when}: {check}"
            self._gate_judged(check)
            if not check.ok:
                return stop_reason(check) + when
        return None

    def _gate(self, name: str, step: Step | RollbackStep, params: dict[str, ParamValue],
              batch: tuple[int, int], token: CancelToken, *,
              on_output: Callable[[str], None] = lambda line: None) -> GateCheck | str:
        """One evaluation of gate ``name`` after ``batch``; why it could not run, if not."""
        gate = self.deps.catalog.get(name)
        shared = {k: v for k, v in params.items() if k in gate.params}
        try:
            spec = self.deps.catalog.render(gate, shared, host_vars={},
                                            config_vars=self.deps.config_vars)
            result = self.deps.gate_runner.run(spec, timeout=gate.timeout, cancel=token,
                                               on_output=on_output)
        except DeckhandError as exc:
            return str(exc)
        return gate_check(name, step.id, result, after_batch=batch[0], batches=batch[1])

    def _watch_gates(self, step: Step | RollbackStep, params: dict[str, ParamValue],
                     rollout: Rollout, batch: tuple[int, int]) -> JudgeGates:
        """The gates judged again, quietly, while holding after ``batch``: one that cannot
        run counts as failed (fail closed), with its reason."""
        def judge(token: CancelToken) -> list[GateCheck]:
            checks = []
            for name in rollout.after_each_batch:
                check = self._gate(name, step, params, batch, token)
                checks.append(check if not isinstance(check, str) else GateCheck(
                    name=name, step=step.id, after_batch=batch[0], batches=batch[1],
                    ok=False, reason=f"could not run: {check}"))
            return checks
        return judge

    def _go_no_go(self, step: Step | RollbackStep, params: dict[str, ParamValue],
                  rollout: Rollout, batch: tuple[int, int], token: CancelToken, *,
                  resumed: bool = False) -> str | None:
        """After a batch listed in ``rollout.judgment`` (its gates passed): hold — nothing
        new starts here, the worker keeps its locks and lease — until Continue, Roll back,
        the timeout or a gate failing meanwhile decides (``agents.run.judgment``,
        ``agents.run.hold_watch``). Why the rollout stops, or None. Continue judges the
        gates once more before anything starts: figures seen earlier do not carry it.

        ``resumed``: an earlier worker finished this batch. A hold it had entered is the
        same hold here — its deadline, its buttons (the hold's name), a decision made
        meanwhile — never a new one; a decision it had acted on stands."""
        if rollout.judgment is None or not applies(rollout.judgment, *batch):
            return None
        earlier = self._earlier_hold(step, batch[0]) if resumed else None
        if earlier is not None and earlier.decision is not None:
            decision = earlier.decision
            held = earlier
        else:
            held = self._hold(step, rollout.judgment, batch, earlier)
            watch = HoldWatch(held, self._watch_gates(step, params, rollout, batch),
                              rollback_on_failure=rollout.judgment.on_gate_failure
                              == "rollback", clock=self.deps.clock,
                              shown=lambda shown: self.emit(
                                  EventKind.JUDGMENT_AWAITED, step_id=step.id,
                                  judgment=shown.model_dump(mode="json")),
                              judged=self._gate_judged)
            watch.start()
            try:
                decision = wait_for(self.judge, held, clock=self.deps.clock, token=token,
                                    watch=watch.proposed) or Decision(
                    verdict=Verdict.ROLLBACK, actor="deckhand", via="cancel",
                    reason=f"cancelled while awaiting go/no-go {held.where()}: {token.reason}")
            finally:
                held = watch.stop()
            held = held.model_copy(update={"decision": decision})
            self.emit(EventKind.JUDGMENT_DECIDED, step_id=step.id, status=decision.verdict.value,
                      error=decision.reason, judgment=held.model_dump(mode="json"))
        stop = self._decided(held, decision)
        if stop is not None or not rollout.after_each_batch:
            return stop
        return self._batch_gates(step, params, rollout, batch, token,
                                 when=" (judged again on Continue)")

    def _hold(self, step: Step | RollbackStep, config: JudgmentConfig, batch: tuple[int, int],
              earlier: Judgment | None) -> Judgment:
        """The hold to wait at: the one an earlier worker entered, or a new one (recorded)."""
        if earlier is not None:
            log.info("run %s: still awaiting go/no-go %s (since %s; taken over)", self.run.id,
                     earlier.where(), time.strftime("%H:%M:%S", time.gmtime(earlier.since)))
            return earlier
        with self.lock:
            held = awaiting(self.run, step.id, config, *batch, now=self.deps.clock())
        self.emit(EventKind.JUDGMENT_AWAITED, step_id=step.id,
                  judgment=held.model_dump(mode="json"))
        return held

    def _earlier_hold(self, step: Step | RollbackStep, batch: int) -> Judgment | None:
        name = hold_of(step.id, batch)
        with self.lock:
            return next((j for j in reversed(self.run.judgments) if j.hold == name), None)

    @staticmethod
    def _decided(held: Judgment, decision: Decision) -> str | None:
        """Why the rollout stops after this decision, or None (Continue)."""
        if decision.verdict is Verdict.CONTINUE:
            return None
        return decision.reason if decision.via == "cancel" else \
            f"no-go {held.where()}: {decision.describe()}"

    def _gate_judged(self, check: GateCheck) -> None:
        redact = self.deps.redact
        check.lines = [redact(line) for line in check.lines]
        check.reason = redact(check.reason) if check.reason else None
        check.samples = [s.model_copy(update={"query": redact(s.query), "series": redact(s.series)})
                         for s in check.samples]  # labels are the measured system's words
        self.emit(EventKind.GATE_JUDGED, step_id=check.step,
                  status="passed" if check.ok else "failed", error=check.reason,
                  gate=check.model_dump(mode="json"))

    def _run_on_host(self, step: Step | RollbackStep, phase: Phase, tool: Tool,
                     params: dict[str, ParamValue], host: Host,
                     token: CancelToken) -> _HostOutcome:
        command = self._command(tool, params, host)
        with tracing.span("deckhand.host", {"deckhand.host": host.name,
                                            "deckhand.step.id": step.id}) as span:
            outcome = self._attempts_on_host(step, phase, tool, host, command, token)
            tracing.finish(span, ok=outcome.ok, **{
                "deckhand.error": self.deps.redact(outcome.error) if outcome.error else None})
        return outcome

    def _command(self, tool: Tool, params: dict[str, ParamValue], host: Host) -> str:
        host_vars = {"name": host.name, "address": host.address, **host.vars}
        return self.deps.catalog.render(tool, params, host_vars=host_vars,
                                        config_vars=self.deps.config_vars)

    def _attempts_on_host(self, step: Step | RollbackStep, phase: Phase, tool: Tool,
                          host: Host, command: str, token: CancelToken) -> _HostOutcome:
        success = success_criteria(tool, step)  # the tool's checks plus the plan's additions
        ids = {"step_id": step.id, "phase": phase, "host": host.name}
        outcome = _HostOutcome(ok=False)
        for attempt in range(1, tool.retries + 2):
            refused = self._start_attempt(tool, attempt, ids)
            if refused is not None:
                return self._not_started(ids, refused)
            watch = _OutputWatch(tool.outputs, success.patterns,
                                 lambda text: self._output(text, ids))
            try:
                result, error, maybe_ran = self._invoke(host, tool, command, watch, token, ids)
            finally:
                watch.flush()
            self.ran |= result is not None or maybe_ran
            if tool.gate is not None and result is not None:  # a gate as a step: its samples
                self._gate_judged(gate_check(tool.name, step.id, result))
            outcome = _HostOutcome(ok=False, error=error, outputs=watch.outputs)
            if error is None:
                outcome.error = _judge(result, success, watch, tool.timeout, host.name)
                outcome.ok = outcome.error is None
            self.emit(EventKind.HOST_FINISHED, status="succeeded" if outcome.ok else "failed",
                      exit_code=result.exit_code if result else None,
                      tail=self.deps.redact(result.tail) if result else "",
                      error=outcome.error, attempt=attempt, pid=self._left_running(result, ids),
                      outputs=watch.outputs,
                      # a host we never reached was not changed; one that may have run the
                      # command was (a connection that dropped mid-command included)
                      mutating=tool.mutates and (result is not None or maybe_ran), **ids)
            if outcome.ok or token.cancelled or attempt > tool.retries:
                break
            if maybe_ran and tool.mutates and not tool.idempotent:
                break  # it may have run once already: running it again could do it twice
            self.emit(EventKind.STEP_RETRY, attempt=attempt, error=outcome.error, **ids)
            if token.wait(tool.retry_backoff * 2 ** (attempt - 1)):
                break
        return outcome

    def _left_running(self, result: CommandResult | None, ids: dict[str, Any]) -> int | None:
        """The process group of a command whose kill the host did not confirm, else None."""
        if result is None or result.unconfirmed_kill is None:
            return None
        with self.lock:
            state = self.run.states(ids["phase"]).get(ids["step_id"])
            host = state.hosts.get(ids["host"]) if state else None
            return host.pid if host else None

    def _stop_left_running(self) -> None:
        """Before the rollback: stop, on each host, what a command whose kill was not
        confirmed may have left running, so it cannot land after the undo."""
        with self.lock:
            left = [(step, name, result.pid) for step, state in self.run.steps.items()
                    for name, result in state.hosts.items()
                    if result.pid is not None and result.status.done]
        for step, name, pid in left:
            host = self.deps.inventory.hosts.get(name) or LOCAL_HOST
            try:
                self.deps.runner_for(host).kill_group(pid)
            except DeckhandError as exc:  # still unreachable: the rollback says so there
                log.warning("run %s: %s on %s may still run (process group %d): %s",
                            self.run.id, step, name, pid, exc)
                continue
            self.emit(EventKind.HOST_PID, step_id=step, host=name, pid=None)  # stopped

    def _start_attempt(self, tool: Tool, attempt: int, ids: dict[str, Any]) -> str | None:
        """Record that an attempt starts, once the lease is vouched for. A mutating retry is
        made durable first, as a batch is for the first attempt (see ``_start_batch``). Why
        it must not start, or None. (A command with a process group also waits in
        ``_invoke``'s start gate.)"""
        fenced = self.may_start(f"attempt {attempt} of {ids['step_id']} on {ids['host']}")
        if fenced is not None:
            return fenced
        if ids["phase"] is Phase.PLAN:  # stopped meanwhile? A command's start gate reads
            # the store's stop itself; a gate's evaluation has none, so it is read here
            stopped = self.hold.stopped() if tool.gate is not None else (
                self.cancel.reason if self.cancel.cancelled else None)
            if stopped is not None:
                return stopped
        self.emit(EventKind.HOST_STARTED, attempt=attempt, mutating=tool.mutates, **ids)
        if not tool.mutates or attempt == 1:
            return None
        return self._durable(f"attempt {attempt} of {ids['step_id']} on {ids['host']}",
                             ids["phase"])

    def _invoke(self, host: Host, tool: Tool, command: str, watch: _OutputWatch,
                token: CancelToken, ids: dict[str, Any]
                ) -> tuple[CommandResult | None, str | None, bool]:
        """(result, error, whether the command may have run although no result came)."""
        def started(pid: int) -> str | None:  # the start gate: the command waits for it
            self.emit(EventKind.HOST_PID, pid=pid, **ids)  # so a takeover can stop it
            # the last look before it runs: a stop acknowledged by now is read here, so
            # nothing of the plan starts after it (a rollback's commands are never stopped)
            stopped = self.hold.stopped() if ids["phase"] is Phase.PLAN else None
            if stopped is not None:
                return stopped
            if not tool.mutates:
                return None
            try:  # its process group on a replica before it may change anything
                return self._durable(f"the process group of {ids['step_id']} on "
                                     f"{host.name}", ids["phase"])
            except DeckhandError as exc:
                return str(exc)

        try:
            runner = self.deps.gate_runner if tool.gate else self.deps.runner_for(host)
            result = runner.run(command, timeout=tool.timeout, on_output=watch,
                                cancel=token, on_start=started)
        except CommandInterrupted as exc:
            return None, f"{host.name}: {exc}", True
        except DeckhandError as exc:
            return None, f"{host.name}: {exc}", False
        return result, None, False

    def _output(self, line: str, ids: dict[str, Any]) -> None:
        self.emit(EventKind.STEP_OUTPUT, line=self.deps.redact(line), **ids)

    def _resolve_refs(self, params: dict[str, ParamValue]) -> dict[str, ParamValue]:
        resolved: dict[str, ParamValue] = {}
        for key, value in params.items():
            ref = OUTPUT_REF.match(value) if isinstance(value, str) else None
            if ref is None:
                resolved[key] = value
                continue
            source, name = ref.groups()
            outputs = self.run.steps[source].outputs if source in self.run.steps else {}
            if name not in outputs:
                raise DeckhandError(f"parameter {key!r} needs output {name!r} of step "
                                    f"{source}, which did not produce it")
            resolved[key] = outputs[name]
        return resolved


class _ReplicaWaits:
    """A start's wait for a replica, in the record as one REPLICA_WAIT however many hosts'
    starts wait at once: the first to wait says "waiting", the last to end how it ended. A
    forward step stops waiting when the run is stopped; a rollback waits out its bound."""

    def __init__(self, execution: _Execution, phase: Phase):
        self.execution, self.phase = execution, phase

    def waiting(self, what: str, seconds: float) -> None:
        ex = self.execution
        with ex.lock:  # emitted under it: "waiting" and its end stay in order
            ex.replica_waiters += 1
            if ex.replica_waiters == 1:
                now = time.time()
                ex.emit(EventKind.REPLICA_WAIT, phase=self.phase, status="waiting",
                        wait=ReplicaWait(what=what, since=now, until=now + seconds).model_dump())

    def waited(self, outcome: str) -> None:
        ex = self.execution
        with ex.lock:
            ex.replica_waiters = max(ex.replica_waiters - 1, 0)
            if ex.replica_waiters == 0:
                wait = ex.run.replica_wait
                ex.emit(EventKind.REPLICA_WAIT, phase=self.phase, status=outcome,
                        wait=wait.model_copy(update={"outcome": outcome}).model_dump()
                        if wait is not None else None)

    def stopped(self) -> bool:
        """A forward step's wait ends with a stop (the store's, read now); a rollback's
        never does (``Hold.stopped``: a rollback's commands are never stopped)."""
        return self.phase is Phase.PLAN and self.execution.hold.stopped() is not None


class _OutputWatch:
    """Watches output lines for declared outputs and the required success patterns (RE2:
    linear time, so no pattern can stall the step or starve the lease heartbeat), and
    passes them on as STEP_OUTPUT: one event per ``BATCH_SECONDS`` of a burst (the first
    line after a quiet spell at once), holding at most the last ``BATCH_CHARS`` of it —
    what the record keeps is the command's bounded tail; events are a live glimpse, so a
    flood of output costs no redaction or event per line."""

    BATCH_SECONDS = 0.05
    BATCH_CHARS = 64 * 1024

    def __init__(self, outputs: dict[str, str], success_patterns: tuple[str, ...],
                 sink: Callable[[str], None]):
        self._outputs = {k: compile_safe(p) for k, p in outputs.items()}
        self._missing = {p: compile_safe(p) for p in success_patterns}
        self._sink = sink
        self._batch: list[str] = []
        self._chars = 0
        self._skipped = 0
        self._sent = float("-inf")
        self._lock = threading.Lock()
        self.outputs: dict[str, str] = {}

    @property
    def matched_success(self) -> bool:
        return not self._missing

    @property
    def unmatched(self) -> list[str]:
        return list(self._missing)

    def __call__(self, line: str) -> None:
        self.feed_many([line])

    def feed_many(self, lines: list[str]) -> None:
        """The lines of one chunk of output, in order."""
        if self._outputs or self._missing:
            for line in lines:
                self._match(line)
        with self._lock:  # stdout and stderr may be read by two threads
            self._batch.extend(lines)
            self._chars += sum(map(len, lines))
            if self._chars > 4 * self.BATCH_CHARS:
                self._trim()
            due = time.monotonic() - self._sent >= self.BATCH_SECONDS
        if due:
            self.flush()

    def flush(self) -> None:
        """Pass on what is batched (also once the command has ended)."""
        with self._lock:
            self._trim()
            batch, skipped = self._batch, self._skipped
            self._batch, self._chars, self._skipped = [], 0, 0
            self._sent = time.monotonic()
        if skipped:
            batch.insert(0, f"… {skipped} line(s) of output not shown here (see the tail) …")
        if batch:
            self._sink("\n".join(batch))

    def _trim(self) -> None:
        """Keep the last BATCH_CHARS of the batch (whole lines; at least the last one)."""
        kept, size = 0, 0
        for line in reversed(self._batch):
            if kept and size + len(line) > self.BATCH_CHARS:
                break
            kept, size = kept + 1, size + len(line) + 1
        self._skipped += len(self._batch) - kept
        del self._batch[:len(self._batch) - kept]
        self._chars = size

    def _match(self, line: str) -> None:
        for key, pattern in self._outputs.items():
            found = pattern.search(line)
            if found:
                self.outputs[key] = found.group(1)
        for text, pattern in list(self._missing.items()):
            if pattern.search(line):
                del self._missing[text]


def _notify(listener: Listener, event: Event, run: Run) -> Deferred | None:
    try:
        return listener(event, run)
    except Exception:  # a broken listener must not break the deploy
        log.exception("listener %r failed on %s", listener, event.kind.value)
        return None


def _finish(work: Deferred, event: Event) -> None:
    try:
        work()
    except Exception:  # as in _notify
        log.exception("a listener's write failed on %s", event.kind.value)


def _nothing_to_wait_for(what: str) -> str | None:
    return None


def _always_durable(what: str, waits: ReplicaWaits) -> str | None:
    return None


def _judge(result: CommandResult | None, success: Criteria, watch: _OutputWatch,
           timeout: float, host: str) -> str | None:
    """Why this result is a failure, or None if it succeeded."""
    if result is None:
        return "did not run"
    if result.timed_out or result.cancelled:
        what = f"timed out after {timeout:g}s" if result.timed_out else "cancelled"
        if result.output_held_open:
            what += (" (the command had ended, but a process it started in the background "
                     "kept its output open: start daemons with `>/dev/null 2>&1 &`)")
        return f"{what}; {_kill_outcome(result, host)}"
    if result.exit_code != success.exit_code:
        why = explaining(result.tail)
        return f"exit code {result.exit_code} (expected {success.exit_code})" + (
            f": {why}" if why else "")
    if not watch.matched_success:
        return f"output never matched {watch.unmatched[0]!r}"
    return None


def _kill_outcome(result: CommandResult, host: str) -> str:
    """What became of a command deckhand stopped: killed only when the host confirmed it."""
    if result.unconfirmed_kill is None:
        return "the process was killed"
    return (f"it may still be running on host {host}: the kill was not confirmed "
            f"({result.unconfirmed_kill})")
