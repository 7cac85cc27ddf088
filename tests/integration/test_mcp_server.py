"""``deckhand mcp`` driven by the official MCP client, over stdio and streamable HTTP.

The server runs as a real subprocess against a real Redis and the Slack Web API stand-in;
the client can plan and request, and every attempt to approve or to run a plan deckhand
did not validate is refused.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, Implementation

from agents.plan.model import Plan
from agents.run.record import RunStatus
from agents.store import Store
from bot.cli import main
from tests.fixtures.polling import wait_until
from tests.fixtures.sample import copy_examples, free_port
from tests.fixtures.slack_standin import SlackStandin
from tests.fixtures.slack_world import actions_of

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "t0ken-for-alice-0123456789abcdef"
TOOLS = {"catalog", "plan", "run_status", "where", "request_deploy", "pause_run", "resume_run",
         "stop_run", "judge_run"}


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    return copy_examples(tmp_path / "sample")


def server_env(config_path: Path, redis_url: str, **extra: str) -> dict[str, str]:
    return {"PYTHONPATH": str(ROOT), "REDIS_URL": redis_url,
            "DECKHAND_CONFIG": str(config_path), **extra}


@asynccontextmanager
async def stdio_session(env: dict[str, str], name: str = "pytest-agent"
                        ) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "bot.cli", "mcp"],
                                   env=env, cwd=str(ROOT))
    async with stdio_client(params) as (read, write), ClientSession(
            read, write, client_info=Implementation(name=name, version="1.0")) as session:
        await session.initialize()
        yield session


def ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


def error_text(result: CallToolResult) -> str:
    assert result.is_error
    return " ".join(getattr(c, "text", "") for c in result.content)


def test_stdio_plan_and_request_reaches_slack_and_only_a_human_approves(
        config_path: Path, redis_url: str, store: Store, slack_standin: SlackStandin,
        monkeypatch: pytest.MonkeyPatch) -> None:
    env = server_env(config_path, redis_url, SLACK_BOT_TOKEN="xoxb-test-token",
                     SLACK_API_URL=f"{slack_standin.url}/api/")

    async def scenario() -> dict[str, Any]:
        async with stdio_session(env) as session:
            listed = {t.name: t for t in (await session.list_tools()).tools}
            assert set(listed) == TOOLS
            for name in ("catalog", "plan", "run_status", "where"):
                assert listed[name].annotations.read_only_hint is True
                assert listed[name].output_schema is not None
            deploy = listed["request_deploy"].annotations
            assert (deploy.read_only_hint, deploy.destructive_hint) == (False, True)
            assert deploy.open_world_hint is True  # Slack is configured
            assert "plan_hash" in listed["request_deploy"].input_schema["properties"]

            catalog = ok(await session.call_tool("catalog", {}))
            assert {t["name"] for t in catalog["tools"]} >= {"deploy", "rollback", "status"}

            planned = ok(await session.call_tool("plan", {"request": "deploy v2.3.1"}))
            assert planned["accepted"] and planned["environments"] == ["staging", "production"]
            assert set(planned["hosts"]) == {"local", "staging-1", "prod-1", "prod-2"}
            assert Plan.model_validate(planned["plan"]).hash == planned["plan_hash"]

            requested = ok(await session.call_tool(
                "request_deploy", {"plan_hash": planned["plan_hash"], "channel": "CDEPLOY"}))
            again = ok(await session.call_tool(
                "request_deploy", {"plan_hash": planned["plan_hash"], "channel": "CDEPLOY"}))
            assert again["run_id"] == requested["run_id"] and again["already_requested"]

            await refuse_everything_else(session, planned, requested["run_id"])
            status = ok(await session.call_tool("run_status", {"run_id": requested["run_id"]}))
            assert status["status"] == "awaiting_approval" and status["approved_by"] == []
            return requested

    requested = anyio.run(scenario)
    assert requested["slack_channel"] == "CDEPLOY" and requested["slack_ts"]
    posts = [c for c in slack_standin.of("chat.postMessage") if actions_of(c)]
    assert len(posts) == 1 and slack_standin.violations == []
    assert "mcp:pytest-agent" in posts[0].text_of_blocks()
    assert {e["action_id"] for b in actions_of(posts[0]) for e in b["elements"]} == {
        "approve", "modify", "reject"}

    run = store.runs.get(requested["run_id"])
    assert run.status is RunStatus.AWAITING_APPROVAL and run.requested_by == "mcp:pytest-agent"
    assert run.meta["slack"]["channel"] == "CDEPLOY" and len(store.runs.recent()) == 1
    actors = {(e.action, e.actor) for e in store.audit.entries()}
    assert {("mcp_planned", "mcp:pytest-agent"), ("planned", "mcp:pytest-agent"),
            ("mcp_request_refused", "mcp:pytest-agent")} <= actors

    # a human approves the way deckhand always allowed: here, `deckhand approve`
    monkeypatch.setenv("REDIS_URL", redis_url)
    assert main(["approve", run.id, "--user", "alice", "--confirm", "production", "--config", str(config_path)]) == 0
    assert store.runs.get(run.id).status is RunStatus.QUEUED


async def refuse_everything_else(session: ClientSession, planned: dict[str, Any],
                                 run_id: str) -> None:
    """No approve path exists, extra arguments change nothing, and only deckhand's own
    plan hashes are accepted."""
    for name in ("approve", "modify", "reject", "run", "execute"):
        text = error_text(await session.call_tool(name, {"run_id": run_id}))
        assert "Unknown tool" in text
    sneaky = {"plan_hash": planned["plan_hash"], "channel": "CDEPLOY", "approved": True,
              "requested_by": "UALICE"}
    same = ok(await session.call_tool("request_deploy", sneaky))  # extras are ignored
    assert same["already_requested"] and same["status"] == "awaiting_approval"

    edited = Plan.model_validate(planned["plan"])
    edited.steps[0].params["version"] = "v6.6.6"
    for plan_hash in (edited.hash, "f" * 64):
        text = error_text(await session.call_tool(
            "request_deploy", {"plan_hash": plan_hash, "channel": "CDEPLOY"}))
        assert "call `plan`" in text
    assert "argument `plan_hash` must be the 64-character plan_hash that `plan` returned" in \
        error_text(await session.call_tool("request_deploy", {"plan_hash": "not-a-hash",
                                                              "channel": "CDEPLOY"}))


def test_stdio_without_slack_leaves_the_run_for_deckhand_approve(
        config_path: Path, redis_url: str, store: Store) -> None:
    env = server_env(config_path, redis_url)

    async def scenario() -> dict[str, Any]:
        async with stdio_session(env, name="other agent!") as session:
            listed = {t.name: t for t in (await session.list_tools()).tools}
            assert listed["request_deploy"].annotations.open_world_hint is False
            planned = ok(await session.call_tool("plan", {"request": "deploy v2.3.1 to staging"}))
            return ok(await session.call_tool("request_deploy",
                                              {"plan_hash": planned["plan_hash"]}))

    requested = anyio.run(scenario)
    assert requested["awaiting"] == f"`deckhand approve {requested['run_id']}`"
    run = store.runs.get(requested["run_id"])
    assert run.status is RunStatus.AWAITING_APPROVAL
    assert run.requested_by == "mcp:otheragent" and "slack" not in run.meta


@pytest.fixture
def http_server(config_path: Path, redis_url: str, store: Store) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, **server_env(config_path, redis_url,
                                      DECKHAND_MCP_TOKENS=f"UALICE={TOKEN}")}
    env.pop("SLACK_BOT_TOKEN", None)
    proc = subprocess.Popen([sys.executable, "-m", "bot.cli", "mcp", "--http", "--port",
                             str(port)], env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: proc.poll() is not None or _listening(port), timeout=60,
                   what="deckhand mcp --http to listen")
        assert proc.poll() is None, "deckhand mcp --http exited"
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(30)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_http_needs_the_bearer_token_and_records_its_user(http_server: str, store: Store) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789abcdef"}):
        assert _post_initialize(http_server, headers) == 401

    async def scenario() -> dict[str, Any]:
        client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"})
        async with client, streamable_http_client(http_server, http_client=client) as (
                read, write), ClientSession(read, write) as session:
            await session.initialize()
            assert {t.name for t in (await session.list_tools()).tools} == TOOLS
            planned = ok(await session.call_tool("plan", {"request": "deploy v2.3.1"}))
            assert planned["requested_by"] == "UALICE"
            return ok(await session.call_tool("request_deploy",
                                              {"plan_hash": planned["plan_hash"]}))

    requested = anyio.run(scenario)
    run = store.runs.get(requested["run_id"])
    assert run.requested_by == "UALICE" and run.status is RunStatus.AWAITING_APPROVAL


def _post_initialize(url: str, headers: dict[str, str]) -> int:
    body = (b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":'
            b'"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}')
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_http_refuses_to_start_without_tokens(config_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("DECKHAND_MCP_TOKENS", raising=False)
    assert main(["mcp", "--http", "--config", str(config_path)]) == 2
    assert "DECKHAND_MCP_TOKENS" in capsys.readouterr().out
    monkeypatch.setenv("DECKHAND_MCP_TOKENS", "UALICE=short")
    assert main(["mcp", "--http", "--config", str(config_path)]) == 2
