"""``deckhand mcp`` for an organisation of two services (docs/services.md 2.7), driven by the
official MCP client over stdio against a real Redis: every tool that plans or reads a
service's state takes ``service`` (the schema lists the services); a request naming none is
refused listing them, never guessed; each run is read under its own service, and a
``service`` argument naming another service is refused with nothing changed."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession

from agents.org import load_org
from agents.plan.model import Plan
from agents.run.record import RunStatus
from agents.services import build_services
from agents.store import Store
from bot.mcp.desk import Desk
from bot.mcp.server import build_server
from tests.fixtures.slack_standin import SlackStandin
from tests.fixtures.slack_world import actions_of
from tests.integration.test_mcp_server import error_text, ok, server_env, stdio_session

SERVICE = """
tools:
  ship:
    description: put a version on every host of an environment
    command: "echo {version}"
    target: environment
    params: {version: {pattern: '^v\\d+\\.\\d+\\.\\d+$'}}
    mutates: true
inventory:
  hosts: {NAME-1: {connection: local}, NAME-2: {connection: local}}
  environments: {staging: {hosts: [NAME-1]}, production: {hosts: [NAME-2]}}
playbooks:
  - name: ship
    match: ['^ship (?P<version>v\\S+) to (?P<environment>\\S+)$']
    goal: "ship {version} of NAME to {environment}"
    steps: [{id: ship, tool: ship, params: {environment: "{environment}",
                                            version: "{version}"}}]
policy:
  require_rollback: false
