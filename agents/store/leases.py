"""Which worker executes a run: a lease (``run:ID:owner`` with a TTL) that the worker keeps
alive, and writes to the run record that only the lease holder may make.

The holder writes a host event as one field of the run's host journal (``run:ID:hosts``),
so its cost does not grow with the number of hosts; it rewrites the whole record only on
step- and run-level events, and that write empties the journal. Taking a run over folds
the journal into the record first.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from redis.client import Pipeline
from redis.typing import EncodableT, FieldT

from agents.errors import NotFound, StoreError
from agents.run.record import HostChange, Run, RunStatus
from agents.store._redis import Part, Write
from agents.store.runs import index_open, journal_field, with_journal

log = logging.getLogger("deckhand.store")


class LostOwnership(StoreError):
    """This worker's lease on a run expired and another worker took it over."""


class Leases(Part):
    """Who owns a running run: claimed with a lease, renewed by heartbeats, written by
    the owner only (fenced: a write after the lease was lost is refused)."""

    def claim(self, run_id: str, *, worker: str, lease: float) -> Run | None:
        """Take a queued run, or one whose worker's lease expired; None if someone has it.

        The run record and its lease are watched together, so of two claimants — or a
        claimant and a worker re-taking its own expired lease — exactly one wins.
        """
        run_key, owner_key = self.keys.run(run_id), self.keys.owner(run_id)
        hosts_key = self.keys.run_hosts(run_id)

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
            run = with_journal(run, pipe.hgetall(hosts_key))  # what the last worker recorded
            run.meta["previous_worker"] = run.worker if run.worker != worker else None
            run.worker = worker
            pipe.multi()
            pipe.set(run_key, run.record_json())
            index_open(pipe, self.keys, run)
            pipe.delete(hosts_key)
            pipe.set(owner_key, worker, px=int(lease * 1000))
            pipe.execute()
            return run

        return self.cas([run_key, owner_key, hosts_key], attempt, busy=f"run {run_id}")

    def save_as_owner(self, run: Run, *, worker: str, also: Sequence[Write] = ()) -> None:
        """Write the whole run record (emptying its host journal, which it includes), only
        while ``worker`` still owns it (else LostOwnership); ``also``: writes that land in
        the same MULTI (what the run says about it, in its feed).

        A terminal state waits for a replica; if none confirms, the record says so.
        """
        self._save_as_owner(run, worker, also)
        if run.status.terminal and not self.replicate(f"end of run {run.id}"):
            run.meta.setdefault("unreplicated", []).append(f"end ({run.status.value})")
            self._save_as_owner(run, worker)

    def _save_as_owner(self, run: Run, worker: str, also: Sequence[Write] = ()) -> None:
        hosts_key = self.keys.run_hosts(run.id)

        def write(pipe: Pipeline, stored: bytes | str | None) -> None:
            # others may add to meta while the run is ours (the Slack poster records the
            # thread): the owner's copy of the record must not write that away
            if stored is not None:
                # only its meta is needed: no validating the whole (500-host) record per save
                keep_others_meta(run, json.loads(stored).get("meta") or {})
            pipe.set(self.keys.run(run.id), run.record_json())
            index_open(pipe, self.keys, run)
            # entries older than this record that land later are ignored (their seq is lower)
            pipe.delete(hosts_key)
            for write in also:
                write(pipe)

        self._write_as_owner(run.id, worker, write, watch_record=True, prepare=also)

    def record_hosts_as_owner(self, run_id: str, changes: Sequence[HostChange], *,
                              worker: str) -> None:
        """Write host changes to the run's host journal: one HSET, whatever the number of
        hosts in the run; only while ``worker`` owns the run (else LostOwnership)."""
        if not changes:
            return
        fields: dict[FieldT, EncodableT] = {journal_field(c): c.model_dump_json()
                                            for c in changes}
        hosts_key = self.keys.run_hosts(run_id)
        self._write_as_owner(run_id, worker,
                             lambda pipe, _: pipe.hset(hosts_key, mapping=fields))

    def _write_as_owner(self, run_id: str, worker: str,
                        write: Callable[[Pipeline, bytes | str | None], object], *,
                        watch_record: bool = False, prepare: Sequence[Write] = ()) -> None:
        """``write`` in one MULTI while ``worker`` owns the run, given the stored record when
        ``watch_record``. Only the lease is watched for journal writes: a takeover changes
        it, and watching the record too would make every record write retry the journal
        writes of all the run's hosts."""
        run_key, owner_key = self.keys.run(run_id), self.keys.owner(run_id)

        def attempt(pipe: Pipeline) -> None:
            owner = pipe.get(owner_key)
            stored = pipe.get(run_key) if watch_record or owner is None else None
            lapsed = owner is None and self._still_mine(stored, worker)
            if owner != worker.encode() and not lapsed:  # lapsed: the heartbeat re-takes it
                raise LostOwnership(f"worker {worker} no longer owns run {run_id}")
            state: dict[str, Any] = {}
            for part in prepare:  # an audit entry reads (and watches) the chain's head
                ready = getattr(part, "prepare", None)
                if ready is not None:
                    ready(pipe, state)
            pipe.multi()
            write(pipe, stored if watch_record else None)
            pipe.execute()

        watched = [run_key, owner_key] if watch_record else [owner_key]
        self.cas(watched, attempt, busy=f"the lease on run {run_id}")

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
        """Give up the lease (and any pending cancel or pause request) if ``worker`` still
        holds it."""
        owner_key = self.keys.owner(run_id)

        def attempt(pipe: Pipeline) -> None:
            if pipe.get(owner_key) != worker.encode():
                return
            pipe.multi()
            pipe.delete(owner_key, self.keys.cancel(run_id), self.keys.pause(run_id))
            pipe.execute()

        self.cas([owner_key], attempt, busy=f"the lease on run {run_id}")


def keep_others_meta(run: Run, stored: dict[str, Any]) -> None:
    """Into ``run.meta``, what another writer added to the stored record's meta: keys the
    owner's copy lacks, and keys missing from a mapping both have. The owner's own values
    win; nothing ever removes a meta key, so a missing one was added by someone else."""
    for key, value in stored.items():
        mine = run.meta.get(key)
        if key not in run.meta:
            run.meta[key] = value
        elif isinstance(mine, dict) and isinstance(value, dict):
            for inner, inner_value in value.items():
                mine.setdefault(inner, inner_value)
