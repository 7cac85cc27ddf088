"""``deckhand check --store``: the invariants the store keeps, verified against live Redis.

Each :class:`Violation` names the key at fault and, when one is safe, the repair: indexes
and pointers are rebuilt from the records, a stuck run is queued again, a lock or queue
entry left by an ended run is released, a host journal left by an ended run is folded into
its record. Locks and index members are read in both shapes (``ENV`` for the legacy
service, ``S:ENV``), host locks too; given the config's services, what names another
service is reported. A record (run, plan version, schedule) is never deleted. The check
reads the whole keyspace (SCAN), so it is for operators, not hot paths; with traffic
running, re-check before acting on a violation that vanished meanwhile.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from functools import partial

from redis.client import Pipeline

from agents.run.record import Run, RunStatus
from agents.store import Store
from agents.store._redis import GROUP, Keys, split_member, text
from agents.store.locks import LockInfo
from agents.store.runs import index_open, with_journal

ACTIVE = frozenset({RunStatus.APPROVED, RunStatus.QUEUED, RunStatus.RUNNING,
                    RunStatus.ROLLING_BACK})
"""States in which a run needs a worker: one owns it, or its queue entry waits for one."""
CHUNK = 500


@dataclass(frozen=True)
class Violation:
    key: str
    problem: str
    repair: Callable[[], str] | None = None
    """Fixes it (conditionally: a key that changed meanwhile is left alone) and says how."""

    def describe(self) -> str:
        how = "" if self.repair else " (no safe repair; look at it by hand)"
        return f"{self.key}: {self.problem}{how}"


@dataclass
class _Queue:
    entries: dict[str, list[str]]
    """run id → its entry ids still in the stream."""
    pending: set[str]
    waiting: set[str]
    """Entries past the group's cursor: what no worker has taken yet."""
    acknowledged: list[str]
    """Entries a worker finished with, left in the stream by older versions."""


