"""A worker's record of the run it executes: the executor listener that keeps the run record
in Redis true, and the check that a mutating command's start is durable before it runs.

Step- and run-level events rewrite the whole record, under the executor's lock, so those
writes land in event order. A host event is written as a host change to the run's host
journal after the lock is released: one small HSET whatever the number of hosts, and no
host waits for another's write. Either way the write has landed before the emitting thread
carries on, so a host's start is in Redis before its command runs; ``durable`` then says
whether it would survive a failover (a replica has it): whether a mutating start is
durable. The executor asks it for every batch and every retry, and each command's start
gate asks it once the command's process group is recorded (the command waits for it).

A write that fails (the store is unreachable) goes to the recorder's outbox: the latest
whole record it could not save, the host changes since, and the audit entries, kept in
order. The next write that lands — or ``flush``, which the worker calls before any command
starts and, until it lands, at the end of the run — writes them first. Other parts of the
worker audit through the same outbox (``audit``: a pause that expired while the store was
away), so an outage loses none of their entries either.

Once a write finds that another worker owns the run, the record is that worker's to write:
the kept record and host changes are dropped, but the audit entries kept so far land all
the same (what this worker did while it ran the run). From then on only the end of a step
whose command ran here is audited — not this worker's conclusions about a run that is no
longer its own (a rollback it cannot start, a run_finished the run never had).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from agents.errors import StoreError
from agents.plan.model import Plan
from agents.run.executor import Deferred, NotReplicated, ReplicaWaits
from agents.run.record import HOST_EVENTS, Event, EventKind, HostChange, Run
from agents.store import AuditLog, Leases, LostOwnership, Plans, RunFeed, Write
from tools.runners.base import CancelToken

AUDITED = {EventKind.STEP_FINISHED, EventKind.REPLANNED, EventKind.ROLLBACK_STARTED,
           EventKind.ROLLBACK_FINISHED, EventKind.GATE_JUDGED, EventKind.RUN_PAUSED,
           EventKind.RUN_RESUMED, EventKind.JUDGMENT_AWAITED, EventKind.REPLICA_WAIT,
           EventKind.RUN_FINISHED}
UNRECORDED = {EventKind.STEP_OUTPUT, EventKind.STEP_RETRY}
"""Events that change nothing in the record (output lives in host tails)."""

log = logging.getLogger("deckhand.recorder")


class RunRecorder:
    """An executor listener for one run on one worker; pass ``durable`` to the executor."""

    def __init__(self, *, leases: Leases, audit: AuditLog, plans: Plans, worker: str,
                 token: CancelToken, feed: RunFeed | None = None):
        self.leases, self.audit_log, self.plans = leases, audit, plans
        self.worker, self.token = worker, token
        self.feed = feed
        """Where the run's step- and run-level events go for its thread (None: nowhere)."""
        self._said: list[tuple[str, dict[str, Any]]] = []
        """Outbox: feed entries not yet written; they ride with the next record write."""
        self._unsaved: str | None = None
        """Why a write failed, until the outbox has landed."""
        self._record: Run | None = None
        """Outbox: a copy of the latest whole record that could not be saved."""
        self._hosts: list[tuple[str, list[HostChange]]] = []
        """Outbox: host changes (run id, changes) not written, newer than ``_record``."""
        self._audits: list[Write] = []
        """Outbox: audit entries taken (with their time) but not yet written."""
        self._outbox = threading.Lock()
        self._warned = False
        self._lost = False
        """Another worker owns the run (a write was refused)."""
        self._journal = GroupCommit(lambda run_id, changes: self._write(
            lambda: self.leases.record_hosts_as_owner(run_id, changes, worker=self.worker)))

    def __call__(self, event: Event, run: Run) -> Deferred | None:
        if event.kind in UNRECORDED:
            return None
        if self._lost:
            self._audit_after_loss(event, run)
            return None
        if event.kind in HOST_EVENTS:
            changes = run.host_changes(event)  # taken under the lock, written after it
            return lambda: self._write_hosts(run.id, changes)
        if event.kind in AUDITED:  # taken now, written after the record that it follows
            data: dict[str, Any] = {k: v for k, v in (
                ("gate", event.gate), ("pause", event.pause), ("judgment", event.judgment),
                ("wait", event.wait)) if v is not None}  # the figures it was shown
            with self._outbox:
                self._audits.append(self.audit_log.write(
                    event.kind.value, actor=self.worker, run_id=run.id, step=event.step_id,
                    phase=event.phase.value, status=event.status, error=event.error, **data))
        if event.kind is EventKind.REPLANNED and event.plan is not None:
            self.plans.save(Plan.model_validate(event.plan))  # before the run names it
        with contextlib.suppress(LostOwnership):  # said once by _write; the audits landed
            self._write_record(run, said=feed_entry(event, worker=self.worker))
        return None

    def audit(self, action: str, *, run_id: str, **details: Any) -> None:
        """An audit entry from elsewhere in the worker, taken now and written through the
        outbox: after what was kept before it, and kept in turn while the store is away."""
        with self._outbox:
            self._audits.append(self.audit_log.write(action, actor=self.worker,
                                                       run_id=run_id, **details))
            if self._lost:
                self._land_audits()
                return
            with contextlib.suppress(LostOwnership):
                self._try_flush()

    @property
    def pending(self) -> bool:
        """Whether the outbox holds writes that have not landed."""
        return bool(self._record is not None or self._hosts or self._audits)

    def flush(self) -> None:
        """Write the outbox, in order (StoreError: it is kept; LostOwnership: its audit
        entries landed, the rest is dropped)."""
        with self._outbox:
            self._flush()

    def drain(self, *, give_up: Callable[[], bool] = lambda: False,
              pause: float = 1.0) -> bool:
        """At the end of a run: retry the outbox until it lands (the store is back), another
        worker owns the run, or ``give_up``. Whether it landed, the run still this worker's."""
        warned = False
        while self.pending:
            try:
                self.flush()
            except LostOwnership:
                return False
            except StoreError as exc:
                if not warned:
                    log.warning("the store is unreachable (%s): the run's last writes are "
                                "kept and land once it is back", exc)
                    warned = True
                if give_up():
                    return False
                time.sleep(pause)
        if warned:
            log.warning("the store is back: the run's kept writes have landed")
        return not self._lost

    def durable(self, what: str, waits: ReplicaWaits | None = None) -> str | None:
        """None once everything recorded so far is in Redis and on a replica (where there
        are replicas); else why not, for the host that then does not start.

        A primary with no replica connected now (a single node, or a replica just promoted
        whose old primary is gone) is not waited for: no failover can lose what it holds.
        A stalled replica still counts as connected, so it stops the command — after a
        bounded wait (``replica_wait``): right after a failover the promoted primary's
        replica may take a few seconds to sync, and the start waits for it (``waits`` puts
        the wait in the record) rather than fail at the first WAIT. A timeout is a
        ``NotReplicated`` (a rollback goes ahead on one: see the executor).
        """
        if self.pending:
            with contextlib.suppress(StoreError):  # still away: said below
                self.flush()
        if self._lost:
            return "this worker lost the run to another worker"
        unsaved = self._unsaved
        if unsaved is not None:
            return f"its start could not be recorded in Redis ({unsaved})"
        # every noun shares one connection: this WAIT covers the audit entries and plans too
        if self.leases.replicate(what) or self.leases.replica_count(fresh=True) == 0:
            return None
        return self._wait_for_replica(what, waits)

    def _wait_for_replica(self, what: str, waits: ReplicaWaits | None) -> str | None:
        """The first WAIT timed out with a replica there: WAIT again until one confirms,
        none is left to wait for, the run is stopped or ``replica_wait`` has passed."""
        bound = self.leases.replica_wait
        deadline = time.monotonic() + bound
        outcome = "timed_out"
        if bound > 0 and waits is not None:
            waits.waiting(what, bound)
        try:
            while time.monotonic() < deadline:
                if self._lost or (waits is not None and waits.stopped()):
                    outcome = "stopped"
                    break
                try:
                    if self.leases.replicate(what):
                        outcome = "confirmed"
                        return None
                    if self.leases.replica_count(fresh=True) == 0:
                        outcome = "no_replica"  # none left that a failover could promote
                        return None
                except StoreError:  # mid-failover: the store retries; so do we, bounded
                    time.sleep(0.2)
        finally:
            if bound > 0 and waits is not None:
                waits.waited(outcome)
        if self._lost:
            return "this worker lost the run to another worker"
        if outcome == "stopped":
            return "the run was stopped while its start waited for a Redis replica"
        waited = self.leases.replicate_timeout + bound
        return NotReplicated(
            f"replication to a Redis replica timed out: no replica confirmed within "
            f"{waited:g}s that its start is recorded, and a failover could lose that record "
            f"— check the replica (INFO replication), then run it again")

    def _write_record(self, run: Run, *, said: tuple[str, dict[str, Any]]) -> None:
        """The whole record (which includes every host change so far) with what the run
        says about it (in one MULTI: the feed never runs ahead of the record, nor behind),
        then the audits."""
        with self._outbox:
            self._record, self._hosts = None, []  # this record supersedes them
            self._said.append(said)
            try:
                self._write(lambda: self._save(run))
            except LostOwnership:
                self._land_audits()
                raise
            except StoreError:
                self._record = run.model_copy(deep=True)  # under the executor's lock
                self._kept()
                return
            self._try_flush()

    def _save(self, run: Run) -> None:
        """The record, the feed entries and the audit entries kept so far, in one MULTI
        (each cleared once it landed): no status is readable before its audit entry, and a
        worker killed between two writes cannot leave the one without the other."""
        also = [] if self.feed is None else self.feed.writes(
            run.id, self._said, pending=bool(run.meta.get("slack"))
            or run.requested_by.startswith("schedule:"))  # a schedule posts its thread soon
        audits = list(self._audits)
        self.leases.save_as_owner(run, worker=self.worker, also=[*also, *audits])
        self._said = []
        del self._audits[:len(audits)]

    def _write_hosts(self, run_id: str, changes: list[HostChange]) -> None:
        if self._lost:
            return
        if not self.pending:  # the common case: no outbox lock, hosts share a write
            try:
                self._journal.write(run_id, changes)
                return
            except LostOwnership:
                return  # said once by _write; the next record event lands the audits
            except StoreError:
                pass
        with self._outbox, contextlib.suppress(LostOwnership):
            self._hosts.append((run_id, changes))
            self._try_flush()

    def _try_flush(self) -> None:
        try:
            self._flush()
        except LostOwnership:
            raise
        except StoreError:
            self._kept()

    def _kept(self) -> None:
        """A write failed and is kept in the outbox: say so once per outage."""
        if not self._warned:
            self._warned = True
            log.warning("run record write failed (%s): kept, in order, until the store is "
                        "back", self._unsaved)

    def _flush(self) -> None:
        """The outbox, oldest first; each part is dropped once it has landed."""
        try:
            self._flush_owned()
        except LostOwnership:
            self._land_audits()
            raise
        if self._audits:
            self._write(lambda: self.audit_log.commit(self._audits))
            self._audits.clear()
        self._unsaved, self._warned = None, False

    def _flush_owned(self) -> None:
        """The parts only the run's owner may write: the record, then host changes."""
        if self._record is not None:
            record = self._record
            self._write(lambda: self._save(record))
            self._record = None
        while self._hosts:
            run_id, changes = self._hosts[0]
            self._write(partial(self.leases.record_hosts_as_owner, run_id, changes,
                                worker=self.worker))
            self._hosts.pop(0)

    def _land_audits(self) -> None:
        """The run is another worker's: its record is not ours to write, but the audit
        entries kept so far are what this worker did — they land (or stay kept, for
        ``drain``, while the store is away)."""
        self._record, self._hosts, self._said = None, [], []
        if self._audits:
            with contextlib.suppress(StoreError):
                self.audit_log.commit(self._audits)
                self._audits.clear()

    def _audit_after_loss(self, event: Event, run: Run) -> None:
        """After the loss, only the end of a step whose command ran here is a fact worth
        the audit; the rest is this worker's view of a run that is no longer its own."""
        if event.kind is not EventKind.STEP_FINISHED or event.step_id is None:
            return
        state = run.states(event.phase).get(event.step_id)
        if state is None or not any(h.attempts for h in state.hosts.values()):
            return
        with self._outbox:
            self._audits.append(self.audit_log.write(
                event.kind.value, actor=self.worker, run_id=run.id, step=event.step_id,
                phase=event.phase.value, status=event.status, error=event.error,
                after_lease_lost=True))
            self._land_audits()

    def _write(self, write: Callable[[], None]) -> None:
        try:
            write()
        except LostOwnership:
            if not self._lost:
                self._lost = True
                log.warning("another worker owns the run now: this worker writes no more of "
                            "its record, and nothing more starts here")
            self.token.cancel("this worker lost the run to another worker")
            raise
        except StoreError as exc:
            self._unsaved = str(exc)
            raise


