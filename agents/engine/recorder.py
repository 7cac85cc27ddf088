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
starts and, until it lands, at the end of the run — writes them first.
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
from agents.run.executor import Deferred
from agents.run.record import HOST_EVENTS, Event, EventKind, HostChange, Run
from agents.store import AuditLog, Leases, LostOwnership, Plans, Write
from tools.runners.base import CancelToken

AUDITED = {EventKind.STEP_FINISHED, EventKind.REPLANNED, EventKind.ROLLBACK_STARTED,
           EventKind.ROLLBACK_FINISHED, EventKind.GATE_JUDGED, EventKind.RUN_PAUSED,
           EventKind.RUN_RESUMED, EventKind.JUDGMENT_AWAITED, EventKind.RUN_FINISHED}
UNRECORDED = {EventKind.STEP_OUTPUT, EventKind.STEP_RETRY}
"""Events that change nothing in the record (output lives in host tails)."""

log = logging.getLogger("deckhand.recorder")


class RunRecorder:
    """An executor listener for one run on one worker; pass ``durable`` to the executor."""

    def __init__(self, *, leases: Leases, audit: AuditLog, plans: Plans, worker: str,
                 token: CancelToken):
        self.leases, self.audit, self.plans = leases, audit, plans
        self.worker, self.token = worker, token
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

    def __call__(self, event: Event, run: Run) -> Deferred | None:
        if event.kind in UNRECORDED:
            return None
        if event.kind in HOST_EVENTS:
            changes = run.host_changes(event)  # taken under the lock, written after it
            return lambda: self._write_hosts(run.id, changes)
        if event.kind in AUDITED:  # taken now, written after the record that it follows
            data: dict[str, Any] = {k: v for k, v in (("gate", event.gate),
                                                      ("pause", event.pause)) if v is not None}
            with self._outbox:
                self._audits.append(self.audit.write(
                    event.kind.value, actor=self.worker, run_id=run.id, step=event.step_id,
                    phase=event.phase.value, status=event.status, error=event.error, **data))
        if event.kind is EventKind.REPLANNED and event.plan is not None:
            self.plans.save(Plan.model_validate(event.plan))  # before the run names it
        self._write_record(run)
        return None

    @property
    def pending(self) -> bool:
        """Whether the outbox holds writes that have not landed."""
        return bool(self._record is not None or self._hosts or self._audits)

    def flush(self) -> None:
        """Write the outbox, in order (StoreError: it is kept; LostOwnership: see _write)."""
        with self._outbox:
            self._flush()

    def drain(self, *, give_up: Callable[[], bool] = lambda: False,
              pause: float = 1.0) -> bool:
        """At the end of a run: retry the outbox until it lands (the store is back), another
        worker owns the run, or ``give_up``. Whether it landed."""
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
        return True

    def durable(self, what: str) -> str | None:
        """None once everything recorded so far is in Redis and on a replica (where there
        are replicas); else why not, for the host that then does not start.

        A primary with no replica connected now (a single node, or a replica just promoted
        whose old primary is gone) is not waited for: no failover can lose what it holds.
        A stalled replica still counts as connected, so it stops the command.
        """
        if self.pending:
            with contextlib.suppress(StoreError):  # still away: said below
                self.flush()
        unsaved = self._unsaved
        if unsaved is not None:
            return f"its start could not be recorded in Redis ({unsaved})"
        # every noun shares one connection: this WAIT covers the audit entries and plans too
        if not self.leases.replicate(what) and self.leases.replica_count(fresh=True) > 0:
            return (f"replication to a Redis replica timed out: no replica confirmed within "
                    f"{self.leases.replicate_timeout:g}s that its start is recorded, and a "
                    f"failover could lose that record — check the replica (INFO replication), "
                    f"then run it again")
        return None

    def _write_record(self, run: Run) -> None:
        """The whole record (which includes every host change so far), then the audits."""
        with self._outbox:
            self._record, self._hosts = None, []  # this record supersedes them
            try:
                self._write(lambda: self.leases.save_as_owner(run, worker=self.worker))
            except LostOwnership:
                raise
            except StoreError:
                self._record = run.model_copy(deep=True)  # under the executor's lock
                self._kept()
                return
            self._try_flush()

    def _write_hosts(self, run_id: str, changes: list[HostChange]) -> None:
        if not self.pending:  # the common case: no lock, so no host waits for another
            try:
                self._write(lambda: self.leases.record_hosts_as_owner(
                           run_id, changes, worker=self.worker))
                return
            except LostOwnership:
                raise
            except StoreError:
                pass
        with self._outbox:
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
        if self._record is not None:
            record = self._record
            self._write(lambda: self.leases.save_as_owner(record, worker=self.worker))
            self._record = None
        while self._hosts:
            run_id, changes = self._hosts[0]
            self._write(partial(self.leases.record_hosts_as_owner, run_id, changes,
                                worker=self.worker))
            self._hosts.pop(0)
        if self._audits:
            self._write(lambda: self.audit.commit(self._audits))
            self._audits.clear()
        self._unsaved, self._warned = None, False

    def _write(self, write: Callable[[], None]) -> None:
        try:
            write()
        except LostOwnership:
            self.token.cancel("this worker lost the run to another worker")
            raise
        except StoreError as exc:
            self._unsaved = str(exc)
            raise
