"""Every refusal is audited from every face, with who, what and the rule: an Approve click
in Slack (a signed request), `deckhand approve` on the CLI, the terminal's `deckhand run`
flow, and an MCP call refused by argument validation (the real client over stdio)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
import yaml
from rich.console import Console

from agents.errors import NoPlanFound
from bot.cli import main
from bot.slack import blocks as bk
from bot.terminal.console import ConsoleFlow
from tests.fixtures.polling import wait_until
from tests.fixtures.slack_world import POLICY, SlackWorld, button
from tests.integration.test_mcp_server import error_text, server_env, stdio_session


def refusals(world: SlackWorld) -> dict[str, dict[str, str]]:
    """The newest refusal entry of each face: actor, what, rule, run."""
    found = {}
    for entry in world.store.audit.entries(limit=500):
        if entry.action.endswith("refused"):
            found[entry.details["face"]] = {"actor": entry.actor, "what": entry.details["what"],
                                            "rule": entry.details["rule"],
                                            "run": entry.run_id or ""}
    return found


def strict_config(world: SlackWorld) -> Path:
    """The world's config file with the world's policy (the file's own lets anyone approve)."""
    raw = yaml.safe_load(world.config.path.read_text())
    raw["policy"] = {**raw["policy"], **POLICY}
    path = world.config.path.with_name("strict.yml")
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_refusal_is_audited_from_slack_the_cli_the_terminal_and_mcp(
        world: SlackWorld, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    world.deploy("v2.3.1 to staging")
    run_id = bk.parse_button_value(button(world.plan_message(), "approve"))[0]

    world.click("approve", button(world.plan_message(), "approve"), user="UMALLORY")
    wait_until(lambda: "slack" in refusals(world), what="the Slack refusal's audit entry")

    monkeypatch.setenv("REDIS_URL", redis_url)
    config = strict_config(world)
    assert main(["approve", run_id, "--user", "UEVE", "--config", str(config)]) == 3

    flow = ConsoleFlow(world.runtime.services, Console(record=True, width=120), user="UTRUDY")
    flow.handle("deploy v2.3.1 to staging", yes=True)
    assert flow.exit_code == 3

    async def bad_call() -> str:
        async with stdio_session(server_env(config, redis_url), name="fuzzer") as session:
            return error_text(await session.call_tool("run_status", {"run_id": "x; rm -rf /"}))
    assert anyio.run(bad_call)

    found = refusals(world)
    assert set(found) == {"slack", "cli", "terminal", "mcp"}
    assert (found["slack"]["actor"], found["slack"]["what"], found["slack"]["run"]) == \
        ("UMALLORY", "approve", run_id)
    assert (found["cli"]["actor"], found["cli"]["what"], found["cli"]["run"]) == \
        ("UEVE", "approve", run_id)
    assert (found["terminal"]["actor"], found["terminal"]["what"]) == ("UTRUDY", "approve")
    assert found["terminal"]["run"] and found["terminal"]["run"] != run_id
    assert (found["mcp"]["actor"], found["mcp"]["what"]) == ("mcp:fuzzer", "run_status")
    for face in ("slack", "cli", "terminal"):  # the rule that said no, in its own words
        assert "staging" in found[face]["rule"] and "approve" in found[face]["rule"], found[face]
    assert "run_id" in found["mcp"]["rule"]
    assert world.store.audit.verify().ok  # and the chain holds every one of them


def test_a_refused_plan_is_audited_once_from_every_face(
        world: SlackWorld, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans are made, and refused, in one place: the entry names the face that asked."""
    request = "deploy v2.3.1 to nowhere"
    world.deploy(request, user="UALICE")
    wait_until(lambda: "slack" in planned_refusals(world), what="the Slack plan refusal")

    monkeypatch.setenv("REDIS_URL", redis_url)
    config = strict_config(world)
    assert main(["plan", request, "--config", str(config)]) != 0

    flow = ConsoleFlow(world.runtime.services, Console(record=True, width=120), user="UTRUDY")
    with pytest.raises(NoPlanFound):  # `deckhand run` tells it as every DeckhandError
        flow.handle(request, yes=True)

    async def plan_call() -> str:
        async with stdio_session(server_env(config, redis_url), name="planner") as session:
            return str(await session.call_tool("plan", {"request": request}))
    assert "nowhere" in anyio.run(plan_call)

    found = planned_refusals(world)
    assert {face: entry["actor"] for face, entry in found.items()} == {
        "slack": "UALICE", "cli": found["cli"]["actor"], "terminal": "UTRUDY",
        "mcp": "mcp:planner"}
    assert all("nowhere" in entry["rule"] for entry in found.values()), found
    assert [e.action for e in world.store.audit.entries(limit=500)].count("plan_refused") == 4


def planned_refusals(world: SlackWorld) -> dict[str, dict[str, str]]:
    return {face: entry for face, entry in refusals(world).items() if entry["what"] == "plan"}
