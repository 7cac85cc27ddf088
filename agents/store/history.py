"""Deployment history in Redis: per (service, environment) a time-ordered index of deploys
and the folded current state (``agents.history.deploys.Where``), written together, once per run."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import TypeAdapter
from redis.client import Pipeline

from agents.history.deploys import PREVIOUS, Deploy, Where
from agents.history.facts import DeployFact, fact_member, read_facts
from agents.store._redis import Part, scope_member, split_member

HISTORY_READ = 500
"""Deploys read to answer "what did this host run before" and "which versions were here"."""
_DEPLOYS: TypeAdapter[list[Deploy]] = TypeAdapter(list[Deploy])
_WHERES: TypeAdapter[list[Where]] = TypeAdapter(list[Where])
KEEP_NEWEST = 50
"""Deploys per environment that history retention never trims, however old."""


class History(Part):
    """Deployment history per (service, environment), and what each host serves (where).
    ``service`` None is the legacy service (keys as before services)."""

    def record(self, service: str | None, run_id: str, deploys: list[Deploy]) -> bool:
        """Record what a finished run of ``service`` did; False if it was recorded already
        (idempotent)."""
        marker = self.keys.history_recorded(run_id)
        envs = sorted({d.environment for d in deploys})
        where_keys = [self.keys.deployed(service, env) for env in envs]

        def attempt(pipe: Pipeline) -> bool:
            if pipe.exists(marker):
                return False
            states = {env: self._read_where(pipe, service, env) for env in envs}
            resolved = [self._resolve(pipe, service, d) for d in deploys]
            for deploy in resolved:
                states[deploy.environment].apply(deploy)
            pipe.multi()
            pipe.set(marker, "1")
            for deploy in resolved:
                pipe.zadd(self.keys.history(service, deploy.environment),
                          {deploy.model_dump_json(): deploy.finished_at})
                pipe.zadd(self.keys.history_facts(service, deploy.environment),
                          {fact_member(deploy): deploy.finished_at})
            for env, state in states.items():
                pipe.set(self.keys.deployed(service, env), state.model_dump_json())
                pipe.sadd(self.keys.history_environments(), scope_member(service, env))
            pipe.execute()
            return True

        return self.cas([marker, *where_keys], attempt, busy=f"history of {run_id}")

    def current(self, service: str | None, environment: str) -> Where:
        with self.errors():
            return self._read_where(self.r, service, environment)

    def everywhere(self, service: str | None) -> list[Where]:
        """Every environment ``service`` has deployed to, by name (one MGET)."""
        return self.matrix([service])

    def matrix(self, services: Iterable[str | None] | None = None) -> list[Where]:
        """What is deployed in every (service, environment) deployed to — of ``services``
        only, if given — by service (the legacy one first), then environment: every
        ``where`` key in one MGET, however many services."""
        scopes = self.scopes()
        if services is not None:
            wanted = set(services)
            scopes = [scope for scope in scopes if scope[0] in wanted]
        with self.errors():
            raws = self.r.mget([self.keys.deployed(*scope) for scope in scopes]) if scopes else []
        found = iter(_WHERES.validate_json(b"[" + b",".join(r for r in raws if r) + b"]"))
        states = [next(found) if raw else Where(environment=env)  # parsed in one pass
                  for (_, env), raw in zip(scopes, raws, strict=True)]
        for state, (service, _) in zip(states, scopes, strict=True):
            state.service = service
        return states

    def environments(self, service: str | None) -> list[str]:
        """The environments ``service`` has deployed to, by name."""
        return [env for owner, env in self.scopes() if owner == service]

    def scopes(self) -> list[tuple[str | None, str]]:
        """Every (service, environment) deployed to: the legacy service's first, by name."""
        with self.errors():
            members = self.r.smembers(self.keys.history_environments())
        return sorted((split_member(m) for m in members),
                      key=lambda scope: (scope[0] is not None, scope[0] or "", scope[1]))

    def older_than(self, service: str | None, environment: str, cutoff: float, *,
                   skip: int = 0, limit: int = 500) -> list[tuple[bytes, Deploy]]:
        """Up to ``limit`` deploys to ``environment`` that finished before ``cutoff``, oldest
        first after the first ``skip``, as (member, deploy) — never one of its newest
        ``KEEP_NEWEST``, whatever their age: "previous" and "roll back to" read those."""
        key = self.keys.history(service, environment)
        with self.errors():
            trimmable = int(self.r.zcard(key)) - KEEP_NEWEST - skip
            if trimmable <= 0:
                return []
            raws = self.r.zrangebyscore(key, "-inf", f"({cutoff!r}", start=skip,
                                        num=min(limit, trimmable))
        return [(raw, Deploy.model_validate_json(raw)) for raw in raws]

    def forget(self, service: str | None, environment: str, members: list[bytes]) -> int:
        """Delete exactly these history entries (already exported); ``where`` is untouched."""
        if not members:
            return 0
        facts = [fact_member(Deploy.model_validate_json(m)) for m in members]
        with self.errors(), self.r.pipeline() as pipe:
            pipe.zrem(self.keys.history(service, environment), *members)
            pipe.zrem(self.keys.history_facts(service, environment), *facts)
            return int(pipe.execute()[0])

    def recent(self, service: str | None, environment: str, *, limit: int = 20) -> list[Deploy]:
        """The last ``limit`` deploys to ``service``'s ``environment``, newest first."""
        with self.errors():
            return self._history(self.r, service, environment, limit)

    def since(self, service: str | None, environment: str, since: float) -> list[Deploy]:
        """Every deploy to ``environment`` that finished at or after ``since``, oldest first:
        one range of the time-scored index, the whole window however many (DORA figures
        over a sample would be wrong for a busy team), parsed in one pass."""
        with self.errors():
            raws = self.r.zrangebyscore(self.keys.history(service, environment), repr(since),
                                        "+inf")
        return _DEPLOYS.validate_json(b"[" + b",".join(raws) + b"]") if raws else []

    def facts_since(self, service: str | None, environment: str,
                    since: float) -> list[DeployFact] | list[Deploy]:
        """What ``stats`` needs of every deploy since ``since``, from the small index; the
        deploys themselves when that index lacks some (history from before it existed)."""
        low = repr(since)
        with self.errors(), self.r.pipeline(transaction=False) as pipe:
            pipe.zcount(self.keys.history(service, environment), low, "+inf")
            pipe.zrangebyscore(self.keys.history_facts(service, environment), low, "+inf")
            count, facts = pipe.execute()
        if len(facts) != int(count):
            return self.since(service, environment, since)
        return read_facts(facts, environment)

    def versions(self, service: str | None, environment: str) -> list[str]:
        """Versions that were live in ``environment`` (newest first, each once)."""
        seen: dict[str, None] = {}
        for deploy in self.recent(service, environment, limit=HISTORY_READ):
            for version in deploy.hosts.values():
                if deploy.took_effect and version is not None:
                    seen.setdefault(version, None)
        return list(seen)

    # -- inside the transaction ------------------------------------------------------------

    def _read_where(self, client: Any, service: str | None, environment: str) -> Where:
        return _where(client.get(self.keys.deployed(service, environment)), service,
                      environment)

    def _history(self, client: Any, service: str | None, environment: str,
                 limit: int) -> list[Deploy]:
        raws = client.zrevrange(self.keys.history(service, environment), 0, max(limit, 1) - 1)
        return [Deploy.model_validate_json(raw) for raw in raws]

    def _resolve(self, pipe: Pipeline, service: str | None, deploy: Deploy) -> Deploy:
        """``deploy`` with ``previous`` replaced by the version each host ran before."""
        if PREVIOUS not in deploy.hosts.values():
            return deploy
        past = self._history(pipe, service, deploy.environment, HISTORY_READ)
        hosts = {h: _before_last_deploy(past, h) if v == PREVIOUS else v
                 for h, v in deploy.hosts.items()}
        return deploy.model_copy(update={"hosts": hosts})


def _where(raw: bytes | None, service: str | None, environment: str) -> Where:
    """The ``where`` record ``raw`` (or an empty one), named for the service it belongs to."""
    state = Where.model_validate_json(raw) if raw else Where(environment=environment)
    state.service = service
    return state


def _before_last_deploy(past: list[Deploy], host: str) -> str | None:
    """What ``host`` served before its last forward deploy (None if history does not say)."""
    timeline = [d.hosts[host] for d in reversed(past)
                if d.took_effect and host in d.hosts and not d.rollback_of_version]
    return timeline[-2] if len(timeline) >= 2 else None
