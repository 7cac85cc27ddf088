"""The run record: its state machine, per-step and per-host results, and the events that build it.

The executor never edits a Run directly: it emits Events, and ``Run.apply`` folds each one
into the record. The same events feed the terminal, Slack threads, the store and the audit log.
"""

from __future__ import annotations

import time
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field, model_validator

from agents import tracing
from agents.errors import IllegalTransition
from agents.ids import new_id
from agents.plan.model import Plan
from agents.plan.targets import UNSCOPED, PlanTargets
from tools.gates import GateSample
from tools.inventory import LOCAL_HOST_NAME, Inventory


class RunStatus(StrEnum):
    AWAITING_APPROVAL = "awaiting_approval"
    APPROVED = "approved"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ROLLING_BACK = "rolling_back"
    ROLLED_BACK = "rolled_back"
    ROLLBACK_FAILED = "rollback_failed"
    REJECTED = "rejected"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    INTERRUPTED = "interrupted"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.ROLLED_BACK,
                      RunStatus.ROLLBACK_FAILED, RunStatus.REJECTED, RunStatus.CANCELLED,
                      RunStatus.EXPIRED, RunStatus.INTERRUPTED})

_S = RunStatus
_HOST_NAMES = {"__all__": {"hosts": {"__all__": {"host"}}}}
_STORED_EXCLUDE: Any = {"steps": _HOST_NAMES, "rollback": _HOST_NAMES}
TRANSITIONS: dict[RunStatus, frozenset[RunStatus]] = {
    _S.AWAITING_APPROVAL: frozenset({_S.APPROVED, _S.REJECTED, _S.CANCELLED, _S.EXPIRED,
                                     _S.AWAITING_APPROVAL}),
    _S.APPROVED: frozenset({_S.QUEUED, _S.RUNNING, _S.CANCELLED}),
    _S.QUEUED: frozenset({_S.RUNNING, _S.CANCELLED, _S.INTERRUPTED, _S.FAILED}),
    _S.RUNNING: frozenset({_S.SUCCEEDED, _S.FAILED, _S.ROLLING_BACK, _S.CANCELLED,
                           _S.INTERRUPTED, _S.AWAITING_APPROVAL}),
    _S.ROLLING_BACK: frozenset({_S.ROLLED_BACK, _S.ROLLBACK_FAILED, _S.CANCELLED,
                                _S.INTERRUPTED}),
}
"""Allowed moves. RUNNING -> AWAITING_APPROVAL is a replan that needs a new approval."""


def check_transition(current: RunStatus, new: RunStatus) -> None:
    """Raise IllegalTransition unless ``current`` may move to ``new``."""
    if new not in TRANSITIONS.get(current, frozenset()):
        raise IllegalTransition(f"a run that is {current.value} cannot become {new.value}")


class StepStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"

    @property
    def done(self) -> bool:
        return self not in (StepStatus.PENDING, StepStatus.RUNNING)


class Phase(StrEnum):
    PLAN = "plan"
    ROLLBACK = "rollback"


class EventKind(StrEnum):
    RUN_STARTED = "run_started"
    STEP_STARTED = "step_started"
    HOSTS_STARTING = "hosts_starting"
    """A batch of hosts a mutating command is about to start on (changed from now on)."""
    HOST_STARTED = "host_started"
    HOST_PID = "host_pid"
    """The command's process group on the host: what a takeover must stop."""
    STEP_OUTPUT = "step_output"
    """Output of a command, redacted: one or more lines (joined by newlines) — a burst of
    output is batched (see ``agents.executor._OutputWatch``)."""
    STEP_RETRY = "step_retry"
    HOST_FINISHED = "host_finished"
    STEP_FINISHED = "step_finished"
    ROLLBACK_STARTED = "rollback_started"
    ROLLBACK_FINISHED = "rollback_finished"
    REPLANNED = "replanned"
    GATE_JUDGED = "gate_judged"
    """A gate was evaluated (after a rollout batch, or as a step): every sample it judged."""
    RUN_PAUSED = "run_paused"
    """A pause holds the run before its next step or batch (``Event.pause``)."""
    RUN_RESUMED = "run_resumed"
    JUDGMENT_AWAITED = "judgment_awaited"
    """The rollout holds for a go/no-go decision after a batch (``Event.judgment``)."""
    JUDGMENT_DECIDED = "judgment_decided"
    """Continue or Roll back was decided (by someone, or by the timeout)."""
    REPLICA_WAIT = "replica_wait"
    """A mutating start waits, bounded, for a Redis replica to confirm its record (after a
    failover, the promoted primary's replica syncing): ``status`` ``waiting`` (``Event.wait``
    says what and until when), then how it ended — ``confirmed``, ``no_replica`` (none
    left that a failover could promote), ``timed_out``, ``stopped``, or ``unconfirmed``: a
    rollback that went ahead without a confirmation (``meta.unreplicated`` names it)."""
    RUN_FINISHED = "run_finished"


