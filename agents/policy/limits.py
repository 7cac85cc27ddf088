"""Blast-radius limits (``policy.limits``): how many runs of an environment one person may
approve per hour, and how many of its hosts one run may touch.

Checked when an approval is given. The hosts limit needs only the run; the runs limit
counts the approver's approvals in the store (``agents.store.limits``), so every replica
gives the same answer. The wording of each refusal lives here, for every face.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field

WINDOW = 3600.0
"""Seconds ``runs_per_hour`` counts over (a sliding hour)."""


class Limits(BaseModel):
    """One environment's limits; unset: no limit of that kind."""

    model_config = ConfigDict(extra="forbid")

    # strict: `true` or '3' is a mistake to name, never a 1 or a 3 read into it
    runs_per_hour: int | None = Field(default=None, ge=1, strict=True, description="runs of "
                                      "this environment one person may approve per hour")
    hosts_per_run: int | None = Field(default=None, ge=1, strict=True, description="hosts of "
                                      "this environment one run may touch")

    def describe(self, environment: str) -> str:
        parts = []
        if self.runs_per_hour is not None:
            parts.append(f"{self.runs_per_hour} {environment} run(s) per hour per person")
        if self.hosts_per_run is not None:
            parts.append(f"{self.hosts_per_run} {environment} host(s) per run")
        return "; ".join(parts) or "none"


def hosts_problem(limits: Mapping[str, Limits], reach: Mapping[str, Sequence[str]]) -> str | None:
    """Why a run touching ``reach`` (environment -> its hosts) is over a hosts limit."""
    for env, hosts in reach.items():
        cap = limits[env].hosts_per_run if env in limits else None
        if cap is not None and len(hosts) > cap:
            return (f"limit: {cap} {env} host(s) per run (policy.limits.{env}.hosts_per_run); "
                    f"this run touches {len(hosts)}. Narrow it (--limit) or split it")
    return None


def rate_problem(environment: str, cap: int, approved_at: Iterable[float], *,
                 now: float) -> str | None:
    """Why one more approval of an ``environment`` run is over ``cap`` per hour, given when
    this person approved such runs (any order; older ones are ignored)."""
    recent = sorted(t for t in approved_at if now - t < WINDOW)
    if len(recent) < cap:
        return None
    frees = datetime.fromtimestamp(recent[-cap] + WINDOW, UTC).strftime("%H:%M UTC")
    return (f"limit: {cap} {environment} run(s) per hour per person "
            f"(policy.limits.{environment}.runs_per_hour); you approved {len(recent)} in the "
            f"last hour, next at {frees}")


def explain(limits: Mapping[str, Limits], reach: Mapping[str, Sequence[str]],
            environments: Iterable[str]) -> list[str]:
    """The limit lines of ``deckhand policy explain`` for a run of ``environments``."""
    out = []
    for env in environments:
        if env in limits:
            hosts = len(reach.get(env, ()))
            out.append(f"limit: {limits[env].describe(env)} — policy.limits.{env} (this run: "
                       f"{hosts} {env} host(s))")
    return out
