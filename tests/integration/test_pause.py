"""Pause / Resume of a running run (issue 32): real redis-server, real sshd hosts, a real
worker. While paused nothing new starts on the hosts (marker files), the run keeps its lock,
and Resume lets it finish; a pause left past ``policy.pause_timeout`` (an injected clock)
rolls back only the hosts the run changed. The terminal and MCP refuse a stranger, and a
finished run, in one line — audited with who and through which face.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from agents.config import Config, load_config
from agents.engine.control import Control, steer
from agents.engine.worker import Worker, WorkerOptions
from agents.run.record import RunStatus, StepStatus
from agents.services import Services, build_services
from agents.store import Store
from bot.cli import main
from tests.fixtures.builders import make_plan
from tests.fixtures.polling import wait_until
from tests.fixtures.sshd import SSHFleet
from tests.integration.test_mcp_server import error_text, ok, server_env, stdio_session
from tests.integration.test_store import submit

WAIT_FOR_GO = "for i in $(seq 1 600); do [ -e {vars.go} ] && exit 0; sleep 0.05; done; exit 1"
TOOLS = {
    "mark": {"description": "append a line to each host's marker file",
             "command": "echo {label} >> {host.dir}/marks",
             "target": "environment", "mutates": True, "rollback": "undo",
             "params": {"label": {"type": "string"}}},
    "mark_and_wait": {"description": "mark the host, then wait until the test says go",
                      "command": "echo {label} >> {host.dir}/marks; touch {host.dir}/started; "
                                 + WAIT_FOR_GO,
                      "target": "environment", "mutates": True, "rollback": "undo",
                      "params": {"label": {"type": "string"}}, "timeout": 60},
    "undo": {"description": "put the host back", "target": "environment", "mutates": True,
             "command": "echo undo >> {host.dir}/marks"},
    "hold": {"description": "wait here until the test says go (read-only)",
             "command": "touch {vars.held}; " + WAIT_FOR_GO, "idempotent": True,
             "timeout": 60},
}
POLICY = {"environments": {env: {"approvers": {"users": ["bob"]}}
                           for env in ("staging", "production")}}


def _config(tmp_path: Path, fleet: SSHFleet) -> Config:
    names = ("staging-1", "prod-1", "prod-2")
    for name in names:
        (tmp_path / "hosts" / name).mkdir(parents=True)
    data = {
        "inventory": {
            "known_hosts": str(fleet.known_hosts),
            "hosts": {n: fleet.inventory_host(n, vars={"dir": str(tmp_path / "hosts" / n)})
                      for n in names},
            "environments": {"staging": {"hosts": ["staging-1"]},
                             "production": {"hosts": ["prod-1", "prod-2"],
                                            "rollout": {"batch_size": 1}}}},
        "tools": TOOLS,
        "policy": POLICY,
        "vars": {"held": str(tmp_path / "held"), "go": str(tmp_path / "go")},
    }
    path = tmp_path / "deckhand.yml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


def _marks(tmp_path: Path, host: str) -> list[str]:
    path = tmp_path / "hosts" / host / "marks"
    return path.read_text().splitlines() if path.exists() else []


def _start(services: Services, store: Store, plan: Any) -> tuple[str, threading.Thread]:
    run = submit(services, plan, by="alice", approvers=("bob",))
    worker = Worker(services, store, name="w", options=WorkerOptions(block=0.1))
    thread = threading.Thread(target=worker.step)
    thread.start()
    return run.id, thread


def _relayed(caplog: pytest.LogCaptureFixture, text: str) -> bool:
    """The worker's heartbeat has passed the request on to the run it executes."""
    return any(text in r.getMessage() for r in caplog.records if r.name == "deckhand.pause")


