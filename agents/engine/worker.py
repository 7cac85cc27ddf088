"""Executor workers fed by the Redis Streams queue.

A worker reads run ids with XREADGROUP, takes the environments' locks, claims the run
(one compare-and-set), and executes it while a heartbeat thread extends its lease, keeps
its stream entry fresh, and watches for a cancel request. Entries left pending by a dead
worker are taken over with XAUTOCLAIM once idle for ``claim_after`` seconds; the run then
resumes (finished steps are not repeated; see ``agents.run.executor``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from agents import logcontext
from agents.engine.fence import LeaseFence
from agents.engine.leftovers import RetryKills
from agents.engine.pause import PauseSwitch
from agents.engine.recorder import RunRecorder
from agents.engine.retention import (
    SLICE,
    Retention,
    RetentionReport,
    due,
    keep_run,
    kept_runs,
    run_exclusively,
)
from agents.errors import (
    IllegalTransition,
    LockHeld,
    NotFound,
    RetentionError,
    ServiceUnknown,
    StoreError,
)
from agents.readiness import Liveness
from agents.run.executor import Listener
from agents.run.record import Phase, Run, RunStatus
from agents.services import Services
from agents.store import Store
from agents.store.check import ACTIVE, StoreCheck
from agents.store.checkpoints import CHECKPOINT, signing_key
from tools.errors import DeckhandError
from tools.inventory import LOCAL_HOST, Host
from tools.runners.base import CancelToken

log = logging.getLogger("deckhand.worker")

SWEEP_EVERY = 30.0
CHECKPOINT_JOB = "audit-checkpoint"
CHECKPOINT_LEASE = 30.0
"""Seconds between sweeps for unapproved plans to expire, when the queue is idle."""

ListenerFactory = Callable[[Run], Listener | None]
"""Gives a front end's listener for a run (e.g. its Slack thread), or None."""

def default_worker_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass
class WorkerOptions:
    lease: float = 30.0
    """Seconds a worker's claim on a run lasts without a heartbeat."""
    claim_after: float = 60.0
    """Seconds a queue entry must sit unacknowledged before another worker takes it."""
    block: float = 2.0
    """Seconds to block waiting for new work."""
    stuck_after: float | None = None
    """Seconds without progress before the worker reports itself stuck (None: max(60, 3 ×
    lease)): neither its loop (every ``block`` s when idle) nor its run's heartbeat (every
    second) moved; Redis's retries (15 s) fit well inside the default."""


