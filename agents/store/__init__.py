"""Durable state in Redis: plan versions, runs, approvals, locks, the run queue, audit, dedupe.

Every change to a run is one compare-and-set (WATCH/MULTI with bounded retries), so double
clicks, Slack retries and several replicas can never start a run twice. Approval rules are
checked inside that transaction, and an approval that completes a run enqueues it in the
same EXEC. With ``REDIS_URL`` unset the same code runs on an in-process fakeredis.

Keys (prefix ``dh``): ``plan:ID:vN``, ``plan:ID:latest``, ``run:ID``, ``runs`` (zset),
``run:ID:owner`` (worker lease), ``run:ID:cancel``, ``lock:ENV``, ``lockq:ENV`` (waiting
runs), ``queue`` (stream, group ``workers``), ``audit`` (stream), ``dedupe:KEY``.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import redis
from redis.backoff import ExponentialBackoff
from redis.client import Pipeline
from redis.retry import Retry

from agents.errors import (
    ApprovalRefused,
    IllegalTransition,
    LockHeld,
    NotFound,
    StoreError,
    StoreUnavailable,
)
from agents.plan import Plan
from agents.policy import Policy, approval_problem, approvals_needed
from agents.runs import Approval, Run, RunStatus, StepState

CAS_RETRIES = 100
GROUP = "workers"
Change = Callable[[Run], "list[Callable[[Pipeline], Any]] | None"]
"""Edits a run in place; may return extra commands to run in the same transaction."""


@dataclass(frozen=True)
class LockInfo:
    environment: str
    run_id: str
    worker: str
    since: float

    def describe(self) -> str:
        held = time.strftime("%H:%M:%S", time.localtime(self.since))
        return f"{self.environment} is locked by {self.run_id} (worker {self.worker}, since {held})"


@dataclass(frozen=True)
class AuditEntry:
    id: str
    at: float
    actor: str
    action: str
    run_id: str | None
    plan_id: str | None
    details: dict[str, Any]

    def as_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)


class Store:
    """Redis-backed state shared by every bot replica and worker."""

    def __init__(self, client: redis.Redis, *, prefix: str = "dh",
                 clock: Callable[[], float] = time.time, where: str = "redis"):
        # Any: redis-py types replies as bytes | str (it depends on decode_responses); this
        # store always uses bytes, and decodes at the few places it reads text.
        self.r: Any = client
        self.prefix = prefix
        self.clock = clock
        self.where = where

    @classmethod
    def connect(cls, url: str | None, **options: Any) -> Store:
        """A store on ``url``, or on an in-process fakeredis when ``url`` is None."""
        if url is None:
            import fakeredis

            return cls(fakeredis.FakeRedis(), where="in-process fakeredis", **options)
        retry = Retry(ExponentialBackoff(cap=0.5, base=0.05), retries=6)  # rides out a restart
        client = redis.Redis.from_url(url, retry=retry, socket_timeout=5,
                                      retry_on_error=[redis.ConnectionError, redis.TimeoutError])
        return cls(client, where=_safe_url(url), **options)

    def k(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """Translate redis-py's exceptions into ours at the border."""
        try:
            yield
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise StoreUnavailable(f"cannot reach Redis at {self.where} ({exc}); nothing was "
                                   f"changed — check REDIS_URL and that Redis is up") from exc
        except redis.RedisError as exc:
            raise StoreError(f"Redis refused the operation: {exc}") from exc

    def ping(self) -> bool:
        with self._errors():
            return bool(self.r.ping())

    # -- plans -----------------------------------------------------------------------------

    def save_plan(self, plan: Plan) -> None:
        """Store a plan version. Versions are immutable: saving one twice is refused."""
        with self._errors():
            pipe = self.r.pipeline()
            pipe.set(self.k("plan", plan.id, f"v{plan.version}"), plan.model_dump_json(), nx=True)
            pipe.set(self.k("plan", plan.id, "latest"), plan.version)
            created, _ = pipe.execute()
        if not created:
            raise StoreError(f"plan {plan.id} version {plan.version} already exists")

    def plan(self, plan_id: str, version: int | None = None) -> Plan:
        with self._errors():
            if version is None:
                latest = self.r.get(self.k("plan", plan_id, "latest"))
                if latest is None:
                    raise NotFound(f"no plan {plan_id}")
                version = int(latest)
            raw = self.r.get(self.k("plan", plan_id, f"v{version}"))
        if raw is None:
            raise NotFound(f"no plan {plan_id} version {version}")
        return Plan.model_validate_json(raw)

    def plan_versions(self, plan_id: str) -> list[Plan]:
        latest = self.plan(plan_id).version
        return [self.plan(plan_id, v) for v in range(1, latest + 1)]

    # -- runs ------------------------------------------------------------------------------

    def create_run(self, run: Run) -> Run:
        with self._errors():
            pipe = self.r.pipeline()
            pipe.set(self.k("run", run.id), run.model_dump_json(), nx=True)
            pipe.zadd(self.k("runs"), {run.id: run.created_at})
            created, _ = pipe.execute()
        if not created:
            raise StoreError(f"run {run.id} already exists")
        return run

    def run(self, run_id: str) -> Run:
        with self._errors():
            raw = self.r.get(self.k("run", run_id))
        if raw is None:
            raise NotFound(f"no run {run_id} — `deckhand runs` lists recent ones")
        return Run.model_validate_json(raw)

    def runs(self, *, limit: int = 20, statuses: Iterable[RunStatus] | None = None) -> list[Run]:
        """Most recent runs first, optionally only those in ``statuses``."""
        wanted = set(statuses) if statuses is not None else None
        with self._errors():
            ids = self.r.zrevrange(self.k("runs"), 0, max(limit * 5, 100))
            raws = self.r.mget([self.k("run", i.decode()) for i in ids]) if ids else []
        runs = [Run.model_validate_json(raw) for raw in raws if raw]
        return [r for r in runs if wanted is None or r.status in wanted][:limit]

    def update_run(self, run_id: str, change: Change) -> Run:
        """Apply ``change`` atomically: re-read and retry if anyone wrote the run meanwhile."""
        key = self.k("run", run_id)
        with self._errors():
            for _ in range(CAS_RETRIES):
                with self.r.pipeline() as pipe:
                    try:
                        return self._try_update(pipe, key, run_id, change)
                    except redis.WatchError:
                        continue
        raise StoreError(f"run {run_id} is changing too fast; try again")

    def _try_update(self, pipe: Pipeline, key: str, run_id: str, change: Change) -> Run:
        pipe.watch(key)
        raw = pipe.get(key)
        if raw is None:
            raise NotFound(f"no run {run_id}")
        run = Run.model_validate_json(raw)
        extras = change(run) or []
        pipe.multi()
        pipe.set(key, run.model_dump_json())
        for extra in extras:
            extra(pipe)
        pipe.execute()
        return run

    def transition(self, run_id: str, new: RunStatus, *,
                   expect: Iterable[RunStatus] | None = None, reason: str | None = None) -> Run:
        """Move a run to ``new`` (IllegalTransition if the state machine forbids it)."""
        expected = set(expect) if expect is not None else None

        def change(run: Run) -> None:
            if expected is not None and run.status not in expected:
                raise IllegalTransition(f"run {run_id} is {run.status.value}, not "
                                        f"{' or '.join(sorted(s.value for s in expected))}")
            run.move(new)
            run.reason = reason or run.reason
            if new.terminal:
                run.finished_at = self.clock()

        return self.update_run(run_id, change)

    def approve(self, run_id: str, *, user: str, user_groups: Iterable[str] = (),
                plan_version: int, plan_hash: str, policy: Policy) -> Run:
        """Record an approval; when it is the last one needed, queue the run (same EXEC)."""
        groups = list(user_groups)

        def change(run: Run) -> list[Callable[[Pipeline], Any]]:
            problem = approval_problem(run, user=user, user_groups=groups,
                                       plan_version=plan_version, plan_hash=plan_hash,
                                       policy=policy, now=self.clock())
            if problem:
                raise ApprovalRefused(problem)
            run.approvals.append(Approval(user=user, at=self.clock(), plan_version=plan_version,
                                          plan_hash=plan_hash))
            if approvals_needed(run, policy) > 0:
                return []
            run.move(RunStatus.APPROVED)
            run.move(RunStatus.QUEUED)
            return [self.queue_step(run_id)]

        return self.update_run(run_id, change)

    def revise(self, run_id: str, plan: Plan) -> Run:
        """Bind a waiting run to a new plan version; earlier approvals no longer count."""
        def change(run: Run) -> None:
            run.move(RunStatus.AWAITING_APPROVAL)
            run.plan_version, run.plan_hash = plan.version, plan.hash
            run.approvals = []
            run.environments = plan.environments()
            run.goal = plan.goal
            run.plan_versions.append(plan.version)
            run.steps = {s.id: StepState(id=s.id) for s in plan.steps}
            run.rollback = {r.id: StepState(id=r.id) for r in plan.rollback}

        return self.update_run(run_id, change)

    def request_cancel(self, run_id: str, *, user: str) -> Run:
        """Cancel a waiting run at once; ask the worker of a running one to stop it."""
        def change(run: Run) -> list[Callable[[Pipeline], Any]]:
            if run.status.terminal:
                raise ApprovalRefused(f"run {run_id} already ended ({run.status.value})")
            if run.status in (RunStatus.RUNNING, RunStatus.ROLLING_BACK):
                return [lambda pipe: pipe.set(self.k("run", run_id, "cancel"), user)]
            run.move(RunStatus.CANCELLED)
            run.reason = f"cancelled by {user}"
            run.finished_at = self.clock()
            return []

        return self.update_run(run_id, change)

    # -- ownership (which worker executes a run) --------------------------------------------

    def claim(self, run_id: str, *, worker: str, lease: float) -> Run | None:
        """Take a queued run, or one whose worker's lease expired; None if someone has it.

        Both claimants write the run key, so WATCH on it lets exactly one of them win.
        """
        owner_key = self.k("run", run_id, "owner")

        def change(run: Run) -> list[Callable[[Pipeline], Any]]:
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
        """Write the run record, only while ``worker`` still owns it (else LostOwnership)."""
        owner_key = self.k("run", run.id, "owner")
        with self._errors():
            for _ in range(CAS_RETRIES):
                with self.r.pipeline() as pipe:
                    try:
                        pipe.watch(owner_key)
                        if pipe.get(owner_key) != worker.encode():
                            raise LostOwnership(f"worker {worker} no longer owns run {run.id}")
                        pipe.multi()
                        pipe.set(self.k("run", run.id), run.model_dump_json())
                        pipe.execute()
                        return
                    except redis.WatchError:
                        continue

    def heartbeat(self, run_id: str, *, worker: str, lease: float) -> bool:
        """Extend ``worker``'s lease on a run; False if it lost the run."""
        owner_key = self.k("run", run_id, "owner")
        with self._errors(), self.r.pipeline() as pipe:
            try:
                pipe.watch(owner_key)
                if pipe.get(owner_key) != worker.encode():
                    return False
                pipe.multi()
                pipe.pexpire(owner_key, int(lease * 1000))
                pipe.execute()
            except redis.WatchError:
                return False
        return True

    def release(self, run_id: str, *, worker: str) -> None:
        owner_key = self.k("run", run_id, "owner")
        with self._errors():
            if self.r.get(owner_key) == worker.encode():
                self.r.delete(owner_key, self.k("run", run_id, "cancel"))

    def cancel_requested(self, run_id: str) -> str | None:
        with self._errors():
            who = self.r.get(self.k("run", run_id, "cancel"))
        return who.decode() if who else None

    # -- dedupe and audit -----------------------------------------------------------------

    def first_time(self, key: str, *, ttl: float = 3600) -> bool:
        """True the first time ``key`` is seen within ``ttl`` seconds (SET NX)."""
        with self._errors():
            return bool(self.r.set(self.k("dedupe", key), "1", nx=True, px=int(ttl * 1000)))

    def audit(self, action: str, *, actor: str, run_id: str | None = None,
              plan_id: str | None = None, **details: Any) -> None:
        """Append to the audit stream. Entries are never edited."""
        entry = {"at": repr(self.clock()), "actor": actor, "action": action,
                 "run_id": run_id or "", "plan_id": plan_id or "",
                 "details": json.dumps(details, sort_keys=True, default=str)}
        with self._errors():
            self.r.xadd(self.k("audit"), entry)

    def audit_log(self, *, run_id: str | None = None, limit: int = 200) -> list[AuditEntry]:
        """Oldest first; filtered to one run when ``run_id`` is given."""
        with self._errors():
            raw = self.r.xrange(self.k("audit"))
        entries = [_audit_entry(i, f) for i, f in raw]
        if run_id:
            entries = [e for e in entries if e.run_id == run_id]
        return entries[-limit:]

    # -- locks -----------------------------------------------------------------------------

    def acquire_locks(self, environments: Iterable[str], *, run_id: str, worker: str,
                      ttl: float) -> None:
        """Take every environment's lock for ``run_id`` or none (LockHeld says who has one)."""
        envs = sorted(set(environments))
        if not envs:
            return None
        keys = [self.k("lock", e) for e in envs]
        with self._errors():
            for _ in range(CAS_RETRIES):
                with self.r.pipeline() as pipe:
                    try:
                        return self._try_lock(pipe, envs, keys, run_id, worker, ttl)
                    except redis.WatchError:
                        continue
        raise StoreError("locks are changing too fast; try again")

    def _try_lock(self, pipe: Pipeline, envs: list[str], keys: list[str], run_id: str,
                  worker: str, ttl: float) -> None:
        pipe.watch(*keys)
        for env, key in zip(envs, keys, strict=True):
            holder = _lock_info(env, cast(bytes | None, pipe.get(key)))
            if holder is not None and holder.run_id != run_id:
                raise LockHeld(holder.describe())
        pipe.multi()
        value = json.dumps({"run": run_id, "worker": worker, "since": self.clock()})
        for key in keys:
            pipe.set(key, value, px=int(ttl * 1000))
        pipe.execute()

    def refresh_locks(self, environments: Iterable[str], *, run_id: str, ttl: float) -> None:
        for env in environments:
            self._if_lock_owner(env, run_id, lambda p, k: p.pexpire(k, int(ttl * 1000)))

    def release_locks(self, environments: Iterable[str], *, run_id: str) -> None:
        for env in environments:
            self._if_lock_owner(env, run_id, lambda p, k: p.delete(k))

    def _if_lock_owner(self, env: str, run_id: str,
                       action: Callable[[Pipeline, str], Any]) -> None:
        key = self.k("lock", env)
        with self._errors(), self.r.pipeline() as pipe, contextlib.suppress(redis.WatchError):
                pipe.watch(key)
                holder = _lock_info(env, pipe.get(key))
                if holder is None or holder.run_id != run_id:
                    return
                pipe.multi()
                action(pipe, key)
                pipe.execute()

    def locks(self) -> list[LockInfo]:
        with self._errors():
            keys = sorted(self.r.scan_iter(self.k("lock", "*")))
            values = self.r.mget(keys) if keys else []
        prefix = len(self.k("lock", ""))
        infos = [_lock_info(key.decode()[prefix:], v) for key, v in zip(keys, values, strict=True)]
        return [i for i in infos if i is not None]

    def wait_for_lock(self, environment: str, run_id: str) -> None:
        """Queue ``run_id`` behind ``environment``'s lock (first come, first served)."""
        key = self.k("lockq", environment)
        with self._errors():
            if run_id.encode() not in self.r.lrange(key, 0, -1):
                self.r.rpush(key, run_id)

    def next_waiting(self, environment: str) -> str | None:
        """Pop the first run waiting for ``environment`` (the lock was released)."""
        with self._errors():
            raw = self.r.lpop(self.k("lockq", environment))
        return raw.decode() if raw else None

    # -- queue -----------------------------------------------------------------------------

    def enqueue(self, run_id: str) -> None:
        with self._errors():
            self.queue_step(run_id)(self.r)

    def queue_step(self, run_id: str) -> Callable[[Pipeline], Any]:
        """The XADD that queues ``run_id``; return it from an ``update_run`` change to
        queue the run in the same transaction as its state change."""
        return lambda pipe: pipe.xadd(self.k("queue"), {"run": run_id})

    def ensure_group(self) -> None:
        with self._errors():
            try:
                self.r.xgroup_create(self.k("queue"), GROUP, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    def read_queue(self, consumer: str, *, block: float) -> tuple[str, str] | None:
        """The next new entry for ``consumer`` as (entry id, run id), waiting up to ``block`` s."""
        with self._errors():
            reply = self.r.xreadgroup(GROUP, consumer, {self.k("queue"): ">"}, count=1,
                                      block=max(1, int(block * 1000)))
        for _, entries in reply or []:
            for entry_id, fields in entries:
                return entry_id.decode(), fields[b"run"].decode()
        return None

    def reclaim(self, consumer: str, *, idle: float) -> tuple[str, str] | None:
        """An entry another consumer left unacknowledged for ``idle`` seconds, now ours."""
        with self._errors():
            reply = self.r.xautoclaim(self.k("queue"), GROUP, consumer,
                                      min_idle_time=int(idle * 1000), start_id="0-0", count=1)
        for entry_id, fields in reply[1] if len(reply) > 1 else []:
            if fields:
                return entry_id.decode(), fields[b"run"].decode()
        return None

    def touch(self, consumer: str, entry_id: str) -> None:
        """Reset an entry's idle time so nobody reclaims a run that is still executing."""
        with self._errors():
            self.r.xclaim(self.k("queue"), GROUP, consumer, 0, [entry_id], justid=True)

    def ack(self, entry_id: str) -> None:
        with self._errors():
            self.r.xack(self.k("queue"), GROUP, entry_id)

    def queue_depth(self) -> int:
        with self._errors():
            return int(self.r.xlen(self.k("queue")))

    def queue_backlog(self) -> tuple[int, int]:
        """(entries no worker has read yet, entries read but not yet acknowledged).

        ``queue_depth`` counts every entry the stream keeps, finished ones included.
        """
        key = self.k("queue")
        with self._errors():
            if not self.r.exists(key):
                return 0, 0
            groups = self.r.xinfo_groups(key)
            group = next((g for g in groups if _text(g["name"]) == GROUP), None)
            if group is None:
                return int(self.r.xlen(key)), 0
            lag = group.get("lag")
            if lag is None:  # Redis < 7, or not computable: count what is past the cursor
                last = _text(group["last-delivered-id"])
                lag = len(self.r.xrange(key, min=f"({last}", max="+") or [])
        return int(lag), int(group["pending"])


class LostOwnership(StoreError):
    """This worker's lease on a run expired and another worker took it over."""


class _NotClaimed(Exception):
    """Internal: abort a claim transaction without writing."""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _lock_info(env: str, raw: bytes | None) -> LockInfo | None:
    if raw is None:
        return None
    data = json.loads(raw)
    return LockInfo(env, data["run"], data["worker"], float(data["since"]))


def _audit_entry(entry_id: bytes, fields: dict[bytes, bytes]) -> AuditEntry:
    text = {k.decode(): v.decode() for k, v in fields.items()}
    return AuditEntry(id=entry_id.decode(), at=float(text["at"]), actor=text["actor"],
                      action=text["action"], run_id=text["run_id"] or None,
                      plan_id=text["plan_id"] or None, details=json.loads(text["details"]))


def _safe_url(url: str) -> str:
    """The URL without its password, for messages."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    return f"{parts.scheme}://{host}:{parts.port or 6379}{parts.path}"
