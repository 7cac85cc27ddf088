"""Issue 32, blast-radius limits (``policy.limits``): enforced at approval, counted in the
real Redis (two stores — two `serve` replicas — agree), explained in the refusal and by
``deckhand policy explain``; an unknown environment under ``limits`` fails ``check``."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

from agents.config import load_config
from agents.errors import ApprovalRefused, LimitReached, PlanInvalid
from agents.run.record import Run, RunStatus
from agents.services import Services, build_services
from agents.store import Store
from bot.cli import main
from tests.integration.test_store import submit

CONFIG = """
inventory:
  hosts:
    web-1: {connection: local}
    web-2: {connection: local}
    web-3: {connection: local}
  environments:
    staging: {hosts: [web-1, web-2]}
    production: {hosts: [web-3]}
tools:
  deploy:
    description: put a version on every host of an environment
    command: "echo {version}"
    target: environment
    params: {version: {pattern: '^v\\d+\\.\\d+\\.\\d+$'}}
    mutates: true
    rollback: undo
  undo:
    description: undo
    command: "true"
    target: environment
    mutates: true
playbooks:
  - name: env
    match: ['^(?P<env>staging|production) (?P<version>v\\S+)$']
    goal: "{env} {version}"
    steps: [{id: ship, tool: deploy, params: {environment: "{env}", version: "{version}"}}]
    rollback: [{id: undo, tool: undo, params: {environment: "{env}"}}]
policy:
  environments:
    staging: {approvers: {users: [alice, bob]}}
    production: {approvers: {users: [alice, bob]}}
  limits:
    production: {runs_per_hour: 2}
    staging: {hosts_per_run: 1}
"""


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def write(tmp_path: Path, text: str = CONFIG) -> Path:
    path = tmp_path / "deckhand.yml"
    path.write_text(textwrap.dedent(text))
    return path


def waiting(services: Services, text: str, *, by: str = "carol") -> Run:
    return submit(services, services.make_plan(text, requested_by=by, face="cli"), by=by,
                  approvers=())


def approve(services: Services, run: Run, user: str) -> Run:
    return services.store.runs.approve(run.id, face="cli", user=user, plan_version=run.plan_version,
                                       plan_hash=run.plan_hash, policy=services.config.policy)


def test_runs_per_hour_counted_in_redis_across_replicas(
        tmp_path: Path, redis_url: str, client: redis.Redis) -> None:
    config = load_config(write(tmp_path))
    clock = Clock(datetime(2030, 5, 1, 13, 0, tzinfo=UTC).timestamp())
    one = build_services(config, store=Store.connect(redis_url, clock=clock))
    two = build_services(config, store=Store.connect(redis_url, clock=clock))  # a replica
    first, second = waiting(one, "production v1.0.0"), waiting(one, "production v1.0.1")
    approve(one, first, "alice")
    clock.now += 300  # 13:05
    approve(two, second, "alice")
    third = waiting(two, "production v1.0.2")
    clock.now += 600  # 13:15
    with pytest.raises(LimitReached) as refused:
        approve(one, third, "alice")  # the other replica counted the second approval
    assert str(refused.value) == (
        "limit: 2 production run(s) per hour per person (policy.limits.production."
        "runs_per_hour); you approved 2 in the last hour, next at 14:00 UTC")
    assert one.store.runs.get(third.id).approvals == []  # nothing written
    entry = one.store.audit.entries(run_id=third.id)[-1]
    assert (entry.action, entry.actor, entry.details["what"]) == ("refused", "alice", "approve")
    assert "policy.limits.production.runs_per_hour" in entry.details["rule"]
    assert client.zcard("dh:limits:production:alice") == 2
    assert approve(two, third, "bob").status is RunStatus.QUEUED  # per person
    fourth = waiting(one, "production v1.0.3")
    clock.now = datetime(2030, 5, 1, 14, 0, 1, tzinfo=UTC).timestamp()  # the first has aged
    assert approve(one, fourth, "alice").status is RunStatus.QUEUED


def test_hosts_per_run_and_explain(tmp_path: Path, store: Store, redis_url: str,
                                   monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    # planned before the limit was written: then the approval is refused, and explain says
    # that nobody can complete it (issue 41: not "still needed: 1" beside "refused")
    before = build_services(load_config(write(tmp_path, CONFIG.replace(
        "    staging: {hosts_per_run: 1}\n", ""))), store=store)
    wide = waiting(before, "staging v1.0.0")  # staging has two hosts; one allowed per run
    path = write(tmp_path)
    services = build_services(load_config(path), store=store)
    with pytest.raises(PlanInvalid, match=r"limit: 1 staging host\(s\) per run "
                       r"\(policy.limits.staging.hosts_per_run\); this run touches 2"):
        waiting(services, "staging v1.0.0")  # a new plan is refused before it is stored
    with pytest.raises(ApprovalRefused, match=r"^limit: 1 staging host\(s\) per run "
                       r"\(policy.limits.staging.hosts_per_run\); this run touches 2"):
        approve(services, wide, "alice")
    monkeypatch.setenv("REDIS_URL", redis_url)
    assert main(["policy", "explain", wide.id, "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "limit: 1 staging host(s) per run — policy.limits.staging (this run: 2 staging " \
           "host(s))" in out
    assert "refused: limit: 1 staging host(s) per run" in out
    assert "still needed: none can complete it" in out and "still needed: 1" not in out
    prod = waiting(services, "production v1.0.0")
    approve(services, prod, "alice")
    assert main(["policy", "explain", prod.id, "--user", "alice", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "limit: 2 production run(s) per hour per person — policy.limits.production" in out
    assert "alice approved 1 production run(s) in the last hour (limit 2)" in out


def test_unknown_environment_in_limits_fails_check(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, CONFIG.replace("    production: {runs_per_hour: 2}",
                                          "    prodution: {runs_per_hour: 2}"))
    assert main(["check", str(path)]) == 2
    out = capsys.readouterr().out
    assert "policy.limits.prodution: unknown environment 'prodution' (known: production, " \
           "staging)" in out