class Worker:
    """Executes queued runs. Start as many as you like against one Redis."""

    def __init__(self, services: Services, store: Store, *, name: str | None = None,
                 options: WorkerOptions | None = None,
                 listener_factories: Iterable[ListenerFactory] = ()):
        self.services = services
        self.listener_factories = list(listener_factories)
        self._swept = float("-inf")
        self._killing: threading.Thread | None = None
        # The whole Store: a run's life here spans seven nouns (queue entry, lease, environment
        # locks, plan, run record, audit, go/no-go judgments); each heartbeat renews lease,
        # locks and queue entry together, and the sweeps hand it to StoreCheck and Retention,
        # which read across all of them. Its helpers (PauseSwitch, RunRecorder) get parts.
        self.store = store
        self.name = name or default_worker_name()
        self.options = options or WorkerOptions()
        self.liveness = Liveness(stale_after=self.options.stuck_after
                                 or max(60.0, 3 * self.options.lease))
        self._active: set[str] = set()
        """Runs this worker is executing: never claimed again here as if from a stranger."""
        self.host_locks: dict[str, list[str]] = {}
        """The host locks each run locked here holds: renewed and released, no others."""
        store.queue.ensure_group()

    def serve(self, stop: threading.Event) -> None:
        """Process runs until ``stop`` is set."""
        log.info("worker %s ready", self.name)
        while not stop.is_set():
            self.liveness.beat("waiting for work")
            try:
                self.step()
            except StoreError as exc:  # Redis down: say so, wait, try again
                log.error("worker %s: %s", self.name, exc)
                stop.wait(self.options.block)
            except Exception:  # a bug: keep serving; the entry stays pending, to be retried
                log.exception("worker %s: handling a queue entry failed", self.name)
                stop.wait(self.options.block)

    def step(self, *, block: float | None = None) -> bool:
        """Handle at most one queue entry (reclaimed ones first). False if there was none."""
        entry = self._reclaim() or self._read(self.options.block if block is None else block)
        if entry is None:
            if time.monotonic() - self._swept >= SWEEP_EVERY:
                self._swept = time.monotonic()
                self.expire_stale()
                self.reconcile()
                self.checkpoint()
                self.retain()
                self.retry_kills()
            return False
        entry_id, run_id = entry
        _, done = self._process(run_id, entry_id, [])
        if done:  # acknowledged only once handled: a crash leaves it pending for takeover
            self.store.queue.ack(entry_id)
        return True

    def process(self, run_id: str, *, entry_id: str | None = None,
                listeners: Iterable[Listener] = ()) -> Run | None:
        """Lock, claim and execute one run. None if it cannot or need not run now.

        Called without ``entry_id`` (in-process, e.g. ``deckhand run``), it settles the
        run's queue entry once done with it, so no worker counts it as waiting.
        """
        run, done = self._process(run_id, entry_id, list(listeners))
        if done and entry_id is None:
            self.store.queue.settle(run_id)
        return run

    def _process(self, run_id: str, entry_id: str | None,
                 listeners: list[Listener]) -> tuple[Run | None, bool]:
        """The run (if executed here) and whether its queue entry is done with."""
        try:
            run = self.store.runs.get(run_id)
        except NotFound:
            log.warning("queue names unknown run %s; dropping it", run_id)
            return None, True
        if run.status.terminal or self._locked_out(run):
            return None, True
        if run.status is RunStatus.AWAITING_APPROVAL:
            # a revision waits for approval (its worker went right after the replan): it
            # stays held, with nothing to lock or run until an approval queues it again
            return None, True
        service = self._service_of(run)
        if service is None or self._frozen_out(run, service):
            return None, True
        with logcontext.bound(run_id=run.id, plan_id=run.plan_id):  # on every log line
            if run_id in self._active:  # ours, still executing: its own entry came back
                return None, False
            if not self._lock(run, service):
                return None, True  # refused, or queued behind the lock (re-enqueued later)
            fence = LeaseFence(self.options.lease)  # counted from before the claim is sent
            claimed = self.store.leases.claim(run_id, worker=self.name, lease=self.options.lease)
            if claimed is None:
                # Another worker's lease is still alive: keep the entry pending, so it is
                # taken over if that worker is in fact dead (its lease will have expired).
                return None, not self._still_running(run_id)
            self._active.add(run_id)
            try:
                return self._execute(claimed, entry_id, listeners, fence, service), True
            finally:
                self._active.discard(run_id)

    def _service_of(self, run: Run) -> Services | None:
        """The services focused on ``run``'s service; None (the run failed, closed) if this
        process does not serve it: never run under another service's config."""
        try:
            return self.services.for_run(run)
        except ServiceUnknown as exc:
            reason = f"not run here: {exc}"
        log.error("run %s: %s", run.id, reason)
        try:
            self.store.runs.transition(run.id, RunStatus.FAILED, expect={run.status},
                                       reason=reason)
        except IllegalTransition:
            return None  # moved meanwhile (approved again, cancelled): that stands
        self.store.audit.record("refused", actor=self.name, run_id=run.id, reason=reason)
        return None

    def _frozen_out(self, run: Run, service: Services) -> bool:
        """A queued run whose environment froze after its approval does not start."""
        blocked = service.frozen(run.scopes)
        if run.status is not RunStatus.QUEUED or blocked is None or run.break_glass:
            return False
        try:
            self.store.runs.transition(run.id, RunStatus.CANCELLED, expect=[RunStatus.QUEUED],
                                       reason=f"not started: {blocked.describe()}")
        except IllegalTransition:
            return False  # taken meanwhile: the claim decides
        self.store.audit.record("frozen", actor=self.name, run_id=run.id, plan_id=run.plan_id,
                                environment=blocked.environment, until=blocked.until.isoformat())
        return True

    def _locked_out(self, run: Run) -> bool:
        """A queued run whose environment a person locked (``deckhand lock``) does not start:
        it may have waited behind another run's lock while the migration began."""
        held = self.store.manual_locks.blocking(run.environments, service=run.service)
        if run.status is not RunStatus.QUEUED or held is None:
            return False
        try:
            self.store.runs.transition(run.id, RunStatus.CANCELLED, expect=[RunStatus.QUEUED],
                                       reason=f"not started: {held.refusal()}")
        except IllegalTransition:
            return False  # taken meanwhile: the claim decides
        self.store.audit.record("locked_out", actor=self.name, run_id=run.id,
                                plan_id=run.plan_id, environment=held.environment,
                                holder=held.holder)
        return True

    def _still_running(self, run_id: str) -> bool:
        status = self.store.runs.get(run_id).status
        return status in (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.ROLLING_BACK)

    def expire_stale(self) -> list[str]:
        """Expire plans nobody approved within their environments' approval window.

        Cheap enough to call whenever the queue is idle; each expiry is one compare-and-set,
        so several workers sweeping at once expire each run once.
        """
        now, expired = self.store.clock(), []
        for run in self.store.runs.recent(limit=200, statuses=[RunStatus.AWAITING_APPROVAL]):
            try:
                policy = self.services.for_run(run).config.policy
            except ServiceUnknown:
                continue  # not this process's to judge: a worker serving it expires it
            window = policy.strictest(run.environments).approval_ttl
            if now - self.store.plans.get(run.plan_id, run.plan_version).created_at <= window:
                continue
            try:
                self.store.runs.transition(run.id, RunStatus.EXPIRED,
                                           expect={RunStatus.AWAITING_APPROVAL},
                                           reason=f"not approved within {window:g}s; plan again")
            except IllegalTransition:
                continue  # approved (or expired by another worker) meanwhile
            self.store.audit.record("expired", actor=self.name, run_id=run.id, plan_id=run.plan_id)
            expired.append(run.id)
        return expired

    def reconcile(self) -> list[str]:
        """Re-queue active runs that nothing will ever move: no live lease, no queue entry
        (a worker died after acknowledging, an entry was lost with a failed-over primary).
        A worker then resumes or rolls them back like any takeover."""
        recent = self.store.runs.recent(limit=200, statuses=ACTIVE)
        done = []
        for violation in StoreCheck(self.store).orphaned(recent):
            run_id = violation.key.rsplit(":", 1)[-1]
            outcome = violation.repair() if violation.repair else "not repairable"
            log.warning("reconciler: run %s %s: %s", run_id, violation.problem, outcome)
            self.store.audit.record("reconciled", actor=self.name, run_id=run_id,
                                    problem=violation.problem, outcome=outcome)
            done.append(run_id)
        return done

    def retry_kills(self) -> None:
        """Kill again what ended runs' unconfirmed kills may have left running
        (``agents.engine.leftovers``), on a thread of its own: a host that still does not
        answer takes its connect timeout, which must not keep queued runs waiting."""
        if self._killing is not None and self._killing.is_alive():
            return
        retry = RetryKills(runs=self.store.runs, audit=self.store.audit,
                           feed=self.store.run_feed, runner_for=self.services.runners.for_host,
                           hosts=self._every_host, actor=self.name)

        def sweep() -> None:
            try:
                retry.sweep()
            except StoreError as exc:
                log.error("worker %s: retrying unconfirmed kills: %s", self.name, exc)

        self._killing = threading.Thread(target=sweep, daemon=True, name="retry-kills")
        self._killing.start()

    def _every_host(self) -> dict[str, Host]:
        """Every service's hosts (names are one machine across services): a leftover
        kill may be of any service's run."""
        return {name: host for config in self.services.org.services.values()
                for name, host in config.inventory.hosts.items()}

    def checkpoint(self) -> bool:
        """With a key (``DECKHAND_AUDIT_KEY_FILE``): sign the audit chain's head every
        ``audit.checkpoint_every`` seconds, one process at a time across replicas; a chain
        whose newest entry is a checkpoint already needs none. True if one was written."""
        key = signing_key(self.services.settings.audit_key)
        if key is None:
            return False
        locks, every = self.store.locks, self.services.common.audit.checkpoint_every
        done = locks.job_done_at(CHECKPOINT_JOB)
        if done is not None and locks.clock() - done < every:
            return False
        if not locks.take_job(CHECKPOINT_JOB, owner=self.name, ttl=CHECKPOINT_LEASE):
            return False
        try:
            written = self.store.audit.newest_action() not in (None, CHECKPOINT)
            if written:
                self.store.audit.checkpoint(key, actor=self.name)
            locks.mark_job_done(CHECKPOINT_JOB, locks.clock())
        finally:
            locks.release_job(CHECKPOINT_JOB, owner=self.name)
        return written

    def retain(self) -> RetentionReport | None:
        """A slice (``SLICE`` seconds) of the retention pass when one is due: never long
        enough to keep queued runs waiting, and one process at a time across replicas."""
        configs = list(self.services.org.services.values())
        settings = configs[0].retention  # organisation-wide: every service has the same
        if settings is None or not due(self.store.locks, settings):
            return None
        kept = [config.history.retention_days for config in configs]
        # one trim for every service's deploys: the longest any service keeps (None: all)
        history_days = None if None in kept else max(d for d in kept if d is not None)
        try:
            retention = Retention.configured(self.store, settings, history_days=history_days,
                                             sink=self.services.common.audit.sink is not None)
            report = run_exclusively(retention, locks=self.store.locks, audit=self.store.audit,
                                     owner=self.name, budget=SLICE)
        except RetentionError as exc:
            log.error("retention: %s", exc)
            return None
        if report is not None and report.trimmed:
            log.info("retention: exported and trimmed %d run(s), %d audit entries, %d "
                     "deploy(s) to %s%s", sum(report.runs.values()), report.audit,
                     report.deploys, report.export, "" if report.complete else " (continuing)")
        return report

    # -- queue -----------------------------------------------------------------------------

    def _read(self, block: float) -> tuple[str, str] | None:
        return self.store.queue.read(self.name, block=block)

    def _reclaim(self) -> tuple[str, str] | None:
        entry = self.store.queue.reclaim(self.name, idle=self.options.claim_after)
        if entry:
            log.warning("worker %s took over queue entry %s", self.name, entry[0])
        return entry

    # -- locks -----------------------------------------------------------------------------

    def _lock(self, run: Run, service: Services) -> bool:
        config = service.config
        rule = config.policy.strictest([*run.environments, *run.shared])
        hosts = run.host_locks(config.inventory, every=rule.lock_hosts)
        while True:  # each pass takes the locks, waits in line, or saw one freed meanwhile
            try:
                self.store.locks.acquire(run.service, run.environments, hosts=hosts,
                                         run_id=run.id, worker=self.name,
                                         ttl=self.options.lease)
                self.host_locks[run.id] = hosts
                return True
            except LockHeld as exc:
                if rule.lock == "wait" and not self.store.locks.wait_in_line(
                        run.service, run.environments, hosts=hosts, run_id=run.id):
                    continue
                held = exc
                break
        if rule.lock == "wait":
            self.store.audit.record("waiting_for_lock", actor=self.name, run_id=run.id,
                                    reason=str(held))
            return False
        reason = f"{held}; policy does not queue behind it — try again when it finishes"
        self.store.runs.transition(run.id, RunStatus.FAILED, expect={RunStatus.QUEUED},
                                   reason=reason)
        self.store.audit.record("refused", actor=self.name, run_id=run.id, reason=reason)
        return False

    def _unlock(self, run: Run) -> None:
        freed = self.store.locks.release(run.service, run.environments,
                                         hosts=self.host_locks.pop(run.id, []), run_id=run.id)
        for env in run.environments:
            self.store.queue.wake_next(run.service, env)  # pops and queues in one EXEC
        for host in freed:
            self.store.queue.wake_next_host(host)

    # -- execution -------------------------------------------------------------------------

    def _execute(self, run: Run, entry_id: str | None, listeners: list[Listener],
                 fence: LeaseFence, service: Services) -> Run:
        plan = self.store.plans.get(run.plan_id, run.plan_version)
        previous = run.meta.get("previous_worker")
        action = "resumed" if previous else "started"
        self.store.audit.record(action, actor=self.name, run_id=run.id, plan_id=run.plan_id,
                                previous_worker=previous)
        log.info("run %s %s on worker %s (plan v%d)", run.id, action, self.name,
                 run.plan_version)
        token = CancelToken()
        extra = [f(run) for f in self.listener_factories]
        front_ends = [x for x in extra if x is not None]
        recorder = RunRecorder(leases=self.store.leases, audit=self.store.audit,
                               plans=self.store.plans, worker=self.name, token=token,
                               feed=self.store.run_feed)
        pause = PauseSwitch(run.id, runs=self.store.runs, audit=recorder.audit, token=token,
                            timeout=service.config.policy.pause_timeout)
        with contextlib.suppress(StoreError):  # a taken-over run stays held (or stopped)
            pause.relay(*self.store.runs.controls(run.id))  # from its start
        beat = _Heartbeat(self, run, entry_id, token, fence, pause, audit=recorder.audit)
        beat.start()  # before stopping leftovers: that can take a grace period per host
        try:
            if previous:
                self._stop_leftovers(run, service)
            final = service.executor.execute(
                plan, run, cancel=token, listeners=[recorder, *front_ends, *listeners],
                durable=recorder.durable, may_start=lambda what: _fenced(fence, recorder, what),
                hold=pause, judge=self.store.judgments.for_run(run))
            log.info("run %s ended %s", run.id, final.status.value)
            landed = recorder.drain(give_up=lambda: fence.lost is not None)  # an outage's writes
            if not landed or fence.lost is not None:
                # another worker has the run: its end, and its history, are that worker's
                log.warning("run %s: this worker lost it to another worker; its own view of "
                            "the end (%s) is not recorded", run.id, final.status.value)
            elif final.status.terminal:
                try:
                    service.record_history(final)
                except ServiceUnknown as exc:  # a reload dropped its service meanwhile
                    log.error("run %s: its deploys are not recorded in history: %s",
                              run.id, exc)
            return final
        finally:
            beat.stop()
            self._unlock(run)
            self.store.leases.release(run.id, worker=self.name)
            for front_end in front_ends:
                close = getattr(front_end, "close", None)
                if close is not None:
                    close()
            self.keep(run.id, service)

    def keep(self, run_id: str, service: Services | None = None) -> None:
        """On the in-process store (no REDIS_URL), which ends with this process, append the
        run's record to its service's state directory's ``runs.jsonl``
        (``retention.keep_run``)."""
        if not self.store.embedded:
            return
        try:
            state_dir = (service or self.services).config.state_dir
        except ServiceUnknown:  # a reload dropped its service meanwhile: nowhere to keep it
            return
        if state_dir is None:
            return
        path = kept_runs(state_dir)
        try:
            keep_run(self.store, run_id, path)
        except (OSError, StoreError) as exc:
            log.error("run %s: could not keep its record in %s (%s); it ends with this "
                      "process", run_id, path, exc)

    def _stop_leftovers(self, run: Run, service: Services) -> None:
        """Taking a run over: stop what the dead worker's commands left running, on every
        host, before anything is re-run or rolled back — so nothing lands after it."""
        for phase in Phase:
            for state in run.states(phase).values():
                for result in state.hosts.values():
                    if result.pid is not None:
                        self._stop_leftover(run, state.id, result.host, result.pid,
                                            service)

    def _stop_leftover(self, run: Run, step_id: str, host_name: str, pid: int,
                       service: Services) -> None:
        host = service.config.inventory.hosts.get(host_name) or LOCAL_HOST
        try:
            service.runners.for_host(host).kill_group(pid)
            outcome = "stopped"
        except DeckhandError as exc:  # unreachable: the rollback will say so on that host
            outcome = f"could not stop it: {exc}"
        log.warning("run %s: leftover of step %s on %s (process group %d): %s", run.id,
                    step_id, host_name, pid, outcome)
        self.store.audit.record("leftover_stopped", actor=self.name, run_id=run.id,
                                plan_id=run.plan_id, step=step_id, host=host_name, pid=pid,
                                outcome=outcome)


