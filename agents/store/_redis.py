"""The Redis border every part of the store goes through: the client, key names, the
translation of redis-py's exceptions, and the one compare-and-set loop.

Keys (prefix ``dh``, see :class:`Keys`): ``plan:ID:vN``, ``plan:ID:latest``, ``run:ID``,
``runs`` (zset by creation), ``runs:ids`` (zset, all scores 0: ids in lexical order, for
prefix lookups), ``run:ID:owner`` (worker lease), ``run:ID:cancel``, ``run:ID:pause``
(who paused it, as JSON), ``run:ID:judgments`` (hash: go/no-go decisions, ``STEP/BATCH`` →
Decision), ``run:ID:audit`` (list: that run's audit entries, as JSON), ``run:ID:hosts``
(hash: the run's host journal, ``PHASE/STEP/HOST`` → the newest ``HostChange`` since the
record was last written; folded into ``run:ID`` and deleted when the run ends or is taken
over), ``replication:probe`` (a
counter written before each WAIT), ``lock:ENV``, ``locks`` (set of environments
whose lock may be held), ``lockq:ENV`` (waiting runs), ``hostlock:ID``, ``hostlocks`` and
``hostlockq:ID`` (hosts services share, or ``lock_hosts``), ``runs:svc:S`` (a service's
runs), ``queue`` (stream, group ``workers``; an entry is deleted when acknowledged),
``audit`` (stream; group ``sink``: the sink's cursor, see ``feed``), ``audit:chain``
(hash: the stream's hash chain, see ``chain``), ``dedupe:KEY``,
``schedule:ID``, ``schedules`` (zset), ``schedules:version``, ``schedule:ID:KIND:ISO``
(fire claims), ``history:env:ENV`` (zset of deploys), ``history:envs``,
``history:done:RUN`` (recorded once), ``where:ENV`` (what each host serves),
``limits:ENV:USER`` (zset: runs USER approved lately, for ``policy.limits``),
``proposal:HASH:REQUESTER`` (validated plans not yet requested, with a TTL),
``ask:ID`` (a request waiting for "which service?", with a TTL; see ``asks``),
``run:ID:feed`` (stream: what the run has to say) with ``run:ID:feed:state``,
``:relay`` and ``:done`` (its relay's cursor, lease and entries said), ``feeds:pending``
(zset: runs a relay has not caught up with; see ``run_feed``), ``home:viewers`` (zset: who
opened their App Home lately),
``joblock:NAME`` (a periodic job's lease, e.g. retention), ``job:NAME:done`` (when it last
completed), ``manlock:[S:]ENV`` and ``manlocks`` (environments locked by a person, see
``manual_locks``).

A key naming an environment names its service first (docs/services.md 2.4): ``lock:S:ENV``,
``where:S:ENV`` …; the legacy service (service None) keeps the shapes above byte for byte,
and index members are ``ENV`` (legacy) or ``S:ENV`` (``scope_member``, ``split_member``).

Every byte deckhand writes passes one door (:class:`RedactingRedis`): each command's
arguments after its key are redacted (JSON stays valid JSON) on the client and on every
pipeline it hands out, so a secret in a failure reason, an audit entry, a host journal or a
plan never lands in Redis, whichever module or call site wrote it.

A create writes its record and every companion (indexes, ``latest``) in one MULTI under
WATCH on the record's key, so either all of it lands or none; a create that finds its id
taken retries under a fresh id from ``RedisBase.ids`` (see ``RedisBase.create_unique``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import redis
from pydantic import BaseModel
from redis.client import Pipeline

from agents.errors import NotFound, StoreError, StoreUnavailable
from agents.ids import new_id
from agents.store.connect import (
    promotable_replicas,
    sentinel_failure,
    untrusted_certificate,
)
from tools.redact import redact as env_redact
from tools.redact import redact_text

CAS_RETRIES = 100
CREATE_RETRIES = 10
"""Fresh ids tried before a create gives up (one retry is already a once-in-ages event)."""
REPLICA_WAIT = 30.0
"""Seconds a mutating start waits on, past its first WAIT, for a replica to confirm its
record before it fails (DECKHAND_REPLICA_WAIT): a failover's promoted primary may need a
few seconds before its replica has synced."""
REPLICA_CHECK_EVERY = 30.0
EMBEDDED = "in-process fakeredis"
GROUP = "workers"
T = TypeVar("T")
log = logging.getLogger("deckhand.store")
M = TypeVar("M", bound=BaseModel)
Write = Callable[[Pipeline], Any]
"""A command queued in a transaction (e.g. a run's XADD onto the queue). A write with a
``prepare(pipe, state)`` method reads under WATCH first (an audit entry reads the chain's
head): queue writes with ``RedisBase.queue_writes``, which calls it."""
IdFactory = Callable[[str], str]
"""Makes a fresh id for a kind of record (``run``, ``plan``, ``sch``)."""


UNSCRUBBED = frozenset({"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "SCRIPT", "FCALL", "FUNCTION",
                        "MGET", "EXISTS", "WATCH"})
"""Commands whose arguments are code, not data (deckhand's store sends none of them), or
only key names read (an MGET of every ``where`` key is 600 names: nothing to redact)."""


def scrub_args(redact: Callable[[str], str], args: tuple[Any, ...]) -> tuple[Any, ...]:
    """A command's arguments with everything after its key redacted (text and UTF-8 bytes;
    other bytes and numbers as they are)."""
    if len(args) < 3 or str(args[0]).upper() in UNSCRUBBED:
        return args
    return (*args[:2], *(_scrub(redact, a) for a in args[2:]))


def _scrub(redact: Callable[[str], str], value: Any) -> Any:
    if isinstance(value, str):
        return redact_text(redact, value)
    if isinstance(value, bytes):
        try:
            text = value.decode()
        except UnicodeDecodeError:
            return value
        clean = redact_text(redact, text)
        return value if clean is text else clean.encode()
    return value


class RedactingPipeline(Pipeline):
    """A pipeline whose commands pass the redactor (immediate and queued alike)."""

    redact: Callable[[str], str] = staticmethod(env_redact)

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        return super().execute_command(  # type: ignore[no-untyped-call]
            *scrub_args(self.redact, args), **kwargs)


class RedactingRedis(redis.Redis):
    """The store's only client: the caller's connection pool (plain, TLS, Sentinel or
    fakeredis), with every command's data redacted before it is sent."""

    def __init__(self, client: redis.Redis, redact: Callable[[str], str]):
        super().__init__(connection_pool=client.connection_pool)
        self.redact = redact

    def execute_command(self, *args: Any, **options: Any) -> Any:
        return super().execute_command(  # type: ignore[no-untyped-call]
            *scrub_args(self.redact, args), **options)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Pipeline:
        pipe = RedactingPipeline(self.connection_pool, self.response_callbacks, transaction,
                                 shard_hint)
        pipe.redact = self.redact
        return pipe


class Keys:
    """Every Redis key name deckhand uses, in one place."""

    def __init__(self, prefix: str):
        self.prefix = prefix

    def __call__(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    def plan(self, plan_id: str, version: int) -> str:
        return self("plan", plan_id, f"v{version}")

    def plan_latest(self, plan_id: str) -> str:
        return self("plan", plan_id, "latest")

    def run(self, run_id: str) -> str:
        return self("run", run_id)

    def runs(self) -> str:
        return self("runs")

    def run_ids(self) -> str:
        return self("runs", "ids")

    def runs_open(self) -> str:
        """The runs that have not ended (by creation time): what approvals, expiry, the
        reconciler and the Home look through, however long the history behind them."""
        return self("runs", "open")

    def runs_open_complete(self) -> str:
        """Set once runs stored before the open index existed have been added to it."""
        return self("runs", "open", "complete")

    def run_audit(self, run_id: str) -> str:
        return self("run", run_id, "audit")

    def run_hosts(self, run_id: str) -> str:
        """The run's host journal: host results newer than its record."""
        return self("run", run_id, "hosts")

    def replication_probe(self) -> str:
        return self("replication", "probe")

    def owner(self, run_id: str) -> str:
        return self("run", run_id, "owner")

    def cancel(self, run_id: str) -> str:
        return self("run", run_id, "cancel")

    def pause(self, run_id: str) -> str:
        return self("run", run_id, "pause")
    def judgments(self, run_id: str) -> str:
        """A run's go/no-go decisions (hash: ``STEP/BATCH`` → the Decision as JSON)."""
        return self("run", run_id, "judgments")

    def run_feed(self, run_id: str) -> str:
        """What the run has to say (stream; ``agents.store.run_feed``)."""
        return self("run", run_id, "feed")

    def run_feed_state(self, run_id: str) -> str:
        """The relay's cursor in the run's feed and what its thread remembers (hash)."""
        return self("run", run_id, "feed", "state")

    def run_feed_relay(self, run_id: str) -> str:
        """Which relay is saying the run's feed (a lease)."""
        return self("run", run_id, "feed", "relay")

    def run_feed_done(self, run_id: str) -> str:
        """Keys of the feed entries already said (set)."""
        return self("run", run_id, "feed", "done")

    def home_viewers(self) -> str:
        """Who opened their App Home lately (zset, by when), for every replica."""
        return self("home", "viewers")

    def feeds_pending(self) -> str:
        """Runs whose feed a relay has not caught up with (zset, by last append)."""
        return self("feeds", "pending")

    def lock(self, service: str | None, environment: str) -> str:
        """The lock on one service's environment: ``lock:ENV`` for the legacy service."""
        return self("lock", *_scoped(service, environment))

    def locks(self) -> str:
        """The environments whose lock may be held (members: ``scope_member``)."""
        return self("locks")

    def lock_queue(self, service: str | None, environment: str) -> str:
        return self("lockq", *_scoped(service, environment))

    def host_lock(self, host: str) -> str:
        """The lock on one host several services share (``ADDRESS:PORT`` or ``local:NAME``)."""
        return self("hostlock", host)

    def host_locks(self) -> str:
        """The hosts whose lock may be held (set)."""
        return self("hostlocks")

    def host_lock_queue(self, host: str) -> str:
        """Runs waiting for a host's lock (list, first come first served)."""
        return self("hostlockq", host)

    def queue(self) -> str:
        return self("queue")

    def audit(self) -> str:
        return self("audit")

    def audit_chain(self) -> str:
        """The audit stream's hash chain: genesis, head, trimmed head (``chain``)."""
        return self("audit", "chain")

    def audit_verified(self) -> str:
        """Where the last successful verify left off, signed (``checkpoints.Resume``)."""
        return self("audit", "verified")

    def dedupe(self, key: str) -> str:
        return self("dedupe", key)

    def approved_by(self, service: str | None, environment: str, user: str) -> str:
        """When ``user`` approved runs of ``environment`` lately (``policy.limits``)."""
        return self("limits", *_scoped(service, environment), user)

    def schedule(self, schedule_id: str) -> str:
        return self("schedule", schedule_id)

    def schedules(self) -> str:
        return self("schedules")

    def schedules_version(self) -> str:
        return self("schedules", "version")

    def history(self, service: str | None, environment: str) -> str:
        """Deploys to an environment, scored by when they finished."""
        return self("history", "env", *_scoped(service, environment))

    def history_facts(self, service: str | None, environment: str) -> str:
        """Beside ``history``: each deploy's few fields the delivery figures read
        (agents.history.facts), scored the same way."""
        return self("history", "facts", *_scoped(service, environment))

    def history_environments(self) -> str:
        """The environments deployed to (members: ``scope_member``)."""
        return self("history", "envs")

    def history_recorded(self, run_id: str) -> str:
        return self("history", "done", run_id)

    def deployed(self, service: str | None, environment: str) -> str:
        """An environment's folded state (which version each host serves)."""
        return self("where", *_scoped(service, environment))

    def runs_of(self, service: str) -> str:
        """One service's runs (zset by creation); the legacy service's are the rest."""
        return self("runs", "svc", service)

    def runs_of_complete(self) -> str:
        """Set once runs stored before ``runs_of`` existed have been added to it."""
        return self("runs", "svc", "complete")

    def schedule_claim(self, schedule_id: str, kind: str, fire_time_iso: str) -> str:
        return self("schedule", schedule_id, kind, fire_time_iso)

    def schedules_open(self) -> str:
        """Occurrences claimed and not yet settled (``ID ISO``), scored by fire time."""
        return self("schedules", "open")

    def proposal(self, plan_hash: str, requester: str) -> str:
        return self("proposal", plan_hash, requester)

    def ask(self, ask_id: str) -> str:
        """A request waiting for its sender to choose a service (``asks``, with a TTL)."""
        return self("ask", ask_id)

    def job_lock(self, name: str) -> str:
        return self("joblock", name)

    def job_done(self, name: str) -> str:
        return self("job", name, "done")

    def job_note(self, name: str) -> str:
        """What job ``name`` last left for others to read (retention: where runs went)."""
        return self("job", name, "note")

    def manual_lock(self, service: str | None, environment: str) -> str:
        """An environment locked by a person (``manual_locks``): service first, if named."""
        return self("manlock", *_scoped(service, environment))

    def manual_locks(self) -> str:
        """Which (service, environment) may have a lock by hand (members: ``scope_member``)."""
        return self("manlocks")

    def run_companions(self, run_id: str) -> list[str]:
        """Every key named after one run besides its record (``run:ID``). Retention deletes
        them with the run: a new per-run key is added here, and only here."""
        return [self.owner(run_id), self.cancel(run_id), self.pause(run_id),
                self.run_audit(run_id), self.history_recorded(run_id), self.run_hosts(run_id),
                self.judgments(run_id), self.run_feed(run_id), self.run_feed_state(run_id),
                self.run_feed_relay(run_id), self.run_feed_done(run_id)]


def _scoped(service: str | None, environment: str) -> tuple[str, ...]:
    """The key segments naming one service's environment: just ``ENV`` for the legacy
    service, so its keys keep their pre-services shapes byte for byte."""
    return (environment,) if service is None else (service, environment)


def scope_member(service: str | None, environment: str) -> str:
    """An index member (``locks``, ``history:envs``) naming a service's environment."""
    return ":".join(_scoped(service, environment))


def split_member(member: bytes | str) -> tuple[str | None, str]:
    """(service, environment) of an index member: ``ENV`` is the legacy service's, ``S:ENV``
    service S's (with services, environment names have no ``:``)."""
    name = text(member)
    service, colon, environment = name.partition(":")
    return (service, environment) if colon else (None, name)


def scope_label(service: str | None, environment: str) -> str:
    """How people read a service's environment: ``api/production``, or plain
    ``production`` for the legacy service (nothing visible changes in a one-service org)."""
    return environment if service is None else f"{service}/{environment}"


class RedisBase:
    """The connection every noun of the store shares: the client, ``Keys``, the clock, and
    the helpers every write goes through: ``errors()``, ``cas()`` and ``replicate()`` (WAIT)."""

    def __init__(self, client: redis.Redis, *, prefix: str = "dh",
                 clock: Callable[[], float] = time.time, where: str = "redis",
                 ids: IdFactory = new_id, redact: Callable[[str], str] = env_redact):
        # Any: redis-py types replies as bytes | str (it depends on decode_responses); this
        # store always uses bytes, and decodes at the few places it reads text.
        self.r: Any = RedactingRedis(client, redact)
        self.prefix = prefix
        self.keys = Keys(prefix)
        self.clock = clock
        self.where = where
        self.ids = ids
        self.replicate_timeout = 2.0
        self.replica_wait = REPLICA_WAIT
        self._replicas: tuple[float, int] | None = None

    def redact_with(self, redact: Callable[[str], str]) -> None:
        """Redact what is written with ``redact`` (the config's secrets too) from now on."""
        self.r.redact = redact

    @property
    def embedded(self) -> bool:
        """The in-process fakeredis: one process, no replicas, no INFO, nothing to wait for."""
        return self.where == EMBEDDED

    def k(self, *parts: str) -> str:
        """A key under this store's prefix (``Keys`` names the ones deckhand uses)."""
        return self.keys(*parts)

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """Translate redis-py's exceptions into ours at the border."""
        try:
            yield
        except redis.AuthenticationError as exc:
            raise StoreError(f"Redis at {self.where} refused the user and password in "
                             f"REDIS_URL ({exc}); nothing was changed — check them (an ACL "
                             f"user must be `on`)") from exc
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            if untrusted_certificate(exc):
                raise StoreUnavailable(
                    f"Redis at {self.where} presented a certificate that is not trusted "
                    f"({_reason(exc)}); nothing was changed — name the CA that signed it "
                    f"with ?ssl_ca_certs=/path/ca.pem in REDIS_URL") from exc
            line = sentinel_failure(exc, self.where)
            if line is not None:
                raise StoreUnavailable(line) from exc
            raise StoreUnavailable(f"cannot reach Redis at {self.where} ({exc}); nothing was "
                                   f"changed — check REDIS_URL and that Redis is up") from exc
        except redis.RedisError as exc:
            raise StoreError(f"Redis refused the operation: {exc}") from exc

    def cas(self, keys: Sequence[str], attempt: Callable[[Pipeline], T], *, busy: str) -> T:
        """Run ``attempt`` under WATCH on ``keys``, again from the start if one changed.

        ``attempt`` reads through the pipeline (immediate mode until ``pipe.multi()``), then
        queues its writes and calls ``pipe.execute()``; EXEC fails if a watched key changed
        meanwhile, and the attempt is retried with fresh reads. ``busy`` names what was
        contended, for the error after ``CAS_RETRIES`` lost races.
        """
        with self.errors():
            for _ in range(CAS_RETRIES):
                with self.r.pipeline() as pipe:
                    try:
                        pipe.watch(*keys)
                        return attempt(pipe)
                    except redis.WatchError:
                        continue
        raise StoreError(f"{busy} is changing too fast; try again")

    def create_unique(self, kind: str, first_id: str, keys: Callable[[str], Sequence[str]],
                      attempt: Callable[[Pipeline, str], bool]) -> str:
        """Create a record under ``first_id``, or under a fresh id if that one is taken.

        ``attempt(pipe, id)`` runs under WATCH on ``keys(id)``: it returns False, writing
        nothing, when the id is taken, else queues the record and all its companions in one
        MULTI and executes. The caller never sees a collision; it gets the id used.
        """
        candidate = first_id
        for _ in range(CREATE_RETRIES):
            def once(pipe: Pipeline, chosen: str = candidate) -> bool:
                return attempt(pipe, chosen)

            if self.cas(keys(candidate), once, busy=f"{kind} {candidate}"):
                return candidate
            candidate = self.ids(kind)
        raise StoreError(f"no free {kind} id after {CREATE_RETRIES} tries; nothing was written")

    def update_record(self, key: str, model: type[M],
                      change: Callable[[M], Sequence[Write] | None], *, missing: str) -> M:
        """Read the JSON record at ``key``, let ``change`` edit it, write it back atomically.

        ``change`` may return more writes for the same transaction; NotFound(``missing``)
        if there is no record. Retried with a fresh read whenever ``key`` changed meanwhile.
        """
        def attempt(pipe: Pipeline) -> M:
            raw = pipe.get(key)
            if raw is None:
                raise NotFound(missing)
            record = model.model_validate_json(raw)
            extras = change(record) or ()
            self.queue_writes(pipe, [lambda p: p.set(key, stored_json(record)), *extras])
            pipe.execute()
            return record

        return self.cas([key], attempt, busy=key.removeprefix(self.prefix + ":"))

    @staticmethod
    def queue_writes(pipe: Pipeline, writes: Sequence[Write]) -> None:
        """Let each write read what it needs under WATCH (``prepare``), then open the MULTI
        and queue them all, in order; the caller executes."""
        state: dict[str, Any] = {}
        for write in writes:
            prepare = getattr(write, "prepare", None)
            if prepare is not None:
                prepare(pipe, state)
        pipe.multi()
        for write in writes:
            write(pipe)

    def scrubbed(self, value: str) -> str:
        """``value`` as the door would write it (for what must be hashed as stored)."""
        return str(_scrub(self.r.redact, value))

    def replicate(self, what: str) -> bool:
        """Wait until a replica has everything written so far (True), if there are replicas.

        False when none acknowledged within ``replicate_timeout``: the write is on the
        primary only, and a failover now could lose it.
        """
        if self.embedded or self.replica_count() == 0:
            return True
        # WAIT covers the writes of the connection it is sent on, and the pool may hand out
        # another one than the writer's: a write first, on the same connection, puts every
        # write acknowledged so far before the offset WAIT waits for.
        with self.errors(), self.r.pipeline(transaction=False) as pipe:
            pipe.incr(self.keys.replication_probe())
            pipe.wait(1, int(self.replicate_timeout * 1000))
            acked = int(pipe.execute()[-1])
        if acked < 1:
            log.warning("%s is not replicated yet (no replica answered within %.1f s)",
                        what, self.replicate_timeout)
        return acked >= 1

    def replica_count(self, *, fresh: bool = False) -> int:
        """Replicas a failover could promote, asked at most every ``REPLICA_CHECK_EVERY``
        seconds unless ``fresh`` (0 for the embedded store): those connected to the
        primary or, through Sentinel, any Sentinel could promote — a replica whose link to
        the primary just dropped is no longer connected, yet would be promoted."""
        if self.embedded:
            return 0
        now = time.monotonic()
        if fresh or self._replicas is None or now - self._replicas[0] > REPLICA_CHECK_EVERY:
            with self.errors():
                count = max(int(self.r.info("replication").get("connected_slaves", 0)),
                            promotable_replicas(self.r))
            self._replicas = (now, count)
        return self._replicas[1]

    def commit(self, writes: Sequence[Write]) -> None:
        """Queued writes (e.g. audit entries taken earlier), in one MULTI: all or none, each
        audit entry linked to the chain's head as it is then (retried if another lands)."""
        def attempt(pipe: Any) -> None:
            self.queue_writes(pipe, writes)
            pipe.execute()

        self.cas([self.keys.audit_chain()], attempt, busy="the audit stream")

    def ping(self) -> bool:
        with self.errors():
            return bool(self.r.ping())

    def ping_primary(self) -> bool:
        """``ping``, and through Sentinel also that a sentinel names the primary now. With
        every sentinel down the primary still answers on the connections this process
        holds, so ``ping`` passes — yet no new connection can open (a second thread's write,
        a reconnect after a blip) and no failover can be followed: not a store a draining
        worker's run can count on. StoreUnavailable saying so."""
        self.ping()
        pool = self.r.connection_pool
        manager, service = getattr(pool, "sentinel_manager", None), getattr(
            pool, "service_name", "")
        if manager is None:
            return True
        try:
            manager.discover_master(service)
        except redis.RedisError as exc:
            raise StoreUnavailable(
                f"no Redis Sentinel names a primary for service {service!r} ({self.where}: "
                f"sentinels down or unreachable): connections open now still answer, but "
                f"none can be opened and no failover followed") from exc
        return True



class Part:
    """One noun of the store (runs, plans, queue …) over the shared connection ``db``: it
    reads and writes only through ``db``'s client, keys, ``errors()`` and ``cas()``, so
    every noun sees one clock, one key namer and one WAIT."""

    def __init__(self, db: RedisBase) -> None:
        self.db = db

    @property
    def r(self) -> Any:
        return self.db.r

    @property
    def keys(self) -> Keys:
        return self.db.keys

    @property
    def prefix(self) -> str:
        return self.db.prefix

    def clock(self) -> float:
        return self.db.clock()

    def errors(self) -> contextlib.AbstractContextManager[None]:
        return self.db.errors()

    def cas(self, keys: Sequence[str], attempt: Callable[[Pipeline], T], *, busy: str) -> T:
        return self.db.cas(keys, attempt, busy=busy)

    def replicate(self, what: str) -> bool:
        return self.db.replicate(what)

    def replica_count(self, *, fresh: bool = False) -> int:
        return self.db.replica_count(fresh=fresh)

    @property
    def replicate_timeout(self) -> float:
        return self.db.replicate_timeout

    @property
    def replica_wait(self) -> float:
        return self.db.replica_wait

    def commit(self, writes: Sequence[Write]) -> None:
        self.db.commit(writes)

    def queue_writes(self, pipe: Pipeline, writes: Sequence[Write]) -> None:
        self.db.queue_writes(pipe, writes)

    def scrubbed(self, value: str) -> str:
        return self.db.scrubbed(value)

    @property
    def where(self) -> str:
        return self.db.where

    @property
    def embedded(self) -> bool:
        return self.db.embedded

    def ids(self, kind: str) -> str:
        return self.db.ids(kind)

    def create_unique(self, kind: str, first_id: str, keys: Callable[[str], Sequence[str]],
                      attempt: Callable[[Pipeline, str], bool]) -> str:
        return self.db.create_unique(kind, first_id, keys, attempt)

    def update_record(self, key: str, model: type[M],
                      change: Callable[[M], Sequence[Write] | None], *, missing: str) -> M:
        return self.db.update_record(key, model, change, missing=missing)
def stored_json(record: BaseModel) -> str:
    """A record as the store writes it (a run compactly: ``Run.record_json``)."""
    compact = getattr(record, "record_json", None)
    return str(compact()) if callable(compact) else record.model_dump_json()


def _reason(exc: BaseException) -> str:
    """The verification failure alone (``self-signed certificate in certificate chain``)."""
    message = str(exc)
    return message.rpartition("certificate verify failed: ")[2].split(" (_ssl")[0] or message


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
