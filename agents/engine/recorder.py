"""A worker's record of the run it executes: the executor listener that keeps the run record
in Redis true, and the check that a mutating command's start is durable before it runs.

Step- and run-level events rewrite the whole record, under the executor's lock, so those
writes land in event order. A host event is written as a host change to the run's host
journal after the lock is released: one small HSET whatever the number of hosts, and no
host waits for another's write. Either way the write has landed before the emitting thread
carries on, so a host's start is in Redis before its command runs; ``durable`` then says
whether it would survive a failover (a replica has it).
"""

from __future__ import annotations

from collections.abc import Callable

from agents.errors import StoreError
from agents.plan.model import Plan
from agents.run.executor import Deferred
from agents.run.record import HOST_EVENTS, Event, EventKind, Run
from agents.store import LostOwnership, Store, Write
from tools.runners.base import CancelToken

AUDITED = {EventKind.STEP_FINISHED, EventKind.REPLANNED, EventKind.ROLLBACK_STARTED,
           EventKind.ROLLBACK_FINISHED, EventKind.RUN_FINISHED}
UNRECORDED = {EventKind.STEP_OUTPUT, EventKind.STEP_RETRY}
"""Events that change nothing in the record (output lives in host tails)."""


class RunRecorder:
    """An executor listener for one run on one worker; pass ``durable`` to the executor."""

    def __init__(self, store: Store, *, worker: str, token: CancelToken):
        self.store, self.worker, self.token = store, worker, token
        self._unsaved: str | None = None
        """Why a write failed, until a whole record (which includes it) lands."""
        self._audits: list[Write] = []
        """Audit entries taken (with their time) but not yet written: Redis was away."""

    def __call__(self, event: Event, run: Run) -> Deferred | None:
        if event.kind in UNRECORDED:
            return None
        if event.kind in HOST_EVENTS:
            changes = run.host_changes(event)  # taken under the lock, written after it
            return lambda: self._write(lambda: self.store.leases.record_hosts_as_owner(
                       run.id, changes, worker=self.worker))
        if event.kind in AUDITED:  # taken now, written after the record that it follows
            self._audits.append(self.store.audit.write(
                event.kind.value, actor=self.worker, run_id=run.id, step=event.step_id,
                phase=event.phase.value, status=event.status, error=event.error))
        if event.kind is EventKind.REPLANNED and event.plan is not None:
            self.store.plans.save(Plan.model_validate(event.plan))  # before the run names it
        self._write(lambda: self.store.leases.save_as_owner(run, worker=self.worker))
        self._unsaved = None
        self.flush_audits()
        return None

    def flush_audits(self) -> None:
        """Write the audit entries an outage held back, in order (StoreError: kept)."""
        if self._audits:
            self.store.commit(self._audits)
            self._audits.clear()

    def durable(self, what: str) -> str | None:
        """None once everything recorded so far is in Redis and on a replica (where there
        are replicas); else why not, for the host that then does not start.

        A primary with no replica connected now (a single node, or a replica just promoted
        whose old primary is gone) is not waited for: no failover can lose what it holds.
        A stalled replica still counts as connected, so it stops the command.
        """
        unsaved = self._unsaved
        if unsaved is not None:
            return f"its start could not be recorded in Redis ({unsaved})"
        if not self.store.replicate(what) and self.store.replica_count(fresh=True) > 0:
            return (f"replication to a Redis replica timed out: no replica confirmed within "
                    f"{self.store.replicate_timeout:g}s that its start is recorded, and a "
                    f"failover could lose that record — check the replica (INFO replication), "
                    f"then run it again")
        return None

    def _write(self, write: Callable[[], None]) -> None:
        try:
            write()
        except LostOwnership:
            self.token.cancel("this worker lost the run to another worker")
            raise
        except StoreError as exc:
            self._unsaved = str(exc)
            raise
