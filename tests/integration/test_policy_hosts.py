"""Issue 29 items 2-4: a host never escapes the strictest rule that covers it, break-glass
lifts a freeze and nothing else, and a typo or an emptied list never opens an environment.

Hosts are real sshd processes; runs are stored in a real Redis and executed by a real
worker; each test asserts on the marker files on the hosts and on what was stored.
"""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from agents.config import Config, load_config
from agents.engine.worker import Worker, WorkerOptions
from agents.errors import ApprovalRefused, BreakGlassRefused, FreezeRefused, PlanInvalid
from agents.policy.eligibility import eligibility
from agents.run.record import Run, RunStatus
from agents.services import Services, build_services
from agents.store import Store
from bot.cli import main
from tests.fixtures.sshd import SSHFleet
from tools.errors import ConfigError

FRIDAY_EVENING = datetime(2026, 11, 27, 19, tzinfo=UTC).timestamp()
TUESDAY = datetime(2026, 11, 24, 12, tzinfo=UTC).timestamp()

TOOLS = {
    "deploy": {"description": "put a version on every host of an environment",
               "command": "mkdir -p {host.dir} && echo {version} > {host.dir}/version",
               "target": "environment", "mutates": True, "rollback": "undo",
               "params": {"version": {"pattern": r"^v\d+\.\d+\.\d+$"}}},
    "undo": {"description": "undo on every changed host of an environment",
             "command": "rm -f {host.dir}/version", "target": "environment", "mutates": True},
}
PLAYBOOKS = [
    {"name": f"to-{env}", "match": [f"^{env} (?P<version>v\\S+)$"], "goal": f"{env} {{version}}",
     "steps": [{"id": "ship", "tool": "deploy",
                "params": {"environment": env, "version": "{version}"}}],
     "rollback": [{"id": "undo", "tool": "undo", "params": {"environment": env}}]}
    for env in ("staging", "production", "prod-eu")]
POLICY: dict[str, Any] = {
    "environments": {
        "staging": {"approvers": {"users": ["sam", "alice", "bob"]}},
        "production": {"approvers": {"users": ["alice", "bob"]}, "min_approvals": 2,
                       "self_approval": False, "confirm": True},
    },
    "break_glass": {"users": ["ic1", "ic2", "ic3"]},
}


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def write(tmp_path: Path, fleet: SSHFleet, policy: dict[str, Any] | None = None) -> Path:
    """staging: staging-1 and prod-1; production: prod-1, prod-2; prod-eu: prod-1 (no
    policy entry) — each host a real sshd with its own marker directory."""
    hosts = {n: fleet.inventory_host(n, vars={"dir": str(tmp_path / "hosts" / n)})
             for n in ("staging-1", "prod-1", "prod-2")}
    doc = {"tools": TOOLS, "playbooks": PLAYBOOKS, "policy": policy or POLICY,
           "inventory": {"known_hosts": str(fleet.known_hosts), "hosts": hosts,
                         "environments": {"staging": {"hosts": ["staging-1", "prod-1"]},
                                          "production": {"hosts": ["prod-1", "prod-2"]},
                                          "prod-eu": {"hosts": ["prod-1"]}}}}
    path = tmp_path / "deckhand.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def on_redis(config: Config, redis_url: str, now: float) -> tuple[Store, Services]:
    clock = Clock(now)
    store = Store.connect(redis_url, clock=clock)
    store.r.flushdb()
    services = build_services(config, store=store)
    services.clock = clock
    return store, services


def request(services: Services, text: str, *, by: str, glass: str | None = None) -> Run:
    plan = services.make_plan(text, requested_by=by, face="cli", break_glass=glass)
    services.store.plans.save(plan)
    return services.store.runs.create(Run.for_plan(plan, services.targets(plan),
                                                   break_glass=glass))


def approve(services: Services, run: Run, user: str) -> Run:
    return services.store.runs.approve(run.id, face="cli", user=user, plan_version=run.plan_version,
                                       plan_hash=run.plan_hash, policy=services.config.policy)


def markers(tmp_path: Path) -> dict[str, str]:
    return {h: (tmp_path / "hosts" / h / "version").read_text().strip()
            for h in ("staging-1", "prod-1", "prod-2")
            if (tmp_path / "hosts" / h / "version").exists()}


def work(services: Services, run: Run) -> Run | None:
    return Worker(services, services.store, name="w1",
                  options=WorkerOptions(block=0.1)).process(run.id)


# -- 29.2: a host escapes the strictest rule that covers it -----------------------------


