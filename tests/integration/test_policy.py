"""Issue 12: one authority for what a plan touches and who may approve it.

Each test reproduces one finding through the real code paths (config loader, planner,
validation, store on a real Redis, the CLI), then the table-driven test walks every way a
tool can reach production against every kind of approver.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from agents.config import Config, load_config
from agents.errors import ApprovalRefused, PlanInvalid
from agents.plan.model import Plan
from agents.run.record import Run, RunStatus
from agents.services import Services, build_services
from agents.store import Store
from bot.cli import main
from bot.slack import blocks as bk
from bot.terminal.render import plan_table
from tests.fixtures.builders import make_plan
from tests.fixtures.slack_world import SlackWorld, button
from tools.errors import ConfigError

INVENTORY = """
inventory:
  hosts:
    web-1: {connection: local, vars: {dir: "{config_dir}/web-1"}}
    web-2: {connection: local, vars: {dir: "{config_dir}/web-2"}}
    web-3: {connection: local, vars: {dir: "{config_dir}/web-3"}}
    tool-1: {connection: local, vars: {dir: "{config_dir}/tool-1"}}
  environments:
    staging: {hosts: [web-1]}
    production: {hosts: [web-2, web-3]}
  groups:
    prod: [web-2, web-3]
    adhoc: [tool-1]
"""

TOOLS = """
tools:
  deploy:
    description: put a version on every host of an environment
    command: "mkdir -p {host.dir} && echo {version} > {host.dir}/version"
    target: environment
    params: {version: {pattern: '^v\\d+\\.\\d+\\.\\d+$'}}
    mutates: true
    rollback: undo
  deploy_default:
    description: deploy whose environment defaults to production
    command: "mkdir -p {host.dir} && echo {version} > {host.dir}/version"
    target: environment
    params:
      version: {pattern: '^v\\d+\\.\\d+\\.\\d+$'}
      environment: {enum: [staging, production], default: production}
    mutates: true
    rollback: undo
  deploy_group:
    description: deploy to the prod host group
    command: "mkdir -p {host.dir} && echo {version} > {host.dir}/version"
    target: "group:prod"
    params: {version: {pattern: '^v\\d+\\.\\d+\\.\\d+$'}}
    mutates: true
    rollback: undo_group
  deploy_local:
    description: a change made from the deckhand machine itself
    command: "echo {version} >> {vars.log}"
    params: {version: {pattern: '^v\\d+\\.\\d+\\.\\d+$'}}
    mutates: true
    rollback: undo_local
  undo:
    description: undo on every changed host of an environment
    command: "echo undo {host.name} >> {vars.log}"
    target: environment
    params:
      environment: {enum: [staging, production], default: production}
    mutates: true
  undo_group:
    description: undo on the prod group
    command: "echo undo {host.name} >> {vars.log}"
    target: "group:prod"
    mutates: true
  undo_local:
    description: undo a local change
    command: "echo undo-local >> {vars.log}"
    mutates: true
  status:
    description: read-only look at an environment
    command: "echo status {host.name}"
    target: environment
  backup_database:
    description: Snapshot the production database
    command: "echo backup >> {vars.log}"
vars:
  log: "{config_dir}/log.txt"
"""

STRICT = """
policy:
  promotion: [staging, production]
  environments:
    staging: {approvers: {anyone: true}}
    production:
      approvers: {users: [alice, bob]}
      min_approvals: 1
      self_approval: false
"""


def write_config(tmp_path: Path, *, policy: str = STRICT, tools: str = TOOLS,
                 extra: str = "") -> Path:
    path = tmp_path / "deckhand.yml"
    path.write_text("\n".join(textwrap.dedent(part) for part in
                              (INVENTORY, tools, policy, extra)))
    return path


def services_on(config: Config, store: Store) -> Services:
    return build_services(config, store=store)


def submit(services: Services, plan: Plan, *, by: str) -> Run:
    plan = plan.model_copy(update={"requested_by": by})
    services.check(plan)
    services.store.plans.save(plan)
    return services.store.runs.create(Run.for_plan(plan, services.targets(plan)))


def approve(services: Services, run: Run, user: str) -> Run:
    return services.store.runs.approve(run.id, face="cli", user=user, plan_version=run.plan_version,
                                       plan_hash=run.plan_hash, policy=services.config.policy)


def shown(services: Services, plan: Plan, run: Run) -> str:
    """What approvers see: the terminal table and the Slack plan message, as text."""
    console = Console(record=True, width=200)
    console.print(plan_table(plan, services.targets(plan)))
    slack = bk.plan_blocks(plan, run, services.config.policy)
    return console.export_text() + str(slack)


def staged(step: dict[str, Any], rollback: list[dict[str, Any]]) -> Plan:
    """Staging changed first, then ``step`` (which reaches production)."""
    return make_plan([{"id": "stage", "tool": "deploy",
                       "params": {"environment": "staging", "version": "v1.0.0"}},
                      {**step, "depends_on": ["stage"]}],
                     rollback=[*rollback, {"id": "undo_staging", "tool": "undo",
                                           "params": {"environment": "staging"}}])


# -- finding 1: a parameter default bypassed production policy --------------------------


PLAYBOOK_DEFAULT = """
playbooks:
  - name: ship
    match: ['^ship (?P<version>v\\S+)$']
    goal: "ship {version}"
    steps: [{id: ship, tool: deploy_default, params: {version: "{version}"}}]
    rollback: [{id: undo, tool: undo}]