HOST_EVENTS = frozenset({EventKind.HOSTS_STARTING, EventKind.HOST_STARTED,
                         EventKind.HOST_PID, EventKind.HOST_FINISHED})
"""Events that change only host results (and which hosts count as changed)."""


class Event(BaseModel):
    """Something that happened during a run. Events are facts: they are never edited."""

    kind: EventKind
    run_id: str
    at: float = Field(default_factory=time.time)
    phase: Phase = Phase.PLAN
    step_id: str | None = None
    host: str | None = None
    status: str | None = None
    exit_code: int | None = None
    attempt: int = 0
    line: str | None = None
    tail: str | None = None
    error: str | None = None
    mutating: bool = False
    pid: int | None = None
    hosts: list[str] = Field(default_factory=list)
    """HOSTS_STARTING: the batch."""
    outputs: dict[str, str] = Field(default_factory=dict)
    plan: dict[str, Any] | None = None
    """REPLANNED: the revised plan (agents.plan.model.Plan as JSON) and its hash."""
    plan_hash: str | None = None
    gate: dict[str, Any] | None = None
    """GATE_JUDGED: the GateCheck (as JSON)."""
    pause: dict[str, Any] | None = None
    """RUN_PAUSED: the Pause (as JSON)."""
    judgment: dict[str, Any] | None = None
    """JUDGMENT_AWAITED / _DECIDED: the Judgment (as JSON)."""
    wait: dict[str, Any] | None = None
    """REPLICA_WAIT: the ReplicaWait (as JSON)."""

    def describe(self) -> str:
        """One human line for logs and audit."""
        parts = [self.kind.value, self.step_id or "", self.host or "", self.status or ""]
        text = " ".join(p for p in parts if p)
        return f"{text}: {self.error}" if self.error else text