class StoreCheck:
    """Finds (and optionally repairs) every violation of the store's invariants."""

    def __init__(self, store: Store, *, services: Collection[str | None] | None = None):
        """``services``: the service keys an organisation's config knows (None among them
        when it names a ``legacy_service``); keys and records of any other service are then
        violations. Leave it None for a config without ``services:``, whose environment
        names may contain ``:`` and whose records are all the legacy service's."""
        self.store, self.r, self.keys = store, store.r, store.keys
        self.services = None if services is None else set(services)

    def violations(self) -> list[Violation]:
        with self.store.errors():
            runs = self._runs()
            queue = self._queue()
            return [*self._index(runs), *self._open_index(runs), *self._plans(),
                    *self._active(runs, queue), *self._locks(runs), *self._runs_of(runs),
                    *self._queue_entries(runs, queue), *self._journals(runs),
                    *self._unknown_services(runs)]

    def orphaned(self, runs: Iterable[Run]) -> list[Violation]:
        """Active runs among ``runs`` with no live worker, no queue entry and no place in
        a lock queue — what a reconciler re-queues (each violation's repair does it)."""
        with self.store.errors():
            return list(self._active({r.id: r for r in runs}, self._queue()))

    def repair(self, found: Iterable[Violation]) -> list[str]:
        """Apply every safe repair; what was done, one line each."""
        with self.store.errors():
            return [f"{v.key}: {v.repair()}" for v in found if v.repair is not None]

    # -- reading ---------------------------------------------------------------------------

    def _scan(self, pattern: str) -> Iterator[str]:
        for key in self.r.scan_iter(match=self.keys(pattern), count=1000):
            yield text(key)

    def _runs(self) -> dict[str, Run]:
        pattern = re.compile(re.escape(self.keys.run("")) + r"[^:]+$")
        keys = [k for k in self._scan("run:*") if pattern.match(k)]
        runs: dict[str, Run] = {}
        for start in range(0, len(keys), CHUNK):
            chunk = keys[start:start + CHUNK]
            for raw in self.r.mget(chunk):
                if raw is not None:
                    run = Run.model_validate_json(raw)
                    runs[run.id] = run
        return runs

    def _queue(self) -> _Queue:
        key, entries = self.keys.queue(), defaultdict(list)
        groups = self.r.xinfo_groups(key) if self.r.exists(key) else []
        group = next((g for g in groups if text(g["name"]) == GROUP), None)
        cursor = text(group["last-delivered-id"]) if group else "0-0"
        pending = {text(p["message_id"]) for p in self._pending()} if group else set()
        waiting, done = set(), []
        for entry_id, run_id in self.store.queue.entries():
            entries[run_id].append(entry_id)
            if _after(entry_id, cursor):
                waiting.add(entry_id)
            elif entry_id not in pending:
                done.append(entry_id)
        return _Queue(dict(entries), pending, waiting, done)

    def _pending(self) -> list[dict[str, bytes]]:
        return list(self.r.xpending_range(self.keys.queue(), GROUP, min="-", max="+",
                                          count=1_000_000))

    # -- invariants ------------------------------------------------------------------------

    def _index(self, runs: dict[str, Run]) -> Iterator[Violation]:
        """Every id in the runs index has a record, and every record is indexed."""
        indexed = {text(m) for m in self.r.zrange(self.keys.runs(), 0, -1)}
        by_prefix = {text(m) for m in self.r.zrange(self.keys.run_ids(), 0, -1)}
        for run_id in sorted(indexed - runs.keys()):
            yield Violation(self.keys.runs(), f"names {run_id}, which has no record",
                            self._unindex(run_id))
        for run_id in sorted(by_prefix - runs.keys() - indexed):
            yield Violation(self.keys.run_ids(), f"names {run_id}, which has no record",
                            self._unindex(run_id))
        for run_id, run in sorted(runs.items()):
            if run_id not in indexed or run_id not in by_prefix:
                yield Violation(self.keys.run(run_id), "is missing from the runs indexes",
                                self._index_run(run))

    def _open_index(self, runs: dict[str, Run]) -> Iterator[Violation]:
        """The index of open runs names exactly the runs that have not ended."""
        indexed = {text(m) for m in self.r.zrange(self.keys.runs_open(), 0, -1)}
        for run_id in sorted(indexed):
            if run_id not in runs or runs[run_id].status.terminal:
                yield Violation(self.keys.runs_open(), f"names {run_id}, which is not open",
                                partial(self._reindex_open, run_id))
        for run_id, run in sorted(runs.items()):
            if not run.status.terminal and run_id not in indexed:
                yield Violation(self.keys.run(run_id), "is open but missing from the index "
                                "of open runs", partial(self._reindex_open, run_id))

    def _plans(self) -> Iterator[Violation]:
        """Every plan's ``latest`` names its newest version, and that version exists."""
        versions: dict[str, set[int]] = defaultdict(set)
        latest: dict[str, int] = {}
        shape = re.compile(re.escape(self.keys("plan", "")) + r"([^:]+):(v(\d+)|latest)$")
        for key in self._scan("plan:*"):
            match = shape.match(key)
            if match and match.group(3):
                versions[match.group(1)].add(int(match.group(3)))
            elif match:
                latest[match.group(1)] = int(self.r.get(key) or 0)
        for plan_id in sorted(versions.keys() | latest.keys()):
            newest, pointer = max(versions[plan_id], default=0), latest.get(plan_id)
            if pointer != newest:
                key = self.keys.plan_latest(plan_id)
                problem = (f"says version {pointer}, but the newest stored is {newest}"
                           if newest else f"says version {pointer}, but no version is stored")
                yield Violation(key, problem, self._set_latest(plan_id, newest) if newest
                                else None)

    def _active(self, runs: dict[str, Run], queue: _Queue) -> Iterator[Violation]:
        """Every active run has a live owner, a queue entry, or a place in a lock queue."""
        active = [r for r in runs.values() if r.status in ACTIVE]
        owners = self.r.mget([self.keys.owner(r.id) for r in active]) if active else []
        waiting = self._waiting_for_locks()
        for run, owner in zip(active, owners, strict=True):
            if owner is None and run.id not in queue.entries and run.id not in waiting:
                yield Violation(self.keys.run(run.id),
                                f"is {run.status.value} with no live worker and no queue entry",
                                self._requeue(run.id))

    def _waiting_for_locks(self) -> set[str]:
        found: set[str] = set()
        for key in [*self._scan("lockq:*"), *self._scan("hostlockq:*")]:
            found |= {text(m) for m in self.r.lrange(key, 0, -1)}
        return found

    def _locks(self, runs: dict[str, Run]) -> Iterator[Violation]:
        """Every lock (an environment's, of any service, or a shared host's) names an active
        run, and its held-locks set lists every lock held."""
        for kind in (_EnvLocks(self.keys), _HostLocks(self.keys)):
            listed = {text(m) for m in self.r.smembers(kind.index)}
            held = {k[len(kind.prefix):] for k in self._scan(kind.pattern)}
            for member in sorted(held):
                info = self._lock_at(kind, member)
                run = runs.get(info.run_id) if info else None
                if info is not None and (run is None or run.status not in ACTIVE):
                    state = run.status.value if run else "missing"
                    yield Violation(kind.key(member), f"is held by {info.run_id}, which is "
                                    f"{state}", self._unlock(kind, member, info.run_id))
                elif member not in listed:
                    yield Violation(kind.index, f"does not list the held lock on {member}",
                                    partial(self._list_lock, kind, member))
            for member in sorted(listed - held):
                yield Violation(kind.index, f"lists {member}, whose lock is free",
                                partial(self._forget_lock, kind, member))

    def _lock_at(self, kind: _LockKind, member: str) -> LockInfo | None:
        if isinstance(kind, _HostLocks):
            return self.store.locks.host(member)
        return self.store.locks.get(*split_member(member))

    def _runs_of(self, runs: dict[str, Run]) -> Iterator[Violation]:
        """Every run of a named service is in its service's index (``runs:svc:S``)."""
        by_service: dict[str, list[Run]] = defaultdict(list)
        for run in runs.values():
            if run.service is not None:
                by_service[run.service].append(run)
        for service, owned in sorted(by_service.items()):
            indexed = {text(m) for m in self.r.zrange(self.keys.runs_of(service), 0, -1)}
            for run in sorted(owned, key=lambda r: r.id):
                if run.id not in indexed:
                    yield Violation(self.keys.run(run.id), f"is missing from {service}'s "
                                    f"index of runs", partial(self._index_of, service, run))

    def _unknown_services(self, runs: dict[str, Run]) -> Iterator[Violation]:
        """Index members and runs of a service the config lacks (or without a service,
        when it names no legacy one): reported, never repaired — a record is evidence,
        and a lock such a run holds is released by ``_locks`` once the run has ended."""
        if self.services is None:
            return
        for index in (self.keys.locks(), self.keys.history_environments()):
            for member in sorted(text(m) for m in self.r.smembers(index)):
                service, _ = split_member(member)
                if service not in self.services:
                    yield Violation(index, f"lists {member}, {_whose(service)}")
        counts: dict[str | None, int] = defaultdict(int)
        for run in runs.values():
            counts[run.service] += run.service not in self.services
        for service, count in sorted(counts.items(), key=lambda c: c[0] or ""):
            if count:
                key = self.keys.runs() if service is None else self.keys.runs_of(service)
                yield Violation(key, f"holds {count} run(s) {_whose(service)}")

    def _index_of(self, service: str, run: Run) -> str:
        self.r.zadd(self.keys.runs_of(service), {run.id: run.created_at})
        return f"indexed under {service}"

    def _queue_entries(self, runs: dict[str, Run], queue: _Queue) -> Iterator[Violation]:
        """The queue holds only work to do, and its depth counts only untaken entries."""
        reported, done = self.store.queue.backlog()[0], queue.acknowledged
        if done or reported != len(queue.waiting):
            yield Violation(self.keys.queue(), f"depth reads {reported} but "
                            f"{len(queue.waiting)} entries wait; {len(done)} finished entries "
                            f"remain", partial(self._drop, done) if done else None)
        for run_id, entry_ids in sorted(queue.entries.items()):
            run = runs.get(run_id)
            untaken = [e for e in entry_ids if e in queue.waiting]
            if untaken and (run is None or run.status.terminal):
                state = run.status.value if run else "missing"
                yield Violation(self.keys.queue(), f"entries {', '.join(untaken)} wait for "
                                f"{run_id}, which is {state}", partial(self._drop, untaken))

    def _journals(self, runs: dict[str, Run]) -> Iterator[Violation]:
        """A host journal belongs to a run that has not ended: the end folds it in."""
        shape = re.compile(re.escape(self.keys.run("")) + r"([^:]+):hosts$")
        for key in self._scan("run:*:hosts"):
            match = shape.match(key)
            run = runs.get(match.group(1)) if match else None
            if match and run is None:
                yield Violation(key, "is the host journal of a run that has no record",
                                partial(self._drop_journal, match.group(1)))
            elif run is not None and run.status.terminal:
                yield Violation(key, f"is left after run {run.id} ended ({run.status.value})",
                                partial(self._fold_journal, run.id))

    # -- repairs (each conditional: nothing that changed meanwhile is overwritten) ----------

    def _unindex(self, run_id: str) -> Callable[[], str]:
        def repair() -> str:
            def attempt(pipe: Pipeline) -> str:
                if pipe.exists(self.keys.run(run_id)):
                    return "left alone: the run exists now"
                pipe.multi()
                pipe.zrem(self.keys.runs(), run_id)
                pipe.zrem(self.keys.run_ids(), run_id)
                pipe.execute()
                return f"removed {run_id} from the runs indexes"
            return self.store.cas([self.keys.run(run_id)], attempt, busy=f"run {run_id}")
        return repair

    def _reindex_open(self, run_id: str) -> str:
        key = self.keys.run(run_id)

        def attempt(pipe: Pipeline) -> str:
            raw = pipe.get(key)
            pipe.multi()
            if raw is None:
                pipe.zrem(self.keys.runs_open(), run_id)
            else:
                index_open(pipe, self.keys, Run.model_validate_json(raw))
            pipe.execute()
            return f"{run_id} is {'not ' if raw is None else ''}indexed as its record says"
        return self.store.cas([key], attempt, busy=f"run {run_id}")

    def _index_run(self, run: Run) -> Callable[[], str]:
        def repair() -> str:
            with self.r.pipeline() as pipe:
                pipe.zadd(self.keys.runs(), {run.id: run.created_at}, nx=True)
                pipe.zadd(self.keys.run_ids(), {run.id: 0}, nx=True)
                pipe.execute()
            return f"indexed {run.id}"
        return repair

    def _set_latest(self, plan_id: str, newest: int) -> Callable[[], str]:
        def repair() -> str:
            key = self.keys.plan_latest(plan_id)

            def attempt(pipe: Pipeline) -> str:
                if int(pipe.get(key) or 0) >= newest:
                    return "left alone: it moved meanwhile"
                pipe.multi()
                pipe.set(key, newest)
                pipe.execute()
                return f"now says version {newest}"
            return self.store.cas([key], attempt, busy=f"plan {plan_id}")
        return repair

    def _requeue(self, run_id: str) -> Callable[[], str]:
        def repair() -> str:
            keys = [self.keys.run(run_id), self.keys.owner(run_id)]

            def attempt(pipe: Pipeline) -> str:
                raw = pipe.get(keys[0])
                if raw is None or Run.model_validate_json(raw).status not in ACTIVE \
                        or pipe.exists(keys[1]):
                    return "left alone: it moved meanwhile"
                pipe.multi()
                self.store.queue.step(run_id)(pipe)
                pipe.execute()
                return "queued again: a worker will resume it (or roll it back)"
            return self.store.cas(keys, attempt, busy=f"run {run_id}")
        return repair

    def _unlock(self, kind: _LockKind, member: str, run_id: str) -> Callable[[], str]:
        def repair() -> str:
            if isinstance(kind, _HostLocks):
                self.store.locks.release(None, (), hosts=[member], run_id=run_id)
            else:
                service, env = split_member(member)
                self.store.locks.release(service, [env], run_id=run_id)
            return f"released (it was {run_id}'s)"
        return repair

    def _list_lock(self, kind: _LockKind, member: str) -> str:
        self.r.sadd(kind.index, member)
        return f"lists {member} now"

    def _forget_lock(self, kind: _LockKind, member: str) -> str:
        key = kind.key(member)

        def attempt(pipe: Pipeline) -> str:
            if pipe.exists(key):
                return "left alone: the lock is held again"
            pipe.multi()
            pipe.srem(kind.index, member)
            pipe.execute()
            return f"no longer lists {member}"
        return self.store.cas([key], attempt, busy=f"the lock on {member}")

    def _drop_journal(self, run_id: str) -> str:
        keys = [self.keys.run(run_id), self.keys.run_hosts(run_id)]

        def attempt(pipe: Pipeline) -> str:
            if pipe.exists(keys[0]):
                return "left alone: the run exists now"
            pipe.multi()
            pipe.delete(keys[1])
            pipe.execute()
            return "deleted"
        return self.store.cas(keys, attempt, busy=f"run {run_id}")

    def _fold_journal(self, run_id: str) -> str:
        keys = [self.keys.run(run_id), self.keys.run_hosts(run_id)]

        def attempt(pipe: Pipeline) -> str:
            raw = pipe.get(keys[0])
            record = Run.model_validate_json(raw) if raw is not None else None
            if record is None or not record.status.terminal:
                return "left alone: it moved meanwhile"
            before = record.seq
            run = with_journal(record, pipe.hgetall(keys[1]))
            pipe.multi()
            pipe.set(keys[0], run.record_json())
            pipe.delete(keys[1])
            pipe.execute()
            return f"folded into the record ({run.seq - before} newer event(s))"
        return self.store.cas(keys, attempt, busy=f"run {run_id}")

    def _drop(self, entry_ids: list[str]) -> str:
        if entry_ids:
            with self.r.pipeline() as pipe:
                pipe.xack(self.keys.queue(), GROUP, *entry_ids)
                pipe.xdel(self.keys.queue(), *entry_ids)
                pipe.execute()
        return f"deleted {len(entry_ids)} finished entries"


def _whose(service: str | None) -> str:
    if service is None:
        return "of no service, and the config names no legacy_service to own them"
    return f"of service {service}, which the config lacks"


class _EnvLocks:
    """Environment locks: ``lock:ENV`` or ``lock:S:ENV``, listed in ``locks`` by member."""

    def __init__(self, keys: Keys):
        self.index, self.prefix, self.pattern = keys.locks(), keys("lock", ""), "lock:*"
        self.keys = keys

    def key(self, member: str) -> str:
        return self.keys.lock(*split_member(member))


class _HostLocks:
    """Host locks: ``hostlock:ID``, listed in ``hostlocks``."""

    def __init__(self, keys: Keys):
        self.index, self.prefix = keys.host_locks(), keys("hostlock", "")
        self.pattern, self.keys = "hostlock:*", keys

    def key(self, member: str) -> str:
        return self.keys.host_lock(member)


_LockKind = _EnvLocks | _HostLocks


def _after(entry_id: str, cursor: str) -> bool:
    """Whether stream id ``entry_id`` comes after ``cursor``."""
    def parts(stream_id: str) -> tuple[int, int]:
        ms, _, seq = stream_id.partition("-")
        return int(ms), int(seq or 0)
    return parts(entry_id) > parts(cursor)