"""
ONLY_APPROVERS = """
policy:
  environments:
    production: {approvers: {users: [alice]}}
"""


def test_default_environment_is_policed_shown_and_run_on_its_hosts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(tmp_path, policy=ONLY_APPROVERS, extra=PLAYBOOK_DEFAULT)
    assert main(["check", str(path)]) == 0
    capsys.readouterr()

    code = main(["run", "ship v1.0.0", "--yes", "--user", "mallory", "--config", str(path)])
    out = capsys.readouterr().out
    assert code == 3, out
    assert "production" in out and "not allowed to approve" in out
    assert not any((tmp_path / h).exists() for h in ("web-2", "web-3"))
    assert not (tmp_path / "log.txt").exists()

    assert main(["run", "ship v1.0.0", "--yes", "--user", "alice", "--config",
                 str(path)]) == 0
    assert [(tmp_path / h / "version").read_text() for h in ("web-2", "web-3")] == \
        ["v1.0.0\n"] * 2
    assert "hosts changed: local" not in capsys.readouterr().out


# -- finding 2: host-group targets escaped policy and promotion --------------------------


def test_host_group_resolves_to_its_environment(tmp_path: Path, store: Store) -> None:
    services = services_on(load_config(write_config(tmp_path)), store)
    alone = make_plan([{"id": "ship", "tool": "deploy_group",
                        "params": {"version": "v1.0.0"}}],
                      rollback=[{"id": "undo", "tool": "undo_group"}])
    with pytest.raises(PlanInvalid, match="changes production without first passing staging"):
        services.check(alone)
    plan = staged({"id": "ship", "tool": "deploy_group", "params": {"version": "v1.0.0"}},
                  [{"id": "undo", "tool": "undo_group"}])
    run = submit(services, plan, by="carol")
    assert run.environments == ["staging", "production"]
    with pytest.raises(ApprovalRefused, match="not allowed"):
        approve(services, run, "mallory")


# -- finding 3: a plan edited to touch no environment could be approved by anyone -------


def test_plan_edited_to_touch_no_environment_keeps_the_strict_rule(
        tmp_path: Path, store: Store) -> None:
    strict = STRICT.replace("min_approvals: 1", "min_approvals: 2")
    services = services_on(load_config(write_config(tmp_path, policy=strict)), store)
    plan = staged({"id": "ship", "tool": "deploy",
                   "params": {"environment": "production", "version": "v1.0.0"}},
                  [{"id": "undo", "tool": "undo", "params": {"environment": "production"}}])
    run = submit(services, plan, by="carol")
    edited = plan.revised(steps=[{"id": "backup", "tool": "backup_database",
                                  "description": "Snapshot the production database"}],
                          rollback=[])
    services.check(edited)
    run = services.store.runs.revise(run.id, edited, services.targets(edited))
    assert "(no environment)" in shown(services, edited, run)
    with pytest.raises(ApprovalRefused, match="not allowed"):
        approve(services, run, "mallory")
    assert approve(services, run, "alice").status is RunStatus.AWAITING_APPROVAL  # needs 2
    assert approve(services, run, "bob").status is RunStatus.QUEUED


def test_explicit_unscoped_rule_governs_local_changes(tmp_path: Path, store: Store) -> None:
    policy = STRICT + "  unscoped: {approvers: {users: [ops]}}\n"
    services = services_on(load_config(write_config(tmp_path, policy=policy)), store)
    plan = make_plan([{"id": "ship", "tool": "deploy_local", "params": {"version": "v1.0.0"}}],
                     rollback=[{"id": "undo", "tool": "undo_local"}])
    run = submit(services, plan, by="carol")
    with pytest.raises(ApprovalRefused, match=r"\(no environment\): ops"):
        approve(services, run, "alice")
    assert approve(services, run, "ops").status is RunStatus.QUEUED


# -- finding 4: typos opened production; a tool defined twice silently won --------------


def test_typos_and_duplicates_are_errors_at_their_line(tmp_path: Path) -> None:
    policy = """
    policy:
      promotion: [staging, prodution]
      environments:
        prodution: {approvers: {users: [alice]}}
    """
    tools = TOOLS.replace("  undo_local:", "  status:\n    description: again\n"
                                           "    command: 'true'\n  undo_local:")
    path = write_config(tmp_path, policy=policy, tools=tools)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    lines = path.read_text().splitlines()
    found = {(p.where.split(" ")[0], p.message.split(" (")[0]) for p in caught.value.problems}
    at = {text: f"{path}:{n}" for n, text in enumerate(lines, start=1)}
    assert (at["  promotion: [staging, prodution]"], "unknown environment 'prodution'") in found
    assert (at["    prodution: {approvers: {users: [alice]}}"],
            "unknown environment 'prodution'") in found
    second_status = [n for n, text in enumerate(lines, start=1) if text == "  status:"][1]
    assert (f"{path}:{second_status}", "duplicate key") in found
    assert len(caught.value.problems) == 3


# -- issue 19 item 2: promotion is satisfied only by a change ----------------------------


def test_read_only_step_on_staging_does_not_satisfy_promotion(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path))
    services = build_services(config, store=Store.connect(None))
    plan = make_plan([
        {"id": "look", "tool": "status", "params": {"environment": "staging"}},
        {"id": "ship", "tool": "deploy", "depends_on": ["look"],
         "params": {"environment": "production", "version": "v1.0.0"}}],
        rollback=[{"id": "undo", "tool": "undo", "params": {"environment": "production"}}])
    with pytest.raises(PlanInvalid, match="no step it depends on changes staging"):
        services.check(plan)


# -- the table: every way to reach production × every kind of approver -----------------

VARIANTS: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    "explicit param": ({"id": "ship", "tool": "deploy",
                        "params": {"environment": "production", "version": "v1.0.0"}},
                       [{"id": "undo", "tool": "undo", "params": {"environment": "production"}}]),
    "default": ({"id": "ship", "tool": "deploy_default", "params": {"version": "v1.0.0"}},
                [{"id": "undo", "tool": "undo"}]),
    "host group": ({"id": "ship", "tool": "deploy_group", "params": {"version": "v1.0.0"}},
                   [{"id": "undo", "tool": "undo_group"}]),
    "local target": ({"id": "ship", "tool": "deploy_local", "params": {"version": "v1.0.0"}},
                     [{"id": "undo", "tool": "undo_local"}]),
    "rollback only": ({"id": "ship", "tool": "status", "params": {"environment": "staging"}},
                      [{"id": "undo", "tool": "undo"}]),  # undo defaults to production
}
ROLES = {"approver": ("bob", True), "non-approver": ("mallory", False),
         "requester": ("alice", False)}  # alice asked, and may not approve her own


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_production_is_never_approved_by_outsiders_nor_hidden(
        tmp_path: Path, store: Store, variant: str, role: str) -> None:
    services = services_on(load_config(write_config(tmp_path)), store)
    step, rollback = VARIANTS[variant]
    plan = staged(step, rollback)
    run = submit(services, plan, by="alice")
    text = shown(services, plan, run)
    if variant == "local target":  # outside every environment: said so, production's rules
        assert "(no environment)" in text and "local" in text
    else:
        assert "production" in text
    user, allowed = ROLES[role]
    if allowed:
        assert approve(services, run, user).status is RunStatus.QUEUED
    else:
        with pytest.raises(ApprovalRefused):
            approve(services, run, user)
        assert services.store.runs.get(run.id).status is RunStatus.AWAITING_APPROVAL
    if variant in ("explicit param", "default", "host group"):
        skipping = make_plan([step], rollback=rollback)  # no staging change first
        with pytest.raises(PlanInvalid, match="without first passing staging"):
            services.check(skipping)


# -- finding 6: the terminal's answers --------------------------------------------------

TERMINAL = """
policy:
  promotion: [staging, production]
  environments:
    production: {approvers: {users: [alice, bob]}, confirm: true, min_approvals: MIN}