def test_staging_deploy_touching_a_production_host_needs_production_approvers(
        tmp_path: Path, sshd_hosts: SSHFleet, redis_url: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, sshd_hosts)
    assert main(["check", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "host prod-1 is in staging, production, prod-eu" in out
    assert "production (policy.environments.production)" in out and \
        "prod-eu (policy.default)" in out
    store, services = on_redis(load_config(path), redis_url, TUESDAY)
    run = request(services, "staging v1.0.0", by="carol")
    assert run.environments == ["staging", "production", "prod-eu"]
    assert run.reach["production"] == ["prod-1"]
    with pytest.raises(ApprovalRefused, match="not allowed.*production: alice, bob"):
        approve(services, run, "sam")  # a staging-only approver
    assert approve(services, run, "alice").status is RunStatus.AWAITING_APPROVAL  # needs 2
    assert approve(services, run, "bob").status is RunStatus.QUEUED
    done = work(services, run)
    assert done is not None and done.status is RunStatus.SUCCEEDED
    assert markers(tmp_path) == {"staging-1": "v1.0.0", "prod-1": "v1.0.0"}
    assert [e.action for e in store.audit.entries(run_id=run.id)].count("approved") == 2
    store.r.flushdb()


def test_environment_without_a_policy_entry_gets_its_shared_hosts_rules(
        tmp_path: Path, sshd_hosts: SSHFleet, redis_url: str) -> None:
    store, services = on_redis(load_config(write(tmp_path, sshd_hosts)), redis_url, TUESDAY)
    run = request(services, "prod-eu v2.0.0", by="carol")
    answer = eligibility(run, services.config.policy)
    assert any(line.source == "policy.environments.production" and line.why == "touches prod-1"
               for line in answer.lines)
    for outsider in ("mallory", "sam"):
        with pytest.raises(ApprovalRefused, match="not allowed"):
            approve(services, run, outsider)
    assert markers(tmp_path) == {}
    approve(services, run, "alice")
    assert approve(services, run, "bob").status is RunStatus.QUEUED
    done = work(services, run)
    assert done is not None and done.status is RunStatus.SUCCEEDED
    assert markers(tmp_path) == {"prod-1": "v2.0.0"}
    store.r.flushdb()


def test_freeze_lock_and_promotion_of_the_shared_host_apply(
        tmp_path: Path, sshd_hosts: SSHFleet, redis_url: str) -> None:
    with pytest.raises(ConfigError, match="playbooks.0.steps.0: changes production without "
                                          "first passing staging"):
        load_config(write(tmp_path, sshd_hosts, {**POLICY, "promotion": ["staging",
                                                                         "production"]}))
    policy = {**POLICY, "freeze": [{"environments": ["production"], "reason": "weekend",
                                    "cron": "0 18 * * fri", "hours": 62}]}
    config = load_config(write(tmp_path, sshd_hosts, policy))
    store, services = on_redis(config, redis_url, FRIDAY_EVENING)
    for text in ("prod-eu v1.0.0", "staging v1.0.0"):  # both reach prod-1, production's
        with pytest.raises(FreezeRefused, match="production is frozen"):
            services.make_plan(text, requested_by="carol", face="cli")

    store, services = on_redis(config, redis_url, TUESDAY)  # the lock: production's
    run = request(services, "staging v1.0.0", by="carol")
    approve(services, run, "alice")
    approve(services, run, "bob")
    store.locks.acquire(None, ["production"], run_id="run-other", worker="w0", ttl=60)
    assert work(services, run) is None
    after = store.runs.get(run.id)
    assert after.status is RunStatus.FAILED and "run-other" in (after.reason or "")
    assert markers(tmp_path) == {}
    store.r.flushdb()


# -- 29.3: break-glass lifts a freeze only ----------------------------------------------


def test_break_glass_is_refused_when_nothing_is_frozen(
        tmp_path: Path, sshd_hosts: SSHFleet, redis_url: str) -> None:
    store, services = on_redis(load_config(write(tmp_path, sshd_hosts)), redis_url, TUESDAY)
    with pytest.raises(BreakGlassRefused, match="no freeze covers production"):
        services.make_plan("production v1.0.0", requested_by="ic1", face="cli", break_glass="x")
    assert store.runs.recent() == [] and markers(tmp_path) == {}
    store.r.flushdb()


def test_break_glass_needs_every_production_approval_plus_one_grant(
        tmp_path: Path, sshd_hosts: SSHFleet, redis_url: str) -> None:
    policy = {**POLICY, "freeze": [{"environments": ["production"], "reason": "weekend",
                                    "cron": "0 18 * * fri", "hours": 62}]}
    store, services = on_redis(load_config(write(tmp_path, sshd_hosts, policy)), redis_url,
                               FRIDAY_EVENING)
    run = request(services, "production v1.0.0", by="ic1", glass="checkout is down")
    assert approve(services, run, "ic2").status is RunStatus.AWAITING_APPROVAL
    with pytest.raises(ApprovalRefused, match="break-glass grant is given.*alice, bob"):
        approve(services, run, "ic3")  # the grant is given: the rest are production's
    with pytest.raises(ApprovalRefused, match="not allowed"):
        approve(services, run, "mallory")
    assert approve(services, run, "alice").status is RunStatus.AWAITING_APPROVAL
    assert markers(tmp_path) == {}
    done = approve(services, run, "bob")
    assert done.status is RunStatus.QUEUED
    assert [(a.user, a.break_glass) for a in done.approvals] == [
        ("ic2", True), ("alice", False), ("bob", False)]
    grants = [e.details.get("grant") for e in store.audit.entries(run_id=run.id)
              if e.action == "approved"]
    assert grants == ["break_glass", "environment", "environment"]
    finished = work(services, run)
    assert finished is not None and finished.status is RunStatus.SUCCEEDED
    assert markers(tmp_path) == {"prod-1": "v1.0.0", "prod-2": "v1.0.0"}
    store.r.flushdb()


@pytest.mark.parametrize(("granters", "expected"), [
    (["alice", "ic1"], [("alice", False), ("bob", False), ("ic1", True)]),
    (["alice"], [("alice", True)]),  # the only granter: her approval is the grant
])
def test_someone_both_approver_and_granter_counts_where_scarcer(
        tmp_path: Path, sshd_hosts: SSHFleet, redis_url: str, granters: list[str],
        expected: list[tuple[str, bool]]) -> None:
    policy = {**POLICY, "break_glass": {"users": granters},
              "freeze": [{"environments": ["production"], "reason": "weekend",
                          "cron": "0 18 * * fri", "hours": 62}]}
    store, services = on_redis(load_config(write(tmp_path, sshd_hosts, policy)), redis_url,
                               FRIDAY_EVENING)
    run = request(services, "production v1.0.0", by="carol", glass="outage")
    for user, _ in expected:
        run = approve(services, run, user)
    assert [(a.user, a.break_glass) for a in run.approvals] == expected
    queued = RunStatus.QUEUED if len(expected) == 3 else RunStatus.AWAITING_APPROVAL
    assert run.status is queued
    if len(expected) == 1:  # production's two approvals are still wanted, from bob and...
        with pytest.raises(ApprovalRefused, match="not allowed"):
            approve(services, run, "mallory")
        assert approve(services, run, "bob").status is RunStatus.AWAITING_APPROVAL
    store.r.flushdb()


def test_cli_break_glass_without_a_freeze_exits_with_the_reason(
        tmp_path: Path, sshd_hosts: SSHFleet, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, sshd_hosts)
    code = main(["run", "production v1.0.0", "--break-glass", "x", "--yes", "--user", "ic1",
                 "--config", str(path)])
    assert code == 2 and "no freeze covers" in capsys.readouterr().out
    assert markers(tmp_path) == {}


# -- 29.4: typos and emptied lists fail closed ------------------------------------------


BROKEN = """
policy:
  environments:
    staging: {approvers: {}}
    production: {approvers: {users: []}}
    prod-eu: {approvers: {anyone: true, users: [alice]}}
  default: {confirm: true}
  freeze:
    - {environments: [prodution], reason: typo, cron: "0 18 * * fri", hours: 62}
    - {environments: [Production], reason: case, start: 2026-12-24T00:00, end: 2026-12-27T00:00}
"""


def test_typos_and_empty_approvers_are_errors_at_their_line(
        tmp_path: Path, sshd_hosts: SSHFleet) -> None:
    path = write(tmp_path, sshd_hosts)
    doc = yaml.safe_load(path.read_text())
    del doc["policy"]
    path.write_text(yaml.safe_dump(doc, sort_keys=False) + textwrap.dedent(BROKEN))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    lines = path.read_text().splitlines()
    at = {text.strip(): f"{path}:{n}" for n, text in enumerate(lines, start=1)}
    found = {(p.where.split(" ")[0], p.message) for p in caught.value.problems}
    nobody = "names no approver: list users or groups, or write `anyone: true` if anyone " \
             "may approve"
    expected = {
        (at["staging: {approvers: {}}"], nobody),
        (at["production: {approvers: {users: []}}"], nobody),
        (at["prod-eu: {approvers: {anyone: true, users: [alice]}}"],
         "says `anyone: true` and also lists approvers: keep one"),
        (at["default: {confirm: true}"], nobody),
    }
    assert expected <= found
    typos = sorted(p.message.split(" (")[0] for p in caught.value.problems
                   if "unknown environment" in p.message)
    assert typos == ["unknown environment 'Production'", "unknown environment 'prodution'"]
    assert all(p.where.startswith(f"{path}:") for p in caught.value.problems)
    assert len(caught.value.problems) == 6


def test_an_empty_approver_list_built_in_code_allows_nobody(
        tmp_path: Path, sshd_hosts: SSHFleet, redis_url: str) -> None:
    """The runtime agrees with check: if an emptied list got past it, nobody approves."""
    config = load_config(write(tmp_path, sshd_hosts))
    config.policy.environments["staging"].approvers.users = []
    store, services = on_redis(config, redis_url, TUESDAY)
    with pytest.raises(PlanInvalid, match="nobody may approve this plan"):
        services.make_plan("staging v1.0.0", requested_by="carol", face="cli")
    store.r.flushdb()
