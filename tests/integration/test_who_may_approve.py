"""Issue 32, "who may approve, and why": one answer (``agents.policy.eligibility``) given alike by
the store's refusal (Slack, terminal), MCP's ``run_status``, the App Home and
``deckhand policy explain`` — for a plan with no environment, a local target, a host in
several environments, a freeze and break-glass; and never naming someone the rules exclude.
"""

from __future__ import annotations

import json
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agents.config import load_config
from agents.errors import ApprovalRefused
from agents.policy.eligibility import eligibility
from agents.run.record import Run, RunStatus
from agents.services import Services, build_services
from agents.store import Store
from bot.cli import main
from bot.mcp.desk import Desk
from bot.slack import blocks as bk
from tests.fixtures.slack_world import SlackWorld, actions_of, button

CONFIG = """
inventory:
  hosts:
    web-1: {{connection: local, vars: {{dir: "{{config_dir}}/web-1"}}}}
    web-2: {{connection: local, vars: {{dir: "{{config_dir}}/web-2"}}}}
    web-3: {{connection: local, vars: {{dir: "{{config_dir}}/web-3"}}}}
  environments:
    staging: {{hosts: [web-1, web-2]}}
    production: {{hosts: [web-2, web-3]}}
tools:
  deploy:
    description: put a version on every host of an environment
    command: "echo {{version}} > {{host.dir}}"
    target: environment
    params: {{version: {{pattern: '^v\\d+\\.\\d+\\.\\d+$'}}}}
    mutates: true
    rollback: undo
  undo:
    description: undo
    command: "true"
    target: environment
    mutates: true
  deploy_local:
    description: a change made on the deckhand machine
    command: "echo {{version}}"
    params: {{version: {{pattern: '^v\\d+\\.\\d+\\.\\d+$'}}}}
    mutates: true
    rollback: undo_local
  undo_local:
    description: undo a local change
    command: "true"
    mutates: true
playbooks:
  - name: env
    match: ['^(?P<env>staging|production) (?P<version>v\\S+)$']
    goal: "{{env}} {{version}}"
    steps: [{{id: ship, tool: deploy, params: {{environment: "{{env}}", version: "{{version}}"}}}}]
    rollback: [{{id: undo, tool: undo, params: {{environment: "{{env}}"}}}}]
  - name: local
    match: ['^local (?P<version>v\\S+)$']
    goal: "local {{version}}"
    steps: [{{id: ship, tool: deploy_local, params: {{version: "{{version}}"}}}}]
    rollback: [{{id: undo, tool: undo_local}}]
policy:
  environments:
    staging: {{approvers: {{users: [sam, alice, bob, carol]}}}}
    production:
      approvers: {{users: [alice, bob, carol]}}
      min_approvals: 2
      self_approval: false
  break_glass: {{users: [ic1]}}
  freeze:
    - {{environments: [production], reason: release week, start: "{start}", end: "{end}"}}
"""


def write(tmp_path: Path, *, frozen: bool) -> Path:
    """A config whose production freeze covers the real now (or lies in the past)."""
    now = datetime.now(UTC)
    start = now - timedelta(hours=1) if frozen else now - timedelta(days=9)
    end = now + timedelta(days=1) if frozen else now - timedelta(days=8)
    path = tmp_path / "deckhand.yml"
    path.write_text(textwrap.dedent(CONFIG).format(
        start=start.strftime("%Y-%m-%dT%H:%M:%S+00:00"),
        end=end.strftime("%Y-%m-%dT%H:%M:%S+00:00")))
    return path


def stored(services: Services, text: str, *, by: str, glass: str | None = None) -> Run:
    plan = services.make_plan(text, requested_by=by, face="cli", break_glass=glass)
    services.store.plans.save(plan)
    return services.store.runs.create(Run.for_plan(plan, services.targets(plan),
                                                   break_glass=glass))