def feed_entry(event: Event, *, worker: str) -> tuple[str, dict[str, Any]]:
    """The feed's copy of a step- or run-level event, keyed so a resent append is said once."""
    data = event.model_dump(mode="json", exclude_defaults=True,
                            exclude={"outputs", "line", "tail"})
    data["at"] = event.at
    data["key"] = f"{worker}/{event.kind.value}/{event.phase.value}/{event.step_id}/{event.at!r}"
    return "event", data


class GroupCommit:
    """Host changes written by many threads at once share one transaction: a caller that
    finds a write under way waits, then writes every change queued meanwhile in one go. Each
    caller still returns only once its own change has landed (or raises what that write
    raised), so a start gate waiting on it means the same; at 100 hosts in one batch it is
    a few dozen round trips instead of ~300 (one per host event)."""

    def __init__(self, write: Callable[[str, list[HostChange]], None]):
        self._write = write
        self._queue: list[tuple[str, list[HostChange], _Ticket]] = []
        self._queued = threading.Lock()
        self._writing = threading.Lock()

    def write(self, run_id: str, changes: list[HostChange]) -> None:
        ticket = _Ticket()
        with self._queued:
            self._queue.append((run_id, changes, ticket))
        with self._writing:
            if not ticket.settled:  # nobody carried it while this caller waited: carry all
                with self._queued:
                    batch, self._queue = self._queue, []
                self._carry(batch)
        ticket.result()

    def _carry(self, batch: list[tuple[str, list[HostChange], _Ticket]]) -> None:
        by_run: dict[str, list[HostChange]] = {}
        for run_id, changes, _ in batch:  # queue order: a host's later change wins its field
            by_run.setdefault(run_id, []).extend(changes)
        error: BaseException | None = None
        try:
            for run_id, changes in by_run.items():
                self._write(run_id, changes)
        except BaseException as exc:  # every caller whose change rode along hears it
            error = exc
        for _, _, ticket in batch:
            ticket.settle(error)


class _Ticket:
    """One caller's change in a group write: settled once the write that carried it ended."""

    def __init__(self) -> None:
        self.settled = False
        self._error: BaseException | None = None

    def settle(self, error: BaseException | None) -> None:
        self._error, self.settled = error, True

    def result(self) -> None:
        if self._error is not None:
            raise self._error

