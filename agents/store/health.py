"""Is this Redis safe to keep deploy records in? Checked by ``deckhand check`` and at start.

Refused (errors): an eviction policy other than ``noeviction`` (under memory pressure Redis
would silently drop runs, locks, approvals and audit entries) and Redis Cluster (deckhand's
transactions span keys that Cluster would place on different shards). Warned: no AOF (a
restart loses what happened since the last snapshot), no replica (a lost disk loses all),
and settings that cannot be read (a managed Redis may disable CONFIG).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import redis

from agents.errors import StoreError
from agents.store._redis import Part


@dataclass(frozen=True)
class Finding:
    level: Literal["error", "warning"]
    message: str

    def __str__(self) -> str:
        return f"{self.level}: {self.message}"


class Health(Part):
    """Whether this Redis is safe to keep deckhand's state in."""

    def findings(self) -> list[Finding]:
        """What about this Redis could lose deckhand's records (empty when all is well)."""
        if self.embedded:
            return [Finding("warning", "no REDIS_URL: the embedded store lives only as long "
                                       "as this process")]
        try:
            with self.errors():
                info = {**self.r.info("persistence"), **self.r.info("replication"),
                        **self.r.info("cluster")}
                return [*_eviction(self.r), *_persistence(info), *_topology(info)]
        except StoreError as exc:  # failing to ask is itself the finding
            return [Finding("error", f"cannot inspect Redis at {self.where}: {exc}")]


def _eviction(client: Any) -> list[Finding]:
    try:
        policy = client.config_get("maxmemory-policy").get("maxmemory-policy")
    except redis.ResponseError:
        return [Finding("warning", "cannot read maxmemory-policy (CONFIG is disabled here); "
                                   "make sure it is noeviction")]
    policy = policy.decode() if isinstance(policy, bytes) else policy
    if policy != "noeviction":
        return [Finding("error", f"maxmemory-policy is {policy}: under memory pressure Redis "
                                 f"would evict runs, locks, approvals and audit entries. Set "
                                 f"maxmemory-policy noeviction")]
    return []


def _persistence(info: dict[str, Any]) -> list[Finding]:
    if int(info.get("aof_enabled", 0)) == 1:
        return []
    return [Finding("warning", "appendonly is off: a restart loses every change since the "
                               "last snapshot. Set appendonly yes (appendfsync everysec)")]


def _topology(info: dict[str, Any]) -> list[Finding]:
    if int(info.get("cluster_enabled", 0)) == 1:
        return [Finding("error", "Redis Cluster is not supported: a run's transaction spans "
                                 "keys Cluster would put on different shards. Use one primary "
                                 "with replicas and Sentinel")]
    if info.get("role") == "master" and int(info.get("connected_slaves", 0)) == 0:
        return [Finding("warning", "no replica is connected: losing this server loses every "
                                   "record. Add a replica (and Sentinel for failover)")]
    return []