def explained(run: Run, path: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert main(["policy", "explain", run.id, "--config", str(path)]) == 0
    return [line.strip() for line in capsys.readouterr().out.splitlines()[1:]]


def same_everywhere(services: Services, run: Run, path: Path,
                    capsys: pytest.CaptureFixture[str], *, outsider: str = "mallory") -> str:
    """Assert the store's refusal, MCP's run_status and `policy explain` give one answer;
    return it (who may approve)."""
    answer = eligibility(run, services.config.policy, now=time.time())
    with pytest.raises(ApprovalRefused) as refused:
        services.store.runs.approve(run.id, face="cli", user=outsider, plan_version=run.plan_version,
                                    plan_hash=run.plan_hash, policy=services.config.policy)
    assert str(refused.value) == answer.grant(outsider)
    status = Desk(services).run_status(run.id)
    assert (status.approvers, status.approval_rules) == (answer.who(), answer.explain())
    assert status.approvals_needed == answer.remaining
    assert explained(run, path, capsys) == answer.explain()
    return answer.who()


@pytest.fixture
def on_redis(redis_url: str, monkeypatch: pytest.MonkeyPatch, store: Store) -> Store:
    monkeypatch.setenv("REDIS_URL", redis_url)
    return store


def test_no_environment_local_and_shared_host_answer_alike(
        tmp_path: Path, on_redis: Store, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, frozen=False)
    services = build_services(load_config(path), store=on_redis)
    local = stored(services, "local v1.0.0", by="alice")
    who = same_everywhere(services, local, path, capsys)
    assert "(no environment)" in who and "bob" in who
    assert "alice" not in who  # she asked, and production's rule forbids self-approval
    status = Desk(services).run_status(local.id)
    assert status.approvals_needed == 2 and status.approvers != "anyone"  # was "anyone"

    shared = stored(services, "staging v1.0.0", by="alice")  # web-2 is production's too
    who = same_everywhere(services, shared, path, capsys)
    assert who == ("only someone allowed by every rule (staging: sam, bob, carol; production: "
                   "bob, carol) — by name: bob, carol")
    lines = explained(shared, path, capsys)
    assert "production: bob, carol (2 needed, not the requester) — policy.environments." \
           "production, touches web-2" in lines


def test_freeze_and_break_glass_answer_alike(
        tmp_path: Path, on_redis: Store, capsys: pytest.CaptureFixture[str]) -> None:
    open_path = write(tmp_path, frozen=False)
    before = build_services(load_config(open_path), store=on_redis)
    waiting = stored(before, "production v1.0.0", by="alice")  # planned before the freeze
    path = write(tmp_path, frozen=True)
    services = build_services(load_config(path), store=on_redis)
    same_everywhere(services, waiting, path, capsys, outsider="bob")  # even an approver
    assert any(line.startswith("freeze: production is frozen until")
               for line in explained(waiting, path, capsys))

    glass = stored(services, "production v1.0.0", by="alice", glass="checkout is down")
    same_everywhere(services, glass, path, capsys)
    lines = explained(glass, path, capsys)
    assert "break-glass: one grant from ic1 (needed), on top of the approvals above" in lines
    assert lines[-1] == ("still needed: 2 approval(s) from only someone allowed by every rule "
                         "(production: bob, carol; staging: sam, bob, carol) — by name: bob, "
                         "carol, and the break-glass grant from ic1")  # web-2 is staging's too
    assert main(["policy", "explain", glass.id, "--user", "ic1", "--config", str(path)]) == 0
    assert "ic1 may approve: yes (the break-glass grant)" in capsys.readouterr().out


def test_explain_a_plan_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, frozen=False)
    plan = tmp_path / "plan.yml"
    assert main(["plan", "staging v1.0.0", "--format", "yaml", "--config", str(path)]) == 0
    plan.write_text(capsys.readouterr().out)
    assert main(["policy", "explain", "--plan", str(plan), "--requested-by", "bob",
                 "--user", "bob", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "production: alice, carol (2 needed, not the requester)" in out
    assert "bob may approve: no: you asked for this deploy" in out


def test_slack_refusal_and_home_give_the_same_list(world: SlackWorld) -> None:
    """Signed requests: an outsider's Approve is refused naming who may, and the App Home
    of an approver says the same; the requester (no self-approval) is never named."""
    world.deploy("v2.3.1")  # by UALICE: staging and production
    value = button(world.plan_message(), "approve")
    run = world.store.runs.get(bk.parse_button_value(value)[0])
    who = eligibility(run, world.config.policy).who()
    assert "UALICE" not in who and "UBOB" in who
    world.click("approve", value, user="UMALLORY")
    refusal = world.standin.wait_for(lambda: world.told("UMALLORY"), what="the refusal")
    shown = refusal[0].replace("&lt;", "<").replace("&gt;", ">")
    assert f"Who can: {who}" in shown
    world.runtime.bot.home.interval = 0.05
    assert world.open_home("UBOB")[0] == 200
    home = world.standin.wait_for(
        lambda: [c for c in world.standin.of("views.publish")
                 if c.payload.get("user_id") == "UBOB"], what="UBOB's Home")[0]
    assert f"0/2 approvals, from {who}" in home.text_of_blocks()
    assert world.store.runs.get(run.id).status is RunStatus.AWAITING_APPROVAL


def test_slack_break_glass_without_a_freeze_is_refused(world: SlackWorld) -> None:
    """The same border as the terminal's: break-glass lifts a freeze, so with none it is
    refused and nothing is stored or posted for approval."""
    assert world.deploy("v2.3.1 --break-glass checkout is down")[0] == 200
    said = world.standin.wait_for(
        lambda: [c for c in [*world.standin.of("chat.postEphemeral"),
                             *world.standin.of("chat.postMessage")]
                 if "no freeze covers" in json.dumps(c.payload)]
        or [r for r in world.standin.responses if "no freeze covers" in json.dumps(r)],
        what="the refusal")
    assert said and world.store.runs.recent() == []
    assert not [c for c in world.standin.of("chat.postMessage") if actions_of(c)]
