"""Go/no-go between rollout batches (issue 32): after batch 1 the rollout holds — nothing
starts on the next host — until someone allowed decides Continue or Roll back, or the
timeout applies ``on_timeout``. Hosts are real sshd processes (marker files on each), runs
are stored in a real Redis and executed by a real worker; the clock is injected.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import yaml
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from agents.config import load_config
from agents.engine.worker import Worker, WorkerOptions
from agents.errors import ApprovalRefused
from agents.run.record import Run, RunStatus, Verdict
from agents.services import Services, build_services
from agents.store import Store
from bot.cli import main
from tests.fixtures.polling import wait_until
from tests.fixtures.sample import free_port
from tests.fixtures.sshd import SSHFleet

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "t0ken-for-carol-0123456789abcdef"
HOSTS = ("prod-1", "prod-2", "prod-3")
TOOLS = {
    "deploy": {"description": "put a version on every host of an environment",
               "command": "mkdir -p {host.dir} && echo {version} > {host.dir}/version",
               "target": "environment", "mutates": True, "rollback": "undo",
               "params": {"version": {"pattern": r"^v\d+\.\d+\.\d+$"}}},
    "undo": {"description": "undo on every changed host of an environment",
             "command": "mkdir -p {host.dir} && echo undone > {host.dir}/undo",
             "target": "environment", "mutates": True},
}
PLAYBOOKS = [{"name": "ship", "match": [r"^ship (?P<version>v\S+)$"], "goal": "ship {version}",
              "steps": [{"id": "ship", "tool": "deploy",
                         "params": {"environment": "production", "version": "{version}"}}],
              "rollback": [{"id": "undo", "tool": "undo",
                            "params": {"environment": "production"}}]}]
POLICY = {"environments": {"production": {"approvers": {"users": ["alice", "bob", "carol"]},
                                          "self_approval": False}}}


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def write(tmp_path: Path, fleet: SSHFleet, judgment: dict[str, Any]) -> Path:
    hosts = {n: fleet.inventory_host(n, vars={"dir": str(tmp_path / "hosts" / n)})
             for n in HOSTS}
    doc = {"tools": TOOLS, "playbooks": PLAYBOOKS, "policy": POLICY,
           "inventory": {"known_hosts": str(fleet.known_hosts), "hosts": hosts,
                         "environments": {"production": {"hosts": list(HOSTS), "rollout": {
                             "batch_size": 1, "judgment": judgment}}}}}
    path = tmp_path / "deckhand.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


class Deploy:
    """One approved run, executed by a worker on a thread of its own."""

    def __init__(self, tmp_path: Path, services: Services, clock: Clock):
        self.tmp_path, self.services, self.store, self.clock = \
            tmp_path, services, services.store, clock
        plan = services.make_plan("ship v1.2.3", requested_by="alice", face="cli")
        self.store.plans.save(plan)
        run = self.store.runs.create(Run.for_plan(plan, services.targets(plan)))
        self.run_id = self.store.runs.approve(
            run.id, face="cli", user="bob", plan_version=run.plan_version, plan_hash=run.plan_hash,
            policy=services.config.policy).id
        worker = Worker(services, self.store, name="w1", options=WorkerOptions(block=0.1))
        self.thread = threading.Thread(target=worker.process, args=(self.run_id,), daemon=True)
        self.thread.start()

    def held(self) -> Run:
        return wait_until(lambda: (r := self.store.runs.get(self.run_id)).awaiting and r,
                          what="the run to hold for a go/no-go")

    def finished(self) -> Run:
        self.thread.join(timeout=60)
        assert not self.thread.is_alive()
        return self.store.runs.get(self.run_id)

    def marker(self, host: str, name: str = "version") -> str | None:
        path = self.tmp_path / "hosts" / host / name
        return path.read_text().strip() if path.exists() else None

    def audited(self, action: str) -> list[Any]:
        return [e for e in self.store.audit.entries(run_id=self.run_id) if e.action == action]


@pytest.fixture
def deploy(tmp_path: Path, sshd_hosts: SSHFleet, redis_url: str,
           request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Deploy]:
    monkeypatch.setenv("REDIS_URL", redis_url)  # `deckhand judge` and `runs show` read it
    judgment = getattr(request, "param", {"after_batches": [1], "timeout": "30m"})
    config = load_config(write(tmp_path, sshd_hosts, judgment))
    clock = Clock(1_800_000_000.0)
    store = Store.connect(redis_url)
    store.r.flushdb()
    services = build_services(config, store=store)
    services.executor.deps.clock = clock
    started = Deploy(tmp_path, services, clock)
    yield started
    if started.thread.is_alive():  # a failed test: let the worker roll back and go
        store.runs.request_cancel(started.run_id, user="test")
        started.thread.join(timeout=60)
    services.close()


def test_nothing_starts_on_the_next_host_until_continue(
        deploy: Deploy, capsys: pytest.CaptureFixture[str]) -> None:
    run = deploy.held()
    assert run.awaiting is not None and run.awaiting.hosts_done == ["prod-1"]
    assert [deploy.marker(h) for h in HOSTS] == ["v1.2.3", None, None]
    assert deploy.store.r.get(deploy.store.keys.owner(run.id)) == b"w1"  # lease and lock kept
    assert deploy.store.r.get(deploy.store.keys.lock(None, "production"))
    assert main(["runs", "show", run.id, "--config", str(deploy.tmp_path / "deckhand.yml")]) == 0
    shown = capsys.readouterr().out
    assert "awaiting go/no-go after batch 1 of 3 of ship since" in " ".join(shown.split())

    # the requester may not decide it here (self-approval is off): one line, audited
    with pytest.raises(ApprovalRefused, match="someone else's to decide"):
        deploy.store.judgments.decide(run.id, Verdict.CONTINUE, user="alice", via="cli",
                                      policy=deploy.services.config.policy)
    assert main(["judge", run.id, "continue", "--user", "mallory",
                 "--config", str(deploy.tmp_path / "deckhand.yml")]) != 0
    assert "refused: you may not decide this go/no-go" in capsys.readouterr().out
    assert [e.actor for e in deploy.audited("judgment_refused")] == ["alice", "mallory"]
    assert [deploy.marker(h) for h in HOSTS] == ["v1.2.3", None, None]

    assert main(["judge", run.id[:10], "continue", "--user", "carol",
                 "--config", str(deploy.tmp_path / "deckhand.yml")]) == 0
    final = deploy.finished()
    assert final.status is RunStatus.SUCCEEDED
    assert [deploy.marker(h) for h in HOSTS] == ["v1.2.3"] * 3
    assert [deploy.marker(h, "undo") for h in HOSTS] == [None] * 3
    judged = deploy.audited("judged")
    assert [(e.actor, e.details["decision"], e.details["batch"], e.details["via"])
            for e in judged] == [("carol", "continue", 1, "cli")]
    assert final.judgments[0].decision is not None
    assert final.judgments[0].decision.actor == "carol"


def test_roll_back_undoes_only_the_hosts_changed_so_far(deploy: Deploy) -> None:
    run = deploy.held()
    deploy.store.judgments.decide(run.id, Verdict.ROLLBACK, user="bob", via="cli",
                                  policy=deploy.services.config.policy)
    final = deploy.finished()
    assert final.status is RunStatus.ROLLED_BACK
    assert "no-go after batch 1 of 3 of ship" in (final.reason or "")
    assert final.changed_hosts == ["prod-1"]
    assert [deploy.marker(h, "undo") for h in HOSTS] == ["undone", None, None]
    assert [deploy.marker(h) for h in HOSTS] == ["v1.2.3", None, None]
    with pytest.raises(ApprovalRefused, match="already decided"):  # a late second click
        deploy.store.judgments.decide(run.id, Verdict.CONTINUE, user="carol", via="cli",
                                      policy=deploy.services.config.policy,
                                      hold=run.awaiting.hold if run.awaiting else None)


def test_a_cancel_while_holding_rolls_back_and_answers_the_hold(deploy: Deploy) -> None:
    run = deploy.held()
    deploy.store.runs.request_cancel(run.id, user="bob")  # Stop, `deckhand cancel`
    final = deploy.finished()
    assert final.status is RunStatus.CANCELLED and final.awaiting is None
    decision = final.judgments[0].decision
    assert decision is not None and decision.via == "cancel"
    assert "cancelled by bob" in (decision.reason or "")
    assert [deploy.marker(h, "undo") for h in HOSTS] == ["undone", None, None]


@pytest.mark.parametrize("deploy", [
    {"after_batches": [1], "timeout": "30m", "on_timeout": "rollback"},
    {"after_batches": [1], "timeout": "30m", "on_timeout": "continue"},
], indirect=True, ids=["rollback", "continue"])
def test_the_timeout_applies_on_timeout_and_says_so(deploy: Deploy) -> None:
    run = deploy.held()
    assert run.awaiting is not None
    on_timeout = run.awaiting.on_timeout
    deploy.clock.now += 29 * 60  # not yet
    with pytest.raises(AssertionError, match="timed out"):
        wait_until(lambda: deploy.store.runs.get(run.id).awaiting is None, timeout=1.0,
                   what="nothing (29 minutes is within the timeout)")
    deploy.clock.now += 61
    final = deploy.finished()
    decision = final.judgments[0].decision
    assert decision is not None and decision.via == "timeout"
    assert "no go/no-go decision within 30m" in (decision.reason or "")
    judged = deploy.audited("judged")
    assert [(e.details["via"], e.details["decision"]) for e in judged] == \
        [("timeout", on_timeout.value)]
    if on_timeout is Verdict.ROLLBACK:
        assert final.status is RunStatus.ROLLED_BACK
        assert "no go/no-go decision within 30m" in (final.reason or "")
        assert [deploy.marker(h, "undo") for h in HOSTS] == ["undone", None, None]
    else:
        assert final.status is RunStatus.SUCCEEDED
        assert [deploy.marker(h) for h in HOSTS] == ["v1.2.3"] * 3


@pytest.mark.parametrize("deploy", [{"after_batches": [1], "approvers": ["carol"]}],
                         indirect=True, ids=["carol-only"])
def test_judgment_approvers_narrow_who_may_decide(deploy: Deploy) -> None:
    run = deploy.held()
    with pytest.raises(ApprovalRefused, match=r"only carol may decide"):  # bob may approve
        deploy.store.judgments.decide(run.id, Verdict.CONTINUE, user="bob", via="cli",
                                      policy=deploy.services.config.policy)
    deploy.store.judgments.decide(run.id, Verdict.CONTINUE, user="carol", via="cli",
                                  policy=deploy.services.config.policy)
    assert deploy.finished().status is RunStatus.SUCCEEDED


def test_mcp_judge_run_acts_only_for_a_verified_user(deploy: Deploy, redis_url: str) -> None:
    run = deploy.held()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REDIS_URL": redis_url,
           "DECKHAND_CONFIG": str(deploy.tmp_path / "deckhand.yml"),
           "DECKHAND_MCP_TOKENS": f"carol={TOKEN}"}
    env.pop("SLACK_BOT_TOKEN", None)

    async def on_stdio() -> str:  # a stdio client's name is only what it calls itself
        params = StdioServerParameters(command=sys.executable, args=["-m", "bot.cli", "mcp"],
                                       env=env, cwd=str(ROOT))
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            status = await s.call_tool("run_status", {"run_id": run.id})
            assert "awaiting go/no-go" in str(status.structured_content)
            refused = await s.call_tool("judge_run", {"run_id": run.id, "decision": "continue"})
            assert refused.is_error
            return " ".join(getattr(c, "text", "") for c in refused.content)

    assert "needs a verified user" in anyio.run(on_stdio)
    assert deploy.store.runs.get(run.id).awaiting is not None

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bot.cli", "mcp", "--http", "--port",
                             str(port)], env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: proc.poll() is not None or _listening(port), timeout=60,
                   what="deckhand mcp --http to listen")

        async def over_http() -> None:
            client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"})
            async with client, streamable_http_client(
                    f"http://127.0.0.1:{port}/mcp", http_client=client) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                done = await session.call_tool("judge_run",
                                               {"run_id": run.id, "decision": "continue"})
                assert not done.is_error, done.content

        anyio.run(over_http)
    finally:
        proc.terminate()
        proc.wait(30)
    assert deploy.finished().status is RunStatus.SUCCEEDED
    assert [deploy.marker(h) for h in HOSTS] == ["v1.2.3"] * 3
    assert [(e.actor, e.details["via"]) for e in deploy.audited("judgment_refused")] == \
        [("mcp:mcp", "mcp")]
    assert [(e.actor, e.details["via"]) for e in deploy.audited("judged")] == [("carol", "mcp")]


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0
