"""Which worker executes a run: a lease (``run:ID:owner`` with a TTL) that the worker keeps
alive, and writes to the run record that only the lease holder may make."""

from __future__ import annotations

from redis.client import Pipeline

from agents.errors import StoreError
from agents.runs import Run, RunStatus
from agents.store._redis import Write
from agents.store.runs import RunStore


class LostOwnership(StoreError):
    """This worker's lease on a run expired and another worker took it over."""


class _NotClaimed(Exception):
    """Internal: abort a claim transaction without writing."""


class LeaseStore(RunStore):
    def claim(self, run_id: str, *, worker: str, lease: float) -> Run | None:
        """Take a queued run, or one whose worker's lease expired; None if someone has it.

        Both claimants write the run key, so WATCH on it lets exactly one of them win.
        """
        owner_key = self.keys.owner(run_id)

        def change(run: Run) -> list[Write]:
            owner = self.r.get(owner_key)
            if run.status.terminal or (owner is not None and owner.decode() != worker):
                raise _NotClaimed()
            if run.status is RunStatus.QUEUED:
                run.move(RunStatus.RUNNING)
            elif run.status not in (RunStatus.RUNNING, RunStatus.ROLLING_BACK):
                raise _NotClaimed()
            run.meta["previous_worker"] = run.worker if run.worker != worker else None
            run.worker = worker
            return [lambda pipe: pipe.set(owner_key, worker, px=int(lease * 1000))]

        try:
            return self.update_run(run_id, change)
        except _NotClaimed:
            return None

    def save_as_owner(self, run: Run, *, worker: str) -> None:
        """Write the run record, only while ``worker`` still owns it (else LostOwnership).

        A terminal state waits for a replica; if none confirms, the record says so.
        """
        self._write_as_owner(run, worker)
        if run.status.terminal and not self.replicate(f"end of run {run.id}"):
            run.meta.setdefault("unreplicated", []).append(f"end ({run.status.value})")
            self._write_as_owner(run, worker)

    def _write_as_owner(self, run: Run, worker: str) -> None:
        owner_key = self.keys.owner(run.id)

        def attempt(pipe: Pipeline) -> None:
            if pipe.get(owner_key) != worker.encode():
                raise LostOwnership(f"worker {worker} no longer owns run {run.id}")
            pipe.multi()
            pipe.set(self.keys.run(run.id), run.model_dump_json())
            pipe.execute()

        self.cas([owner_key], attempt, busy=f"the lease on run {run.id}")

    def heartbeat(self, run_id: str, *, worker: str, lease: float) -> bool:
        """Extend ``worker``'s lease on a run; False if it lost the run."""
        owner_key = self.keys.owner(run_id)

        def attempt(pipe: Pipeline) -> bool:
            if pipe.get(owner_key) != worker.encode():
                return False
            pipe.multi()
            pipe.pexpire(owner_key, int(lease * 1000))
            pipe.execute()
            return True

        return self.cas([owner_key], attempt, busy=f"the lease on run {run_id}")

    def release(self, run_id: str, *, worker: str) -> None:
        """Give up the lease (and any pending cancel request) if ``worker`` still holds it."""
        owner_key = self.keys.owner(run_id)

        def attempt(pipe: Pipeline) -> None:
            if pipe.get(owner_key) != worker.encode():
                return
            pipe.multi()
            pipe.delete(owner_key, self.keys.cancel(run_id))
            pipe.execute()

        self.cas([owner_key], attempt, busy=f"the lease on run {run_id}")
