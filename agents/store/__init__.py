"""Durable state in Redis: plan versions, runs, leases, locks, the run queue, audit, dedupe,
schedules, history, and trimming finished runs (retention). One module per kind of record;
all of them go through ``_redis``: one key namer (``Keys``), one translation of redis-py's
errors (``errors()``) and one compare-and-set loop (``cas()``), so double clicks, Slack
retries and several replicas can never start a run twice. With ``REDIS_URL`` unset the
same code runs on an in-process fakeredis.

``Store`` combines the parts so callers hold one object; ``ScheduleBook`` wraps a store;
``check.StoreCheck`` verifies (and repairs) the invariants the parts keep together.
"""

from __future__ import annotations

from typing import Any

from agents.store._redis import CAS_RETRIES, EMBEDDED, GROUP, Keys, Write
from agents.store.audit import AuditEntry, AuditStore
from agents.store.connect import connect_client, safe_url
from agents.store.health import Finding, HealthStore
from agents.store.history import HistoryStore
from agents.store.leases import LeaseStore, LostOwnership
from agents.store.locks import LockInfo, LockStore
from agents.store.plans import PlanStore
from agents.store.proposals import Proposal, ProposalStore
from agents.store.queue import QueueStore
from agents.store.retention import RetentionStore
from agents.store.runs import Change


class Store(PlanStore, LeaseStore, RetentionStore, QueueStore, LockStore, AuditStore,
            HistoryStore, HealthStore, ProposalStore):
    """Redis-backed state shared by every bot replica and worker."""

    @classmethod
    def connect(cls, url: str | None, **options: Any) -> Store:
        """A store on ``url``, or on an in-process fakeredis when ``url`` is None."""
        if url is None:
            import fakeredis

            return cls(fakeredis.FakeRedis(), where=EMBEDDED, **options)
        return cls(connect_client(url), where=safe_url(url), **options)


__all__ = ["CAS_RETRIES", "GROUP", "AuditEntry", "Change", "Finding", "Keys", "LockInfo",
           "LostOwnership", "Proposal", "Store", "Write"]
