"""Each person's recent approvals per environment, counted for ``policy.limits``: in Redis,
so every replica counts the same approvals, and checked under WATCH in the approval's own
transaction, so two clicks at once cannot both be the one under the limit."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agents.errors import LimitReached
from agents.policy.limits import WINDOW, rate_problem
from agents.policy.rules import Policy
from agents.store._redis import Keys, Part, Write, text


class ApprovalCounts(Part):
    """Sorted sets ``limits:ENV:USER`` (``limits:S:ENV:USER`` for service S) of run id ->
    when that person approved it."""

    def recent(self, service: str | None, environment: str, user: str) -> list[float]:
        """When ``user`` approved ``service``'s ``environment`` runs within the last hour."""
        with self.errors():
            found = self.r.zrangebyscore(self.keys.approved_by(service, environment, user),
                                         f"({self.clock() - WINDOW}", "+inf", withscores=True)
        return [float(score) for _, score in found]

    def problem(self, policy: Policy, service: str | None, environments: Iterable[str], *,
                run_id: str, user: str) -> str | None:
        """Why one more approval by ``user`` (of ``run_id``) is over a per-hour limit now:
        what ``counted`` would refuse, read without writing (``policy explain``)."""
        for env, cap in _capped(policy, environments).items():
            owner, name = policy.foreign.get(env, (service, env))  # a shared host's: theirs
            with self.errors():
                seen = self.r.zrangebyscore(self.keys.approved_by(owner, name, user),
                                            f"({self.clock() - WINDOW}", "+inf", withscores=True)
            problem = rate_problem(env, cap or 0, [float(s) for m, s in seen
                                                   if text(m) != run_id], now=self.clock())
            if problem is not None:
                return problem
        return None

    def counted(self, policy: Policy, service: str | None, environments: Iterable[str], *,
                run_id: str, user: str) -> Write:
        """The write that counts ``user``'s approval of ``run_id`` (of ``service``'s
        ``environments``, and of other services' reached through a shared host, counted
        under that service's key); its ``prepare`` raises LimitReached, before anything is
        written, when it is over a limit."""
        capped = _capped(policy, environments)
        scopes = {env: policy.foreign.get(env, (service, env)) for env in capped}
        return _Count(self.keys, scopes, capped, run_id=run_id, user=user, now=self.clock())


def _capped(policy: Policy, environments: Iterable[str]) -> dict[str, int | None]:
    """Each of ``environments`` with a per-hour limit, and that limit."""
    return {env: policy.limits[env].runs_per_hour for env in environments
            if env in policy.limits and policy.limits[env].runs_per_hour is not None}


class _Count:
    """One approval counted against each capped environment (a ``Write`` with prepare)."""

    def __init__(self, keys: Keys, scopes: dict[str, tuple[str | None, str]],
                 capped: dict[str, int | None], *, run_id: str, user: str, now: float):
        self.keys, self.scopes, self.capped = keys, scopes, capped
        self.run_id, self.user, self.now = run_id, user, now

    def prepare(self, pipe: Any, state: dict[str, Any]) -> None:
        for env, cap in self.capped.items():
            key = self.keys.approved_by(*self.scopes[env], self.user)
            pipe.watch(key)
            seen = pipe.zrangebyscore(key, f"({self.now - WINDOW}", "+inf", withscores=True)
            problem = rate_problem(env, cap or 0, [float(s) for m, s in seen
                                                   if text(m) != self.run_id], now=self.now)
            if problem is not None:
                raise LimitReached(problem)

    def __call__(self, pipe: Any) -> None:
        for env in self.capped:
            key = self.keys.approved_by(*self.scopes[env], self.user)
            pipe.zadd(key, {self.run_id: self.now})
            pipe.zremrangebyscore(key, "-inf", self.now - WINDOW)
            pipe.expire(key, int(WINDOW) + 60)
