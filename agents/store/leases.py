"""Which worker executes a run: a lease (``run:ID:owner`` with a TTL) that the worker keeps
alive, and writes to the run record that only the lease holder may make."""

from __future__ import annotations

import logging

from redis.client import Pipeline

from agents.errors import NotFound, StoreError
from agents.runs import Run, RunStatus
from agents.store.runs import RunStore

log = logging.getLogger("deckhand.store")


class LostOwnership(StoreError):
    """This worker's lease on a run expired and another worker took it over."""


class LeaseStore(RunStore):
    def claim(self, run_id: str, *, worker: str, lease: float) -> Run | None:
        """Take a queued run, or one whose worker's lease expired; None if someone has it.

        The run record and its lease are watched together, so of two claimants — or a
        claimant and a worker re-taking its own expired lease — exactly one wins.
        """
        run_key, owner_key = self.keys.run(run_id), self.keys.owner(run_id)

        def attempt(pipe: Pipeline) -> Run | None:
            raw = pipe.get(run_key)
            if raw is None:
                raise NotFound(f"no run {run_id}")
            run, owner = Run.model_validate_json(raw), pipe.get(owner_key)
            if run.status.terminal or (owner is not None and owner != worker.encode()):
                return None
            if run.status is RunStatus.QUEUED:
                run.move(RunStatus.RUNNING)
            elif run.status not in (RunStatus.RUNNING, RunStatus.ROLLING_BACK):
                return None
            run.meta["previous_worker"] = run.worker if run.worker != worker else None
            run.worker = worker
            pipe.multi()
            pipe.set(run_key, run.model_dump_json())
            pipe.set(owner_key, worker, px=int(lease * 1000))
            pipe.execute()
            return run

        return self.cas([run_key, owner_key], attempt, busy=f"run {run_id}")

    def save_as_owner(self, run: Run, *, worker: str) -> None:
        """Write the run record, only while ``worker`` still owns it (else LostOwnership).

        A terminal state waits for a replica; if none confirms, the record says so.
        """
        self._write_as_owner(run, worker)
        if run.status.terminal and not self.replicate(f"end of run {run.id}"):
            run.meta.setdefault("unreplicated", []).append(f"end ({run.status.value})")
            self._write_as_owner(run, worker)

    def _write_as_owner(self, run: Run, worker: str) -> None:
        run_key, owner_key = self.keys.run(run.id), self.keys.owner(run.id)

        def attempt(pipe: Pipeline) -> None:
            owner = pipe.get(owner_key)
            lapsed = owner is None and self._still_mine(pipe.get(run_key), worker)
            if owner != worker.encode() and not lapsed:  # lapsed: the heartbeat re-takes it
                raise LostOwnership(f"worker {worker} no longer owns run {run.id}")
            pipe.multi()
            pipe.set(run_key, run.model_dump_json())
            pipe.execute()

        self.cas([run_key, owner_key], attempt, busy=f"the lease on run {run.id}")

    def heartbeat(self, run_id: str, *, worker: str, lease: float) -> bool:
        """Extend ``worker``'s lease on a run; False if another worker has taken it.

        A lease that expired while nobody took the run over (Redis was unreachable longer
        than the lease) is taken back: the record still names this worker, so no one else
        claimed it, and the run carries on instead of cancelling itself.
        """
        run_key, owner_key = self.keys.run(run_id), self.keys.owner(run_id)

        def attempt(pipe: Pipeline) -> bool:
            owner = pipe.get(owner_key)
            if owner is None and not self._still_mine(pipe.get(run_key), worker):
                return False
            if owner is not None and owner != worker.encode():
                return False
            pipe.multi()
            pipe.set(owner_key, worker, px=int(lease * 1000))
            pipe.execute()
            if owner is None:
                log.warning("run %s: lease had expired with no other worker; %s took it back",
                            run_id, worker)
            return True

        return self.cas([run_key, owner_key], attempt, busy=f"the lease on run {run_id}")

    @staticmethod
    def _still_mine(raw: bytes | str | None, worker: str) -> bool:
        if raw is None:
            return False
        run = Run.model_validate_json(raw)
        return run.worker == worker and not run.status.terminal

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
