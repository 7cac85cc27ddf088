"""Dry runs check a plan on the real hosts without changing anything, in both faces."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from agents.config import Config
from agents.plan.dryrun import dry_plan
from agents.run.record import RunStatus
from agents.services import build_services
from bot.cli.demo import probe
from bot.terminal.console import ConsoleFlow
from tests.fixtures.builders import make_config, make_plan
from tests.fixtures.slack_world import SlackWorld


def _answers(config: Config) -> set[str]:
    return {p.body for p in probe(config)}


def test_terminal_dry_run_checks_everything_and_changes_nothing(sample_config: Config) -> None:
    services = build_services(sample_config)
    console = Console(record=True, width=200)
    flow = ConsoleFlow(services, console, user="alice", confirm=lambda word: word)
    deployed = flow.handle("deploy v2.3.1", yes=True)
    assert deployed is not None and deployed.status is RunStatus.SUCCEEDED
    hosts = sample_config.path.parent / ".deckhand" / "hosts"
    before = sorted(str(p) for p in hosts.rglob("*"))
    notifications = (sample_config.path.parent / ".deckhand" / "notifications.log").read_text()

    run = flow.dry_run("deploy v2.4.0")
    assert run.status is RunStatus.SUCCEEDED and run.meta["dry_run"] is True
    text = console.export_text()
    assert "deploy_production on prod-2: would install v2.4.0" in text
    assert "switch from v2.3.1 to v2.4.0" in text
    for step, tool in (("smoke_staging", "smoke_test"), ("smoke_production", "smoke_test"),
                       ("notify_team", "notify_team")):
        assert f"{step}: nothing to check (tool {tool} has no check: in the config)" in text
    assert text.rstrip().endswith("DRY RUN: CHECKS PASSED (5 checked, 3 with nothing to "
                                  "check) — nothing was changed")
    dry_part = text.split("each step runs its tool's check")[-1].splitlines()
    assert not any(line.strip().startswith("SUCCEEDED") for line in dry_part)  # no deploy-like status
    assert _answers(sample_config) == {"v2.3.1"}  # still serving what was deployed
    assert sorted(str(p) for p in hosts.rglob("*")) == before
    assert (sample_config.path.parent / ".deckhand" / "notifications.log").read_text() \
        == notifications  # a tool without a check never runs
    assert services.store.locks.all() == [] and run.id not in {r.id for r in services.store.runs.recent()}
    assert [e.action for e in services.store.audit.entries()][-1] == "dry_run"


def test_a_plan_with_nothing_to_check_says_so_per_step_and_in_its_status(
        tmp_path: Path) -> None:
    config = make_config(tmp_path, tools="""
tools:
  tell:
    description: tell people
    command: "echo told >> {vars.log}"
vars:
  log: "{config_dir}/log.txt"
playbooks:
  - name: tell
    match: ['^tell twice$']
    goal: tell twice
    steps:
      - {id: a, tool: tell}
      - {id: b, tool: tell, depends_on: [a]}
""")
    services = build_services(config)
    console = Console(record=True, width=200)
    run = ConsoleFlow(services, console, user="alice").dry_run("tell twice")
    text = console.export_text()
    assert "a: nothing to check (tool tell has no check: in the config)" in text
    assert "b: nothing to check (tool tell has no check: in the config)" in text
    last = text.rstrip().splitlines()[-1]
    assert last.startswith("DRY RUN: NOTHING CHECKED — none of the 2 step(s) has a check:")
    assert "SUCCEEDED" not in text and run.steps == {}
    assert not (tmp_path / "log.txt").exists()


def test_a_failing_check_fails_the_dry_run(tmp_path: Path) -> None:
    config = make_config(tmp_path, tools="""
tools:
  ship:
    description: ship it
    command: "echo shipped >> {vars.log}"
    check: "echo 'disk full' >&2; exit 1"
    mutates: true
    rollback: unship
  unship:
    description: undo
    command: "echo unshipped >> {vars.log}"
    mutates: true
  tell:
    description: tell people
    command: "echo told >> {vars.log}"
vars:
  log: "{config_dir}/log.txt"
""")
    services = build_services(config)
    plan = make_plan([{"id": "a", "tool": "ship"}, {"id": "b", "tool": "tell",
                                                   "depends_on": ["a"]}],
                     rollback=[{"id": "u", "tool": "unship"}])
    dry = dry_plan(plan, config.catalog)
    assert [s.tool for s in dry.plan.steps] == ["ship__check"] and dry.unchecked == ["b"]
    run, _ = services.dry_run(plan, user="alice")
    assert run.status is RunStatus.FAILED and "disk full" in run.steps["a"].hosts["local"].tail
    assert not (tmp_path / "log.txt").exists()  # no rollback, no command, nothing


def test_dry_run_from_slack_posts_what_it_would_do(world: SlackWorld) -> None:
    world.deploy("v2.3.1 --dry-run")
    reply = world.standin.wait_for(lambda: [c for c in world.standin.of("chat.postMessage")
                                            if c.payload.get("thread_ts")], what="the result")
    text = json.dumps(reply[0].payload)
    assert "DRY RUN: CHECKS PASSED" in text and "would install v2.3.1" in text
    assert "notify_team: nothing to check (tool notify_team has no check: in the config)" in text
    plan = world.standin.of("chat.postMessage")[0]
    assert "Dry run" in plan.text_of_blocks() and not any(
        b.get("type") == "actions" for b in plan.blocks)  # nothing to approve
    assert world.store.runs.recent() == [] and not any(p.status for p in probe(world.config))
    assert world.standin.violations == []