class HostResult(BaseModel):
    host: str
    pid: int | None = None
    """The running command's process group on the host (until it finishes)."""
    provisional: bool = False
    """Counted as changed when its mutating command started; withdrawn if it never ran."""
    mutated: bool = False
    """A mutating command ended here: the host is changed for good."""
    status: StepStatus = StepStatus.RUNNING
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    attempts: int = 0
    tail: str = ""
    error: str | None = None
    outputs: dict[str, str] = Field(default_factory=dict)
    """The tool's outputs its command printed here (a step resumed on another worker
    keeps those of the hosts it does not run again)."""

    @property
    def duration(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.started_at


class HostChange(BaseModel):
    """What one host event did to a run: that host's result in one step, and whether the
    run now counts the host as changed. Folding the changes after the record in ``seq``
    order gives the same Run as folding the events (the store keeps them as the record's
    host journal, so a host event costs one small write, not a rewrite of the record)."""

    seq: int
    phase: Phase
    step: str
    result: HostResult
    changed: bool


class GateCheck(BaseModel):
    """One evaluation of a gate in a run, with every sample it judged."""

    name: str
    step: str
    """The step whose rollout it judged (or the gate step itself)."""
    after_batch: int | None = None
    batches: int | None = None
    ok: bool
    reason: str | None = None
    """Why it failed, naming the worst sample."""
    samples: list[GateSample] = Field(default_factory=list)
    samples_total: int = 0
    """How many were judged (``samples`` keeps the failed ones first, up to a bound)."""
    lines: list[str] = Field(default_factory=list)
    """Its result lines (http and ci_status gates have no samples)."""
    at: float = Field(default_factory=time.time)


class Verdict(StrEnum):
    """A go/no-go decision."""

    CONTINUE = "continue"
    ROLLBACK = "rollback"


class Decision(BaseModel):
    """Who decided a go/no-go hold, what, how (``via``: slack, cli, mcp, terminal, timeout)."""

    verdict: Verdict
    actor: str
    via: str
    at: float = Field(default_factory=time.time)
    reason: str | None = None

    def describe(self) -> str:
        what = "Continue" if self.verdict is Verdict.CONTINUE else "Roll back"
        return self.reason or f"{what}, decided by {self.actor} ({self.via})"


class Judgment(BaseModel):
    """A go/no-go hold after a rollout batch: what the batch did, and its decision."""

    hold: str
    """``STEP/BATCH``: names the decision in the store (one per run, step and batch)."""
    step: str
    after_batch: int
    batches: int
    since: float
    timeout: float
    on_timeout: Verdict
    approvers: list[str] = Field(default_factory=list)
    """rollout.judgment.approvers: who may decide, on top of who may approve (if set)."""
    hosts_done: list[str] = Field(default_factory=list)
    errors: int = 0
    """Hosts of the step that failed so far (stop_on_failure off lets a rollout go on)."""
    gates: list[str] = Field(default_factory=list)
    """The gates' figures after this batch, one line each: the newest (re-judged while
    holding, every ``recheck`` seconds)."""
    measured_at: float | None = None
    """When ``gates`` were measured (None: at the end of the batch)."""
    recheck: float = 0.0
    """Seconds between judgments while holding (0: judged again only on Continue)."""
    decision: Decision | None = None

    @property
    def deadline(self) -> float:
        return self.since + self.timeout

    def where(self) -> str:
        return f"after batch {self.after_batch} of {self.batches} of {self.step}"


class StepState(BaseModel):
    id: str
    status: StepStatus = StepStatus.PENDING
    started_at: float | None = None
    finished_at: float | None = None
    attempts: int = 0
    hosts: dict[str, HostResult] = Field(default_factory=dict)
    outputs: dict[str, str] = Field(default_factory=dict)
    error: str | None = None

    @property
    def duration(self) -> float | None:
        if self.started_at is None:
            return None
        return (self.finished_at or time.time()) - self.started_at

    @model_validator(mode="before")
    @classmethod
    def _host_names_from_keys(cls, data: Any) -> Any:
        """A stored record leaves each host's name to its key (see ``Run.record_json``)."""
        if isinstance(data, dict) and isinstance(data.get("hosts"), dict):
            data = {**data, "hosts": {name: {"host": name, **h} if isinstance(h, dict) and
                                      "host" not in h else h
                                      for name, h in data["hosts"].items()}}
        return data


class Pause(BaseModel):
    """Who paused a run, since when, and through which face (button, cli, mcp)."""

    by: str
    at: float
    via: str
    until: float | None = None
    """When the pause expires into a rollback (set once the run is held)."""
    before: str | None = None
    """What waits for the resume (a step, a rollout batch), once the run is held."""


class ReplicaWait(BaseModel):
    """A mutating start held until a Redis replica confirms that its record is there (see
    ``agents.engine.recorder``), at most until ``until``; then it fails ("not started"), or
    a rollback goes ahead unconfirmed."""

    what: str
    """What waits: "the start of deploy on 3 host(s)", "the process group of undo on web-1"."""
    since: float
    until: float
    outcome: str | None = None
    """How it ended (an event's status): confirmed, no_replica, timed_out, stopped,
    unconfirmed."""


class Approval(BaseModel):
    user: str
    via: str | None = None
    """The face ``user`` was recorded through (``agents.faces``; None: from before)."""
    at: float = Field(default_factory=time.time)
    plan_version: int
    plan_hash: str
    break_glass: bool = False
    """This approval is the run's break-glass grant (from policy.break_glass), given on top
    of the environments' approvals; False: one of those approvals."""
    policy: str | None = None
    """The version of the policy it was checked against (``policy_version``; None: from
    before versions were recorded)."""


class Run(BaseModel):
    """Everything known about one execution of one plan version."""

    id: str = Field(default_factory=lambda: new_id("run"))
    plan_id: str
    plan_version: int
    plan_hash: str
    goal: str = ""
    service: str | None = None
    """The plan's service (docs/services.md); None: the legacy service (a config without
    ``services:``), and every record written before services."""
    environments: list[str] = Field(default_factory=list)
    hosts: list[str] = Field(default_factory=list)
    reach: dict[str, list[str]] = Field(default_factory=dict)
    """Per environment (and shared scope), the hosts of it the plan touches (why its rules
    apply)."""
    shared: list[str] = Field(default_factory=list)
    """Other services' environments reached through a shared host (``web/production``):
    their rules apply to this run, their locks do not (a host lock does instead)."""
    unscoped: bool = False
    status: RunStatus = RunStatus.AWAITING_APPROVAL
    requested_by: str = "unknown"
    requested_via: str | None = None
    """The face that recorded ``requested_by`` (``agents.faces``), from the plan."""
    approvals: list[Approval] = Field(default_factory=list)
    steps: dict[str, StepState] = Field(default_factory=dict)
    rollback: dict[str, StepState] = Field(default_factory=dict)
    changed_hosts: list[str] = Field(default_factory=list)
    reason: str | None = None
    created_at: float = Field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    worker: str | None = None
    plan_versions: list[int] = Field(default_factory=list)
    modified_versions: list[int] = Field(default_factory=list)
    """The versions people made with Modify (the others: the planner's first, and replans)."""
    break_glass: str | None = None
    """Why this run must go ahead during a freeze (it then needs one more approval)."""
    meta: dict[str, Any] = Field(default_factory=dict)
    gates: list[GateCheck] = Field(default_factory=list)
    """Every gate evaluated in this run, in order."""
    paused: Pause | None = None
    """The pause holding the run now (nothing new starts until it is resumed)."""
    judgments: list[Judgment] = Field(default_factory=list)
    """Every go/no-go hold of this run, in order (the last may still wait)."""
    replica_wait: ReplicaWait | None = None
    """A start waiting for a Redis replica now (faces say "waiting for a Redis replica")."""
    seq: int = 0
    """How many events this record has folded in: host changes with a higher ``seq`` are
    newer than the record and still apply to it."""

    @classmethod
    def for_plan(cls, plan: Plan, targets: PlanTargets, **fields: Any) -> Run:
        """A new run record for ``plan`` with every step pending; ``targets`` (from
        ``agents.plan.targets.resolve``) say what it touches, for policy, locks and displays."""
        if plan.planner.traceparent:  # the run continues the trace it was planned in
            fields["meta"] = {"traceparent": plan.planner.traceparent,
                              **({tracing.ROOT: plan.planner.trace_root}
                                 if plan.planner.trace_root else {}),
                              **fields.get("meta", {})}
        run = cls(plan_id=plan.id, plan_version=plan.version, plan_hash=plan.hash,
                  goal=plan.goal, service=plan.service, requested_by=plan.requested_by,
                  requested_via=plan.requested_via, plan_versions=[plan.version],
                  steps={s.id: StepState(id=s.id) for s in plan.steps},
                  rollback={r.id: StepState(id=r.id) for r in plan.rollback}, **fields)
        run.set_targets(targets)
        return run

    def set_targets(self, targets: PlanTargets) -> None:
        """Record what the plan touches (every step, rollback included)."""
        self.environments, self.hosts = targets.environments, targets.hosts
        self.reach = {env: list(hosts) for env, hosts in targets.reach.items()}
        self.shared = list(targets.shared)
        self.unscoped = targets.unscoped

    @property
    def replans(self) -> int:
        """How many times the planner revised the plan while it ran (Modify not counted)."""
        return len(self.plan_versions) - 1 - len(self.modified_versions)

    @property
    def scopes(self) -> list[str]:
        """The policy scopes approvals, freezes and limits are checked against
        (environments, shared scopes, UNSCOPED)."""
        unscoped = self.unscoped or not self.environments  # records from before: fail closed
        return [*self.environments, *self.shared, *([UNSCOPED] if unscoped else [])]

    def host_locks(self, inventory: Inventory, *, every: bool = False) -> list[str]:
        """The host locks this run takes (``Host.lock_id``): each host it shares with
        another service, or with ``every`` (``lock_hosts``) each host it touches."""
        names = self.hosts if every else [h for s in self.shared for h in self.reach.get(s, [])]
        found = [inventory.hosts[h].lock_id for h in names
                 if h != LOCAL_HOST_NAME and h in inventory.hosts]
        return sorted(set(found))

    @property
    def awaiting(self) -> Judgment | None:
        """The go/no-go hold the run waits at now, if any."""
        last = self.judgments[-1] if self.judgments else None
        running = self.status is RunStatus.RUNNING  # a rollback or an end answers it
        return last if last is not None and last.decision is None and running else None

    def move(self, new: RunStatus) -> None:
        """Change status, raising IllegalTransition if the state machine forbids it."""
        check_transition(self.status, new)
        self.status = new

    @property
    def duration(self) -> float | None:
        if self.started_at is None:
            return None
        return (self.finished_at or time.time()) - self.started_at

    def mark_changed(self, host: str) -> None:
        """Remember that a mutating command ran on ``host`` (rollback will visit it)."""
        if host and host not in self.changed_hosts:
            self.changed_hosts.append(host)

    def states(self, phase: Phase) -> dict[str, StepState]:
        return self.rollback if phase is Phase.ROLLBACK else self.steps

    def record_json(self) -> str:
        """The record as the store keeps it: defaults left out and each host's name left to
        its key (both come back on load), about a fifth smaller on a many-host run."""
        return self.model_dump_json(exclude_defaults=True, exclude=_STORED_EXCLUDE)

    def apply(self, event: Event) -> None:
        """Fold one executor event into this record."""
        self.seq += 1
        handler = _APPLY.get(event.kind)
        if handler is not None:
            handler(self, event)

    def host_changes(self, event: Event) -> list[HostChange]:
        """What a host event (HOST_EVENTS) just folded into this record did, per host."""
        state = self.states(event.phase).get(event.step_id or "")
        if state is None:
            return []
        names = event.hosts or [event.host or ""]
        changed = set(self.changed_hosts) if len(names) > 1 else self.changed_hosts
        return [HostChange(seq=self.seq, phase=event.phase, step=state.id,
                           result=state.hosts[name].model_copy(), changed=name in changed)
                for name in names if name in state.hosts]

    def apply_host_change(self, change: HostChange) -> None:
        """Fold a host change in (one that is newer than this record: see ``seq``)."""
        self.seq = max(self.seq, change.seq)
        state = self.states(change.phase).get(change.step)
        if state is None:  # a replan dropped the step
            return
        name = change.result.host
        state.hosts[name] = change.result.model_copy()
        state.attempts = max(state.attempts, change.result.attempts)
        if change.changed:
            self.mark_changed(name)
        elif name in self.changed_hosts:
            self.changed_hosts.remove(name)


def _run_started(run: Run, ev: Event) -> None:
    # a takeover during rollback resumes the rollback: it stays rolling back
    if run.status not in (RunStatus.RUNNING, RunStatus.ROLLING_BACK):
        run.move(RunStatus.RUNNING)
    run.started_at = run.started_at or ev.at
    run.replica_wait = None  # a dead worker's wait is not this execution's


def _step_started(run: Run, ev: Event) -> None:
    state = run.states(ev.phase).setdefault(ev.step_id or "", StepState(id=ev.step_id or ""))
    resumed = state.hosts and state.started_at is not None  # taken over between hosts
    state.status, state.error, state.finished_at = StepStatus.RUNNING, None, None
    state.started_at = state.started_at if resumed else ev.at


def _hosts_starting(run: Run, ev: Event) -> None:
    state = run.states(ev.phase)[ev.step_id or ""]
    for name in ev.hosts:
        host = state.hosts[name] = HostResult(host=name, status=StepStatus.PENDING)
        if ev.mutating:
            run.mark_changed(name)  # as in _host_started: changed from here on
            host.provisional = True


def _host_started(run: Run, ev: Event) -> None:
    state = run.states(ev.phase)[ev.step_id or ""]
    host = state.hosts.setdefault(ev.host or "", HostResult(host=ev.host or ""))
    host.status, host.started_at, host.attempts = StepStatus.RUNNING, ev.at, ev.attempt
    state.attempts = max(state.attempts, ev.attempt)
    if ev.mutating:
        # changed from the moment a mutating command may start: a crash from here on
        # leaves a record whose rollback visits this host
        run.mark_changed(host.host)
        host.provisional = True


def _host_pid(run: Run, ev: Event) -> None:
    run.states(ev.phase)[ev.step_id or ""].hosts[ev.host or ""].pid = ev.pid


def _host_finished(run: Run, ev: Event) -> None:
    host = run.states(ev.phase)[ev.step_id or ""].hosts[ev.host or ""]
    host.status = StepStatus(ev.status or "failed")
    host.finished_at, host.exit_code = ev.at, ev.exit_code
    host.tail, host.error = ev.tail or "", ev.error
    host.outputs = dict(ev.outputs)
    if ev.mutating:
        run.mark_changed(ev.host or "")
        host.mutated = True
    elif host.provisional and not _changed_elsewhere(run, host):
        run.changed_hosts.remove(host.host)  # the command never started there
    # ended: nothing left to stop — unless its kill was not confirmed (the event then
    # carries its process group, for the rollback or a takeover to stop first)
    host.provisional, host.pid = False, ev.pid


def _changed_elsewhere(run: Run, mine: HostResult) -> bool:
    """Whether another step (either phase) has changed this host, or may be changing it."""
    return any(other is not mine and (other.provisional or other.mutated)
               for states in (run.steps, run.rollback) for state in states.values()
               for name, other in state.hosts.items() if name == mine.host)


def _step_finished(run: Run, ev: Event) -> None:
    state = run.states(ev.phase).setdefault(ev.step_id or "", StepState(id=ev.step_id or ""))
    state.status = StepStatus(ev.status or "failed")
    state.finished_at, state.error = ev.at, ev.error
    state.outputs.update(ev.outputs)


def _rollback_started(run: Run, ev: Event) -> None:
    run.move(RunStatus.ROLLING_BACK)
    run.paused = None  # a rollback is never held
    run.reason = run.reason or ev.error


def _replanned(run: Run, ev: Event) -> None:
    """Adopt a revised plan: finished steps keep their results, the rest start over."""
    plan = ev.plan or {}
    kept = {k: v for k, v in run.steps.items() if v.status is StepStatus.SUCCEEDED}
    run.steps = {s["id"]: kept.get(s["id"], StepState(id=s["id"])) for s in plan["steps"]}
    run.rollback = {r["id"]: run.rollback.get(r["id"], StepState(id=r["id"]))
                    for r in plan.get("rollback", [])}
    run.plan_version, run.plan_hash = int(plan["version"]), ev.plan_hash or ""
    run.plan_versions.append(run.plan_version)
    run.goal = plan.get("goal", run.goal)
    if ev.status == "needs_approval":
        run.move(RunStatus.AWAITING_APPROVAL)
        run.approvals = []
        run.reason = f"replanned after: {ev.error}; the revision needs approval"


def _gate_judged(run: Run, ev: Event) -> None:
    if ev.gate is not None:
        run.gates.append(GateCheck.model_validate(ev.gate))


def _judgment(run: Run, ev: Event) -> None:
    if ev.judgment is None:
        return
    judgment = Judgment.model_validate(ev.judgment)
    run.judgments = [j for j in run.judgments if j.hold != judgment.hold] + [judgment]


def _run_finished(run: Run, ev: Event) -> None:
    final = RunStatus(ev.status or "failed")
    if run.status is not final:
        run.move(final)
    run.finished_at = ev.at
    run.reason = run.reason or ev.error
    run.paused = None
    run.replica_wait = None


def _replica_wait(run: Run, ev: Event) -> None:
    wait = ReplicaWait.model_validate(ev.wait) if ev.wait is not None else None
    run.replica_wait = wait if ev.status == "waiting" else None
    if ev.status == "unconfirmed" and wait is not None:  # every face shows these writes
        run.meta.setdefault("unreplicated", []).append(f"rollback: {wait.what}")


def _run_paused(run: Run, ev: Event) -> None:
    run.paused = Pause.model_validate(ev.pause) if ev.pause is not None else None


def _run_resumed(run: Run, ev: Event) -> None:
    run.paused = None


_APPLY = {
    EventKind.RUN_STARTED: _run_started,
    EventKind.STEP_STARTED: _step_started,
    EventKind.HOSTS_STARTING: _hosts_starting,
    EventKind.HOST_STARTED: _host_started,
    EventKind.HOST_PID: _host_pid,
    EventKind.HOST_FINISHED: _host_finished,
    EventKind.STEP_FINISHED: _step_finished,
    EventKind.ROLLBACK_STARTED: _rollback_started,
    EventKind.REPLANNED: _replanned,
    EventKind.GATE_JUDGED: _gate_judged,
    EventKind.RUN_PAUSED: _run_paused,
    EventKind.RUN_RESUMED: _run_resumed,
    EventKind.JUDGMENT_AWAITED: _judgment,
    EventKind.JUDGMENT_DECIDED: _judgment,
    EventKind.RUN_FINISHED: _run_finished,
    EventKind.REPLICA_WAIT: _replica_wait,
}
