"""The ``--json`` documents of ``where``, ``history``, ``stats``, ``schedules list``,
``hosts`` and ``policy diff``: plain dicts with stable field names (documented in
docs/json.md; fields are only ever added), printed by ``bot.cli.run_views.print_json``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from agents.history.deploys import Deploy, Stats, Where
from agents.history.verify import Observed
from agents.policy.diff import PolicyDiff
from agents.store.manual_locks import ManualLock
from bot.schedule_commands import ScheduleView
from tools.hostcheck import HostCheck
from tools.inventory import Inventory


def where_json(states: list[Where], observed: dict[str, Observed] | None,
               held: Mapping[str, ManualLock] | None = None) -> list[dict[str, Any]]:
    """One object per environment, its hosts with what is recorded (and what they said),
    and its lock by hand (null when none)."""
    held = held or {}
    return [{"environment": s.environment, "version": s.version, "since": s.since,
             "by": s.by, "run_id": s.run_id,
             "hosts": [where_host(s, host, observed) for host in sorted(s.hosts)],
             "lock": lock_json(held.get(s.environment))}
            for s in states]


def lock_json(lock: ManualLock | None) -> dict[str, Any] | None:
    if lock is None:
        return None
    return {"holder": lock.holder, "reason": lock.reason, "since": lock.since,
            "until": lock.until, "via": lock.via}


def where_host(state: Where, host: str, observed: dict[str, Observed] | None
                ) -> dict[str, Any]:
    live = state.hosts[host]
    out: dict[str, Any] = {"host": host, "version": live.version, "since": live.since,
                           "run_id": live.run_id, "drift": host in state.drift}
    if observed is not None:
        seen = observed.get(host)
        out["observed"] = None if seen is None else {"version": seen.version,
                                                     "problem": seen.problem}
    return out


def history_json(deploys: list[Deploy]) -> list[dict[str, Any]]:
    """Deploys newest first, as recorded."""
    return [{"run_id": d.run_id, "environment": d.environment, "version": d.version,
             "outcome": d.outcome.value, "requested_by": d.requested_by,
             "approvers": list(d.approvers), "started_at": d.started_at,
             "finished_at": d.finished_at, "goal": d.goal, "hosts": dict(d.hosts),
             "rollback": d.rollback_of_version} for d in deploys]


def stats_json(figures: list[Stats]) -> list[dict[str, Any]]:
    """DORA figures per environment; durations in seconds, rates 0..1, None when unknown."""
    return [asdict(s) for s in figures]


def schedules_json(views: list[ScheduleView]) -> list[dict[str, Any]]:
    """Schedules with their next fire times (ISO 8601, UTC)."""
    return [{"id": v.schedule.id, "spec": v.schedule.spec, "cron": v.schedule.cron,
             "timezone": v.schedule.timezone, "request": v.schedule.request,
             "channel": v.schedule.channel, "created_by": v.schedule.created_by,
             "environments": list(v.schedule.environments), "auto": v.schedule.auto,
             "paused": v.schedule.paused, "fires": v.schedule.fires,
             "next_fires": [t.isoformat() for t in v.next_fires]} for v in views]


def hosts_json(inventory: Inventory) -> list[dict[str, Any]]:
    """The inventory's hosts, with the environments and groups that list them."""
    return [{"host": name, "connection": host.connection,
             "address": None if host.connection == "local" else host.address,
             "environments": [e for e, env in inventory.environments.items()
                              if name in env.hosts],
             "groups": [g for g, members in inventory.groups.items() if name in members]}
            for name, host in inventory.hosts.items()]


def host_checks_json(rows: list[HostCheck]) -> list[dict[str, Any]]:
    """``hosts check --json``: one object per host; ``ok`` is what the exit code sums up."""
    return [{**asdict(row), "ok": row.ok} for row in rows]


def policy_diff_json(diff: PolicyDiff) -> dict[str, Any]:
    """``policy diff --json``: each environment, its status and every field that changed."""
    return {"changed": diff.changed,
            "environments": [{"environment": e.environment, "status": e.status,
                              "changes": [{"field": c.field, "old": c.old, "new": c.new}
                                          for c in e.changes]}
                             for e in diff.environments]}