playbooks:
  - name: ship
    match: ['^ship (?P<version>v\\S+)$']
    goal: "ship {version}"
    steps:
      - {id: stage, tool: deploy, params: {environment: staging, version: "{version}"}}
      - {id: ship, tool: deploy, depends_on: [stage],
         params: {environment: production, version: "{version}"}}
    rollback:
      - {id: undo, tool: undo, params: {environment: production}}
      - {id: undo_staging, tool: undo, params: {environment: staging}}
"""


def terminal_config(tmp_path: Path, min_approvals: int = 1) -> Path:
    return write_config(tmp_path, policy=TERMINAL.replace("MIN", str(min_approvals)))


def flow_for(path: Path, user: str, **options: Any) -> tuple[Any, Console]:
    from bot.terminal.console import ConsoleFlow

    console = Console(record=True, width=200)
    services = build_services(load_config(path), store=Store.connect(None))
    return ConsoleFlow(services, console, user=user, **options), console


def deployed(tmp_path: Path) -> list[str]:
    return sorted(h for h in ("web-1", "web-2", "web-3") if (tmp_path / h).exists())


def test_reject_and_refusal_exit_non_zero(tmp_path: Path) -> None:
    from bot.terminal.console import Decision, ExitCode

    path = terminal_config(tmp_path)
    flow, console = flow_for(path, "alice", ask=lambda: Decision.REJECT)
    assert flow.handle("ship v1.0.0").status is RunStatus.REJECTED
    assert flow.exit_code is ExitCode.REFUSED and flow.exit_code != 0
    flow, console = flow_for(path, "mallory", confirm=lambda word: word)
    assert flow.handle("ship v1.0.0", yes=True).status is RunStatus.REJECTED
    assert flow.exit_code == 3 and "not allowed to approve" in console.export_text()
    assert deployed(tmp_path) == []


def test_confirm_asks_to_type_the_environment(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = terminal_config(tmp_path)
    asked: list[str] = []
    flow, _ = flow_for(path, "alice", confirm=lambda word: asked.append(word) or "prod")
    flow.handle("ship v1.0.0", yes=True)
    assert asked == ["production"] and flow.exit_code == 3 and deployed(tmp_path) == []
    assert main(["run", "ship v1.0.0", "--yes", "--user", "alice", "--config", str(path)]) == 3
    assert "Not confirmed" in capsys.readouterr().out  # no terminal to type into
    assert main(["run", "ship v1.0.0", "--yes", "--user", "alice", "--confirm", "production",
                 "--config", str(path)]) == 0
    assert deployed(tmp_path) == ["web-1", "web-2", "web-3"]


def test_more_approvals_than_the_terminal_can_collect(
        tmp_path: Path, store: Store, redis_url: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = terminal_config(tmp_path, min_approvals=2)
    args = ["--yes", "--confirm", "production", "--config", str(path)]
    assert main(["run", "ship v1.0.0", "--user", "alice", *args]) == 3
    out = " ".join(capsys.readouterr().out.split())
    assert "needs 2 approvals" in out and "REDIS_URL" in out and "deckhand approve" in out

    monkeypatch.setenv("REDIS_URL", redis_url)
    assert main(["run", "ship v1.0.0", "--user", "alice", *args]) == 4
    out = " ".join(capsys.readouterr().out.split())
    assert "1 more approval(s) needed" in out and "deckhand approve" in out
    (run,) = store.runs.recent()
    assert run.status is RunStatus.AWAITING_APPROVAL
    assert main(["approve", run.id, "--user", "mallory", "--config", str(path)]) == 3
    assert main(["approve", run.id, "--user", "bob", "--confirm", "production",
                 "--config", str(path)]) == 0
    assert store.runs.get(run.id).status is RunStatus.QUEUED
    assert deployed(tmp_path) == []  # a `deckhand worker` runs it, not the terminal


def test_slack_modify_to_no_environment_keeps_production_rules(world: SlackWorld) -> None:
    """Finding 3 through Slack: the requester edits the plan down to one local step; the
    plan says it touches no environment, and an outsider's Approve is refused."""
    world.deploy("v2.3.1")
    run_id = bk.parse_button_value(button(world.plan_message(), "approve"))[0]
    meta = json.dumps({"run": run_id, "v": 1, "channel": "CDEPLOY"})
    edited = ("goal: Snapshot the production database\nsteps:\n- id: backup\n"
              "  tool: backup_database\nrollback: []\n")
    assert world.submit("modify_submit", meta, {"yaml": edited}, user="UALICE")[0] == 200
    second = world.plan_message(1)
    assert "(no environment)" in second.text_of_blocks()
    world.click("approve", button(second, "approve"), user="UMALLORY")
    refusal = world.standin.wait_for(lambda: world.told("UMALLORY"), what="the refusal")
    assert "not allowed to approve" in refusal[0]
    world.click("approve", button(second, "approve"), user="UBOB")
    run = world.standin.wait_for(lambda: [r for r in [world.store.runs.get(run_id)]
                                          if r.approvals] or None)[0]
    assert run.status is RunStatus.AWAITING_APPROVAL  # production's two approvals apply