"""


@pytest.fixture
def org_path(tmp_path: Path) -> Path:
    for name in ("api", "web"):
        path = tmp_path / "services" / f"{name}.yml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(SERVICE).replace("NAME", name))
    main = tmp_path / "deckhand.yml"
    main.write_text("services: {api: services/api.yml, web: services/web.yml}\n")
    return main


REQUEST = "ship v1.2.3 to staging"


def test_two_services_over_stdio(org_path: Path, redis_url: str, store: Store,
                                 tmp_path: Path, slack_standin: SlackStandin) -> None:
    env = server_env(org_path, redis_url, DECKHAND_STATE_DIR=str(tmp_path / "state"),
                     SLACK_BOT_TOKEN="xoxb-test-token",
                     SLACK_API_URL=f"{slack_standin.url}/api/")

    async def scenario() -> dict[str, dict[str, Any]]:
        async with stdio_session(env) as session:
            await schemas_list_the_services(session)
            await nothing_is_guessed(session)
            runs = {name: await plan_and_request(session, name) for name in ("api", "web")}
            await runs_are_read_under_their_own_service(session, runs)
            await another_service_is_refused(session, runs)
            return runs

    runs = anyio.run(scenario)
    for name, requested in runs.items():  # the end state: one run per service, untouched
        run = store.runs.get(requested["run_id"])
        assert (run.service, run.status, run.environments) == (
            name, RunStatus.AWAITING_APPROVAL, ["staging"])
        assert store.plans.get(run.plan_id, run.plan_version).service == name
        assert run.meta["slack"]["channel"] == "CDEPLOY"
    assert len(store.runs.recent()) == 2
    posts = [c for c in slack_standin.of("chat.postMessage") if actions_of(c)]
    assert sorted(p.text_of_blocks().count("ship v1.2.3 of api") > 0 for p in posts) == [
        False, True] and slack_standin.violations == []  # each service's plan, once
    refused = [e for e in store.audit.entries() if e.action.endswith("refused")]
    assert {(e.action, e.actor, e.details["face"], e.run_id) for e in refused} == {
        ("plan_refused", "mcp:pytest-agent", "mcp", None),  # none named, then two
        *{(f"{verb}_refused", "mcp:pytest-agent", "mcp", runs["web"]["run_id"])
          for verb in ("stop", "pause", "resume")},
        ("judgment_refused", "mcp:pytest-agent", "mcp", runs["web"]["run_id"]),
        ("mcp_request_refused", "mcp:pytest-agent", "mcp", None),
        ("mcp_call_refused", "mcp:pytest-agent", "mcp", None)}  # `API/web`: the schema's
    assert "name one with `service`" in refused[0].details["rule"]


async def schemas_list_the_services(session: ClientSession) -> None:
    listed = {t.name: t for t in (await session.list_tools()).tools}
    for name in ("catalog", "plan", "where", "run_status", "request_deploy", "stop_run",
                 "pause_run", "resume_run", "judge_run"):
        service = listed[name].input_schema["properties"]["service"]
        text = [b for b in service["anyOf"] if b.get("type") == "string"]
        assert text[0]["enum"] == ["api", "web"], (name, service)
        assert "service" not in listed[name].input_schema.get("required", [])


async def nothing_is_guessed(session: ClientSession) -> None:
    """No service named, with two: refused listing them; an unknown one: an argument error."""
    planned = ok(await session.call_tool("plan", {"request": REQUEST}))
    assert not planned["accepted"] and planned["plan_hash"] is None
    assert planned["problems"] == [
        "which service? This organisation has api, web: name one with `service` (or in "
        "the request: `deploy api v2.3.1`)"]
    for tool in ("catalog", "where"):
        assert "which service? This organisation has api, web" in error_text(
            await session.call_tool(tool, {}))
    unknown = error_text(await session.call_tool("plan", {"request": REQUEST,
                                                          "service": "billing"}))
    assert "argument `service` must be one of this organisation's services: api, web" \
        in unknown and "billing" not in unknown  # never the value, as every argument error
    assert "argument `service` must be a service's name" in error_text(
        await session.call_tool("catalog", {"service": "API/web"}))
    named_twice = ok(await session.call_tool("plan", {"request": "ship api v1.2.3 to staging",
                                                      "service": "web"}))
    assert not named_twice["accepted"]
    assert "names service api but argument `service` says web" in named_twice["problems"][0]


async def plan_and_request(session: ClientSession, name: str) -> dict[str, Any]:
    catalog = ok(await session.call_tool("catalog", {"service": name}))
    assert catalog["service"] == name
    assert {e["name"]: e["hosts"] for e in catalog["environments"]} == {
        "staging": [f"{name}-1"], "production": [f"{name}-2"]}
    planned = ok(await session.call_tool("plan", {"request": REQUEST, "service": name}))
    assert planned["accepted"], planned["problems"]
    plan = Plan.model_validate(planned["plan"])
    assert plan.service == name and plan.hash == planned["plan_hash"]
    assert planned["hosts"] == [f"{name}-1"] and plan.goal == f"ship v1.2.3 of {name} to staging"
    requested = ok(await session.call_tool("request_deploy", {
        "plan_hash": planned["plan_hash"], "channel": "CDEPLOY"}))
    assert requested["slack_channel"] == "CDEPLOY" and requested["slack_ts"]
    return requested


async def runs_are_read_under_their_own_service(session: ClientSession,
                                                runs: dict[str, dict[str, Any]]) -> None:
    assert runs["api"]["plan_hash"] != runs["web"]["plan_hash"]
    for name, requested in runs.items():
        for args in ({}, {"service": name}):
            status = ok(await session.call_tool("run_status",
                                                {"run_id": requested["run_id"], **args}))
            assert (status["service"], status["status"], status["goal"]) == (
                name, "awaiting_approval", f"ship v1.2.3 of {name} to staging")
        where = ok(await session.call_tool("where", {"service": name}))
        staging = next(e for e in where["environments"] if e["environment"] == "staging")
        assert where["service"] == name and staging["hosts"] == [f"{name}-1"]
        assert [r["run_id"] for r in staging["active"]] == [requested["run_id"]]


async def another_service_is_refused(session: ClientSession,
                                     runs: dict[str, dict[str, Any]]) -> None:
    web = runs["web"]["run_id"]
    for tool in ("run_status", "stop_run", "pause_run", "resume_run"):
        text = error_text(await session.call_tool(tool, {"run_id": web, "service": "api"}))
        assert f"run {web} is service web's, not api's" in text, (tool, text)
    text = error_text(await session.call_tool(
        "judge_run", {"run_id": web, "decision": "rollback", "service": "api"}))
    assert f"run {web} is service web's, not api's" in text
    text = error_text(await session.call_tool("request_deploy", {
        "plan_hash": runs["web"]["plan_hash"], "channel": "CDEPLOY", "service": "api"}))
    assert "that plan is service web's, not api's" in text


def test_a_reload_that_adds_a_service_lists_it_in_every_schema(org_path: Path,
                                                               store: Store) -> None:
    """The enum follows the names in force (``refresh_services`` runs after each SIGHUP),
    and the desk takes the new service at once."""
    services = build_services(load_org(org_path), store=store)
    server = build_server(Desk(services))

    def enums() -> dict[str, list[str]]:
        tools = anyio.run(server.list_tools)
        return {t.name: next(b["enum"] for b in t.input_schema["properties"]["service"]["anyOf"]
                             if b.get("type") == "string")
                for t in tools if "service" in t.input_schema["properties"]}

    assert len(enums()) == 9 and all(v == ["api", "web"] for v in enums().values())
    (org_path.parent / "services" / "docs.yml").write_text(
        textwrap.dedent(SERVICE).replace("NAME", "docs"))
    org_path.write_text("services: {api: services/api.yml, web: services/web.yml, "
                        "docs: services/docs.yml}\n")
    services.swap(build_services(load_org(org_path), store=store))  # as a reload does
    server.add_request_tool()
    server.refresh_services()
    assert len(enums()) == 9 and all(v == ["api", "docs", "web"] for v in enums().values())
    assert server.desk.catalog("docs").service == "docs"