def _cli(capsys: pytest.CaptureFixture[str], config: Config, *args: str) -> tuple[int, str]:
    code = main([*args, "--config", str(config.path)])
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.fixture
def cli_store(store: Store, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Store:
    monkeypatch.setenv("REDIS_URL", redis_url)  # the terminal's commands share the store
    return store


def test_a_paused_run_starts_nothing_new_until_resumed(
        tmp_path: Path, cli_store: Store, sshd_hosts: SSHFleet,
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.INFO, logger="deckhand.pause")
    store, config = cli_store, _config(tmp_path, sshd_hosts)
    plan = make_plan(
        [{"id": "one", "tool": "mark", "params": {"environment": "staging", "label": "one"}},
         {"id": "hold", "tool": "hold", "depends_on": ["one"]},
         {"id": "two", "tool": "mark", "depends_on": ["hold"],
          "params": {"environment": "staging", "label": "two"}}],
        rollback=[{"id": "undo", "tool": "undo", "params": {"environment": "staging"}}])
    run_id, thread = _start(build_services(config, store=store), store, plan)
    try:
        wait_until((tmp_path / "held").exists, what="the run to reach its hold step")
        code, said = _cli(capsys, config, "pause", run_id, "--user", "alice")
        assert code == 0 and "pausing" in said
        wait_until(lambda: _relayed(caplog, "paused by alice"), what="the worker to see it")
        (tmp_path / "go").touch()  # the running step finishes; the next one must not start
        paused = wait_until(lambda: (r := store.runs.get(run_id)).paused and r,
                            what="the run to be held")
        assert paused.steps["hold"].status is StepStatus.SUCCEEDED
        assert paused.steps["two"].status is StepStatus.PENDING
        assert paused.paused.by == "alice" and paused.paused.before == "step two"
        assert _marks(tmp_path, "staging-1") == ["one"]  # nothing new on the host
        assert [lock.run_id for lock in store.locks.all()] == [run_id]  # still holds its lock
        code, shown = _cli(capsys, config, "runs", "show", run_id)
        assert code == 0 and "paused by alice (cli) since" in shown and "step two waits" in shown
        assert "rolls back at" in shown

        code, said = _cli(capsys, config, "resume", run_id, "--user", "bob")  # an approver
        assert code == 0 and "resumed" in said
    finally:
        (tmp_path / "go").touch()
        thread.join(60)
    final = store.runs.get(run_id)
    assert final.status is RunStatus.SUCCEEDED and final.paused is None
    assert _marks(tmp_path, "staging-1") == ["one", "two"]
    entries = [(e.action, e.actor, e.details.get("via")) for e in store.audit.entries(run_id=run_id)]
    assert ("pause_requested", "alice", "cli") in entries
    assert ("resume_requested", "bob", "cli") in entries
    assert [a for a, _, _ in entries if a in ("run_paused", "run_resumed")] == [
        "run_paused", "run_resumed"]
    assert store.runs.pause_requested(run_id) is None  # the request ended with the run


def test_an_expired_pause_rolls_back_only_the_changed_hosts(
        tmp_path: Path, redis_url: str, store: Store, sshd_hosts: SSHFleet,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="deckhand.pause")
    skew = [0.0]
    clocked = Store.connect(redis_url, clock=lambda: time.time() + skew[0])
    config = _config(tmp_path, sshd_hosts)
    plan = make_plan(
        [{"id": "roll", "tool": "mark_and_wait",
          "params": {"environment": "production", "label": "roll"}}],
        rollback=[{"id": "undo", "tool": "undo", "params": {"environment": "production"}}])
    run_id, thread = _start(build_services(config, store=clocked), clocked, plan)
    try:
        wait_until((tmp_path / "hosts" / "prod-1" / "started").exists,
                   what="batch 1 of 2 to start")
        steer(config.policy, Control.PAUSE, run_id, runs=clocked.runs, audit=clocked.audit,
              user="alice", via="cli")
        wait_until(lambda: _relayed(caplog, "paused by alice"), what="the worker to see it")
        (tmp_path / "go").touch()  # batch 1 ends; batch 2 is held
        held = wait_until(lambda: (r := clocked.runs.get(run_id)).paused and r,
                          what="the run to be held before batch 2")
        assert held.paused.before == "batch 2 of 2 of roll"
        assert _marks(tmp_path, "prod-2") == []
        skew[0] = config.policy.pause_timeout + 1  # half an hour later, nobody resumed it
    finally:
        (tmp_path / "go").touch()
        thread.join(60)
    final = clocked.runs.get(run_id)
    assert final.status is RunStatus.CANCELLED, final.reason
    assert "paused by alice for 30m; pause expired" in (final.reason or "")
    assert _marks(tmp_path, "prod-1") == ["roll", "undo"]  # changed, so undone
    assert _marks(tmp_path, "prod-2") == []  # never started, never touched
    expired = [e for e in clocked.audit.entries(run_id=run_id) if e.action == "pause_expired"]
    assert [e.details["paused_by"] for e in expired] == ["alice"]


def test_a_stranger_or_a_finished_run_is_refused_in_one_line(
        tmp_path: Path, cli_store: Store, redis_url: str, sshd_hosts: SSHFleet,
        capsys: pytest.CaptureFixture[str]) -> None:
    store, config = cli_store, _config(tmp_path, sshd_hosts)
    plan = make_plan([{"id": "one", "tool": "mark",
                       "params": {"environment": "staging", "label": "one"}}],
                     rollback=[{"id": "undo", "tool": "undo",
                                "params": {"environment": "staging"}}])
    run_id, thread = _start(build_services(config, store=store), store, plan)
    thread.join(60)
    assert store.runs.get(run_id).status is RunStatus.SUCCEEDED

    for command in ("pause", "resume", "stop"):
        code, said = _cli(capsys, config, command, run_id, "--user", "mallory")
        assert code == 3 and said.count("\n") == 1, said
        assert "only the requester (alice) or an approver" in said
    code, said = _cli(capsys, config, "pause", run_id, "--user", "alice")
    assert code == 3 and "already ended (succeeded); there is nothing to pause" in said

    env = server_env(config.path, redis_url)

    async def scenario() -> list[str]:
        async with stdio_session(env, name="stranger") as session:
            told = [error_text(await session.call_tool(name, {"run_id": run_id}))
                    for name in ("pause_run", "resume_run", "stop_run")]
            status = ok(await session.call_tool("run_status", {"run_id": run_id}))
            assert status["paused"] is None
            return told

    for text in anyio.run(scenario):
        assert "only the requester (alice) or an approver" in text
    refusals = [(e.action, e.actor, e.details.get("via"))
                for e in store.audit.entries(run_id=run_id) if e.action.endswith("_refused")]
    assert [r for r in refusals if r[2] == "cli"] == [
        ("pause_refused", "mallory", "cli"), ("resume_refused", "mallory", "cli"),
        ("stop_refused", "mallory", "cli"), ("pause_refused", "alice", "cli")]
    assert [r for r in refusals if r[2] == "mcp"] == [
        ("pause_refused", "mcp:stranger", "mcp"), ("resume_refused", "mcp:stranger", "mcp"),
        ("stop_refused", "mcp:stranger", "mcp")]
    assert store.runs.pause_requested(run_id) is None