def _fenced(fence: LeaseFence, recorder: RunRecorder, what: str) -> str | None:
    """Before a command starts: the lease is vouched for, and what an outage held has
    landed first (a record that cannot be written holds the command back, as a lapsed
    lease does: the store is not reachable enough to start anything)."""
    while True:
        refused = fence.may_start(what)
        if refused is not None or not recorder.pending:
            return refused
        try:
            recorder.flush()
        except StoreError:
            time.sleep(0.2)  # let the heartbeat find out whether the lease still holds
        if not recorder.pending:
            return None


class _Heartbeat:
    """Keeps a worker's claim alive and relays cancel and pause requests while a run
    executes."""

    def __init__(self, worker: Worker, run: Run, entry_id: str | None, token: CancelToken,
                 fence: LeaseFence, pause: PauseSwitch, *, audit: Callable[..., None]):
        self.worker, self.run, self.entry_id, self.token = worker, run, entry_id, token
        self.fence, self.pause = fence, pause
        self.audit = audit
        """The run's outbox (RunRecorder.audit): in order after what an outage kept, and
        kept in turn if the store drops again before it lands."""
        self._failed = False
        """A heartbeat failed since the last renewal (the store was away)."""
        self._stop = threading.Event()
        self._inherit = logcontext.inherit()
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name=f"heartbeat-{run.id}")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        self._inherit()
        interval = min(self.worker.options.lease / 3, 1.0)
        while not self._stop.wait(interval):
            try:
                self._beat()
            except StoreError as exc:
                self._failed = True
                log.error("heartbeat for %s failed: %s", self.run.id, exc)

    def _beat(self) -> None:
        store, name, lease = self.worker.store, self.worker.name, self.worker.options.lease
        sent = time.monotonic()
        if not store.leases.heartbeat(self.run.id, worker=name, lease=lease):
            self._lost()
            return
        self.worker.liveness.beat(f"running {self.run.id} (lease renewed)")
        outage = self.fence.renewed(sent, unreachable=self._failed)
        # a renewal the store held past a beat (its client retried through an outage)
        # ends the next gap as well: that gap is the store's doing, not a stalled worker's
        self._failed = time.monotonic() - sent > lease / 3
        if outage is not None:  # the true reason, for the record's readers
            log.warning("run %s: %s; lease renewed, the run carries on", self.run.id,
                        outage.describe())
            self.audit(outage.action, run_id=self.run.id, seconds=round(outage.seconds, 1),
                       lease_lapsed=outage.lapsed, waiting=outage.waiting)
        store.locks.refresh(self.run.service, self.run.environments, run_id=self.run.id,
                            hosts=self.worker.host_locks.get(self.run.id, []), ttl=lease)
        if self.entry_id:  # reset the entry's idle time so nobody reclaims a live run
            store.queue.touch(name, self.entry_id)
        # what runs now is killed within a beat; what would start next reads the store
        # itself (PauseSwitch.look). The stop's audit entry landed with the request.
        self.pause.relay(*store.runs.controls(self.run.id))

    def _lost(self) -> None:
        """Another worker has the run: nothing more starts here, and the audit says why."""
        waiting = self.fence.holding
        silent = self.fence.silent_for
        cause = ("store unreachable" if self._failed else
                 "this worker stalled: no heartbeat ran" if silent >= self.fence.lease else
                 "taken although its heartbeats were on time")
        reason = (f"this worker lost the run to another worker (its lease was last renewed "
                  f"{silent:.0f} s ago; {cause}"
                  + (f"; lease lost before {waiting})" if waiting else ")"))
        self.fence.lose(reason)
        self.token.cancel(reason)
        self.audit("lease_lost", run_id=self.run.id, reason=reason)
