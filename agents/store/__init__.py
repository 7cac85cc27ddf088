"""Durable state in Redis, handed out as nouns over one connection (rq-style): ``runs``,
``plans``, ``queue``, ``leases``, ``locks``, ``audit``, ``feed`` (the audit sink's cursor),
``dedupe``, ``schedules``, ``limits``, ``judgments``, ``history``, ``proposals``, ``asks``,
``trimming``,
``health``, ``manual_locks`` (environments locked by a person), ``run_feed`` (what a run
has to say, for its Slack thread) and ``viewers``. One
module per kind of record; all of them go through ``_redis``: one
connection with one key namer (``Keys``), one translation of redis-py's errors (``errors()``),
one compare-and-set loop (``cas()``) and one WAIT (``replicate()``), so double clicks, Slack
retries and several replicas can never start a run twice. With ``REDIS_URL`` unset the same
code runs on a server started for the state directory (``local_server``), or, where none can
run, on an in-process fakeredis.

``check.StoreCheck`` verifies (and repairs) the invariants the nouns keep together.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis

from agents.store._redis import CAS_RETRIES, EMBEDDED, GROUP, Keys, RedisBase, Write
from agents.store.asks import Ask, AskNotYours, Asks
from agents.store.audit import AuditEntry, AuditLog, Dedupe
from agents.store.connect import connect_client, safe_url
from agents.store.feed import AuditFeed
from agents.store.health import Finding, Health
from agents.store.history import History
from agents.store.judgments import Judgments
from agents.store.leases import Leases, LostOwnership
from agents.store.limits import ApprovalCounts
from agents.store.local_server import LocalServer, find_binary, in_process_reason
from agents.store.locks import LockInfo, Locks
from agents.store.manual_locks import ManualLock, ManualLocks
from agents.store.plans import Plans
from agents.store.proposals import Proposal, Proposals
from agents.store.queue import Queue
from agents.store.retention import Trimming
from agents.store.run_feed import FeedEntry, RelayState, RunFeed
from agents.store.runs import Change, Runs
from agents.store.schedules import ScheduleBook
from agents.store.viewers import HomeViewers


class Store(RedisBase):
    """The connection shared by every bot replica and worker, and its nouns. A caller
    that needs only the queue can be handed ``store.queue``."""

    def __init__(self, client: redis.Redis, **options: Any) -> None:
        super().__init__(client, **options)
        self.audit = AuditLog(self)
        self.feed = AuditFeed(self)
        self.dedupe = Dedupe(self)
        self.queue = Queue(self)
        self.limits = ApprovalCounts(self)
        self.manual_locks = ManualLocks(self, audit=self.audit)
        self.runs = Runs(self, audit=self.audit, queue=self.queue, limits=self.limits,
                         manual_locks=self.manual_locks)
        self.judgments = Judgments(self, runs=self.runs, audit=self.audit)
        self.plans = Plans(self)
        self.leases = Leases(self)
        self.locks = Locks(self)
        self.history = History(self)
        self.proposals = Proposals(self)
        self.asks = Asks(self)
        self.trimming = Trimming(self, queue=self.queue)
        self.health = Health(self)
        self.schedules = ScheduleBook(self)
        self.run_feed = RunFeed(self)
        self.viewers = HomeViewers(self)
        self.in_process_reason: str | None = None
        """Why this store is in-process without REDIS_URL (for the note), or None."""
        self.server: LocalServer | None = None
        """The state directory's server this store joined (it holds ``users.lock``)."""

    @classmethod
    def connect(cls, url: str | None, **options: Any) -> Store:
        """A store on ``url``, or on an in-process fakeredis when ``url`` is None."""
        if url is None:
            from tools.lean_imports import without_unused_extras

            with without_unused_extras():  # numpy alone is ~0.1 s of a command's start
                import fakeredis

            return cls(fakeredis.FakeRedis(), where=EMBEDDED, **options)
        return cls(connect_client(url), where=safe_url(url), **options)

    @classmethod
    def local(cls, state_dir: Path | None, *, mode: str = "server",
              binary: str | None = None, idle: float = 300.0, **options: Any) -> Store:
        """Without REDIS_URL: the server of ``state_dir`` (started if need be), else an
        in-process store that keeps why (``in_process_reason``). StoreError if a server
        should run but cannot start: history is never dropped silently."""
        found = find_binary(binary)
        reason = in_process_reason(state_dir, found, mode=mode)
        if reason is not None or state_dir is None or found is None:
            store = cls.connect(None, **options)
            store.in_process_reason = reason
            return store
        server = LocalServer(state_dir, found, idle=idle)
        store = cls(connect_client(server.open()), where=f"embedded server ({server.socket})",
                    **options)
        store.server = server
        return store


__all__ = ["CAS_RETRIES", "GROUP", "ApprovalCounts", "Ask", "AskNotYours", "Asks",
           "AuditEntry", "AuditFeed", "AuditLog",
           "Change", "Dedupe", "FeedEntry", "Finding", "Health", "History", "HomeViewers",
           "Judgments", "Keys", "Leases",
           "LockInfo", "Locks", "LostOwnership", "ManualLock", "ManualLocks",
           "Plans", "Proposal", "Proposals", "Queue",
           "RelayState", "RunFeed", "Runs", "ScheduleBook", "Store", "Trimming", "Write"]
