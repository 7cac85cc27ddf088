"""Issue 29 item 8: ``deckhand mcp`` over stdio, driven by the official MCP client against a
real Redis — a plan is bound to the connection that made it, every call refused by argument
validation is audited, and a stored proposal edited in Redis never becomes a run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from agents.store import Store
from tests.fixtures.sample import copy_examples
from tests.integration.test_mcp_server import error_text, ok, server_env, stdio_session


@pytest.fixture
def env(tmp_path: Path, redis_url: str) -> dict[str, str]:
    return server_env(copy_examples(tmp_path / "sample"), redis_url)


def audited(store: Store, action: str) -> list[dict[str, Any]]:
    return [{"actor": e.actor, **e.details} for e in store.audit.entries(limit=500)
            if e.action == action]


def test_a_plan_hash_is_bound_to_its_connection_not_the_clients_name(
        env: dict[str, str], store: Store) -> None:
    async def scenario() -> tuple[str, str]:
        async with stdio_session(env, name="agent-a") as first:
            planned = ok(await first.call_tool("plan", {"request": "deploy v2.3.1"}))
            async with stdio_session(env, name="agent-a") as impostor:  # same name, new process
                text = error_text(await impostor.call_tool(
                    "request_deploy", {"plan_hash": planned["plan_hash"]}))
            mine = ok(await first.call_tool("request_deploy",
                                            {"plan_hash": planned["plan_hash"]}))
            return text, mine["run_id"]

    refused, run_id = anyio.run(scenario)
    assert "call `plan`" in refused  # and why a client that just did is refused (issue 43.4)
    assert "A plan is bound to the connection that made it" in refused
    assert "one connection, or use `deckhand mcp --http`" in refused
    (run,) = store.runs.recent()
    assert run.id == run_id and run.requested_by == "mcp:agent-a"
    assert [e["plan_hash"][:12] for e in audited(store, "mcp_request_refused")] == \
        [run.plan_hash[:12]]


BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("plan", {"request": ""}, "request"),
    ("plan", {"request": "x" * 501}, "request"),
    ("plan", {"request": "deploy " + "v" * 1_000_000}, "request"),
    ("plan", {"request": 123}, "request"),
    ("plan", {}, "request"),
    ("request_deploy", {"plan_hash": "not-a-hash"}, "plan_hash"),
    ("request_deploy", {"plan_hash": "A" * 64}, "plan_hash"),
    ("run_status", {"run_id": "run 1; rm -rf /"}, "run_id"),
    ("approve", {"run_id": "run-1"}, ""),
    ("request_deploy", {"plan_hash": "0" * 64, "channel": "#a b"}, "channel"),
    ("judge_run", {"run_id": "run-1", "decision": "maybe"}, "decision"),
    ("pause_run", {"run_id": "r" * 81}, "run_id"),
    ("resume_run", {"run_id": ["run-1"]}, "run_id"),
    ("stop_run", {}, "run_id"),
]


def test_refused_arguments_are_audited_and_an_edited_proposal_never_runs(
        env: dict[str, str], store: Store) -> None:
    """One stdio session (a server process each costs seconds): first every call refused by
    argument validation, then a plan whose stored proposal is edited in Redis."""
    async def scenario() -> tuple[list[str], str, str]:
        async with stdio_session(env, name="fuzzer") as session:
            texts = [error_text(await session.call_tool(name, arguments))
                     for name, arguments, _ in BAD_CALLS]
            assert store.runs.recent() == [] and not list(store.r.scan_iter(match="*proposal*"))
            planned = ok(await session.call_tool("plan", {"request": "deploy v2.3.1"}))
            tamper()
            text = error_text(await session.call_tool(
                "request_deploy", {"plan_hash": planned["plan_hash"]}))
            return texts, planned["plan_hash"], text

    def tamper() -> None:
        (key,) = store.r.scan_iter(match="*proposal*")
        record = json.loads(store.r.get(key))
        record["plan"]["steps"][0]["params"]["version"] = "v6.6.6"
        store.r.set(key, json.dumps(record), keepttl=True)

    texts, plan_hash, tampered = anyio.run(scenario)
    assert all(texts)
    for text, (name, _, field) in zip(texts, BAD_CALLS, strict=True):  # said in words
        assert "pydantic" not in text and "validation error" not in text, text
        assert not field or text.startswith(f"{name}: argument `{field}` "), text
    assert texts[0] == "plan: argument `request` must be at least 1 character(s) (got text " \
                       "of 0 characters)"
    assert texts[4] == "plan: argument `request` is required"
    assert "plan_hash` must be the 64-character plan_hash that `plan` returned" in texts[5]
    assert "run_id` must be a run id, like run-" in texts[7]
    assert "decision` must be one of 'continue' or 'rollback'" in texts[10]
    entries = audited(store, "mcp_call_refused")
    assert [(e["actor"], e["what"], e["fields"]) for e in entries] == [
        ("mcp:fuzzer", name, [field] if field else []) for name, _, field in BAD_CALLS]
    assert entries[2]["arguments"]["request"] == "str, 1000007 chars"  # shape, not value
    assert b"v" * 1000 not in repr(store.r.xrange(store.keys.audit())).encode()

    assert "no longer has that hash" in tampered
    assert store.runs.recent() == []  # nothing became a run, under either hash
    (entry,) = audited(store, "mcp_request_refused")
    assert entry["plan_hash"] == plan_hash and "changed in the store" in entry["rule"]
    assert "planned" not in [e.action for e in store.audit.entries()]
