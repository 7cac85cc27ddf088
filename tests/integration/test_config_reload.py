"""Issue 32: ``deckhand worker`` and ``deckhand serve`` reload their config on SIGHUP —
and (issue 39.6) ``schedules serve`` and ``mcp --http`` through the same path — real
processes, real Redis. A valid file is swapped in for what starts next and its
policy diff audited (``config_reloaded``); an invalid one is refused in one log line,
audited (``config_reload_refused``), and the rule in force stays."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from agents.config import load_config
from agents.engine.reload import ConfigReload
from agents.errors import NotFound
from agents.run.record import Run, RunStatus
from agents.schedules.keys import occurrence_run_id
from agents.schedules.model import Schedule
from agents.services import Services, build_services
from agents.store import AuditEntry, Store
from bot.cli.reload import hold_sighup, reload_on_sighup
from bot.slack import blocks as bk
from tests.fixtures.polling import wait_until
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.sample import free_port
from tests.fixtures.slack_standin import Signer, SlackStandin
from tests.fixtures.slack_world import SECRET
from tests.integration.test_mcp_server import ok
from tests.integration.test_store import submit

ROOT = Path(__file__).resolve().parents[2]

CONFIG = """
inventory:
  hosts:
    web-1: {connection: local, vars: {dir: "{config_dir}/web-1"}}
  environments:
    staging: {hosts: [web-1]}
tools:
  ship:
    description: put a version on every host of an environment
    command: "mkdir -p {host.dir} && echo {version} >> {host.dir}/versions"
    target: environment
    params: {version: {pattern: '^v\\d+\\.\\d+\\.\\d+$'}}
    mutates: true
    rollback: undo
  undo:
    description: undo
    command: "true"
    target: environment
    mutates: true
playbooks:
  - name: ship
    match: ['^staging (?P<version>v\\S+)$']
    goal: "staging {version}"
    steps: [{id: ship, tool: ship, params: {environment: staging, version: "{version}"}}]
    rollback: [{id: undo, tool: undo, params: {environment: staging}}]
policy:
  environments:
    staging: {approvers: {users: [bob]}}
"""

FREEZE = """
  freeze:
    - {environments: [staging], reason: audit week, start: "START", end: "END"}
"""


def frozen_config() -> str:
    now = datetime.now(UTC)
    return textwrap.dedent(CONFIG) + FREEZE.replace(
        "START", (now - timedelta(hours=1)).isoformat()).replace(
        "END", (now + timedelta(days=1)).isoformat())


def invalid_config() -> str:
    return textwrap.dedent(CONFIG) + "  limits:\n    stagin: {runs_per_hour: 3}\n"


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "deckhand.yml"
    path.write_text(textwrap.dedent(CONFIG))
    return path


@pytest.fixture
def worker(config_file: Path, redis_url: str, store: Store, tmp_path: Path
           ) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "worker", "--config", str(config_file),
             "--name", "w-reload", "--lease", "2"],
            env={**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)},
            stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        wait_until(lambda: "worker w-reload ready" in log.read_text(), timeout=30,
                   what="the worker to start")
        yield proc, log
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[bytes]) -> int | None:
    """SIGTERM, then its exit code; killed (None) if it has not exited within 30 s."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None


def approved(services: Services, text: str) -> Run:
    """A run approved under the test's own (first) config: the worker decides what starts."""
    return submit(services, services.make_plan(text, requested_by="alice", face="cli"))


def audited(store: Store, action: str, count: int = 1) -> AuditEntry:
    found: list[AuditEntry] = []

    def seen() -> bool:
        found[:] = [e for e in store.audit.entries(limit=500) if e.action == action]
        return len(found) >= count

    wait_until(seen, timeout=30, what=f"{count} audit entry {action}")
    return found[-1]


def ended(store: Store, run_id: str) -> Run:
    wait_until(lambda: store.runs.get(run_id).status.terminal, timeout=60,
               what=f"run {run_id} to end")
    return store.runs.get(run_id)


def test_worker_reloads_on_sighup_and_keeps_its_rule_when_the_file_is_invalid(
        worker: tuple[subprocess.Popen[bytes], Path], config_file: Path, store: Store,
        tmp_path: Path) -> None:
    proc, log = worker
    services = build_services(load_config(config_file), store=store)
    versions = tmp_path / "web-1" / "versions"
    first = approved(services, "staging v1.0.0")
    assert ended(store, first.id).status is RunStatus.SUCCEEDED
    assert versions.read_text().split() == ["v1.0.0"]

    config_file.write_text(frozen_config())
    proc.send_signal(signal.SIGHUP)
    entry = audited(store, "config_reloaded")
    assert entry.actor == "w-reload" and entry.details["policy_changed"] is True
    assert entry.details["diff"][0].startswith("staging: changed (freeze windows: added ")
    assert entry.details["diff"][0].endswith(
        ": audit week; break-glass granted by: none → nobody)")
    second = approved(services, "staging v1.0.1")  # approved before the freeze reached it
    run = ended(store, second.id)
    assert run.status is RunStatus.CANCELLED and "staging is frozen" in (run.reason or "")
    assert versions.read_text().split() == ["v1.0.0"]  # nothing ran on the host

    config_file.write_text(invalid_config())
    proc.send_signal(signal.SIGHUP)
    refused = audited(store, "config_reload_refused")
    line = config_file.read_text().splitlines().index("    stagin: {runs_per_hour: 3}") + 1
    assert refused.details["reason"] == (
        f"{config_file}:{line} policy.limits.stagin: unknown environment 'stagin' (known: "
        f"staging)")
    said = [line for line in log.read_text().splitlines() if "reload refused" in line]
    assert len(said) == 1 and "policy.limits.stagin" in said[0]
    third = approved(services, "staging v1.0.2")
    assert ended(store, third.id).status is RunStatus.CANCELLED  # the freeze is still in force
    assert versions.read_text().split() == ["v1.0.0"]
    assert proc.poll() is None  # still serving


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return int(reply.status)
    except (urllib.error.URLError, OSError):
        return 0


def _click(signer: Signer, run: Run, *, user: str) -> None:
    status, _, _ = signer.interaction({
        "type": "block_actions", "user": {"id": user, "username": user}, "team": {"id": "T1"},
        "api_app_id": "A1", "trigger_id": f"trig-{time.time_ns()}",
        "channel": {"id": "CDEPLOY"}, "container": {"type": "message"},
        "response_url": "", "actions": [{"type": "button", "action_id": bk.ActionId.APPROVE,
                                         "block_id": "b", "value": bk.button_value(run),
                                         "action_ts": str(time.time())}]})
    assert status == 200


def test_serve_reloads_on_sighup_and_approvals_follow_the_new_rule(
        config_file: Path, redis_url: str, store: Store, slack_standin: SlackStandin,
        tmp_path: Path) -> None:
    config_file.write_text(textwrap.dedent(CONFIG).replace("users: [bob]", "users: [UBOB]"))
    services = build_services(load_config(config_file), store=store)
    port, log = free_port(), tmp_path / "serve.log"
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT),
           "SLACK_BOT_TOKEN": "xoxb-test-token", "SLACK_SIGNING_SECRET": SECRET,
           "SLACK_API_URL": f"{slack_standin.url}/api/"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "serve", "--http", "--host", "127.0.0.1",
             "--port", str(port), "--workers", "0", "--metrics-port", "0",
             "--config", str(config_file)], env=env, stdout=out, stderr=subprocess.STDOUT,
            cwd=ROOT)
    try:
        wait_until(lambda: _get(f"http://127.0.0.1:{port}/healthz") == 200, timeout=60,
                   what="serve to answer /healthz")
        signer = Signer(SECRET, f"http://127.0.0.1:{port}/slack/events")
        config_file.write_text(textwrap.dedent(CONFIG).replace("users: [bob]",
                                                               "users: [UCAROL]"))
        proc.send_signal(signal.SIGHUP)
        entry = audited(store, "config_reloaded")
        assert entry.actor.startswith("serve ")
        assert entry.details["diff"][0] == (
            "staging: changed (who may approve: staging: UBOB → staging: UCAROL; "
            "approvers by name: added UCAROL; removed UBOB)")

        waiting = _waiting(services, "staging v1.0.0")
        _click(signer, waiting, user="UBOB")  # the rule it started with; no longer in force
        said = slack_standin.wait_for(lambda: [c for c in slack_standin.of(
            "chat.postEphemeral") if "Not approved" in str(c.payload.get("text"))],
            what="the refusal")
        assert "UCAROL" in str(said[0].payload["text"])
        assert store.runs.get(waiting.id).approvals == []
        _click(signer, waiting, user="UCAROL")
        wait_until(lambda: store.runs.get(waiting.id).status is RunStatus.QUEUED,
                   what="UCAROL's approval to queue the run")

        config_file.write_text(invalid_config())
        proc.send_signal(signal.SIGHUP)
        assert audited(store, "config_reload_refused").actor.startswith("serve ")
        assert proc.poll() is None
    finally:
        stop(proc)


def _waiting(services: Services, text: str) -> Run:
    return submit(services, services.make_plan(text, requested_by="UALICE", face="cli"),
                  by="UALICE", approvers=())


def test_a_reload_the_store_cannot_audit_is_not_applied_and_the_next_one_is(
        config_file: Path, own_redis: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    """Redis down at SIGHUP: the new rule is not put in force unrecorded, and the reload
    thread lives on to apply it at the next SIGHUP once Redis answers."""
    store = Store.connect(own_redis.url)
    services = build_services(load_config(config_file), store=store)
    reload, stop = ConfigReload(services, actor="worker w"), threading.Event()
    reload.start(stop)
    try:
        config_file.write_text(textwrap.dedent(CONFIG).replace("users: [bob]", "users: [carol]"))
        own_redis.stop()
        reload.request()
        wait_until(lambda: "the store cannot record it" in caplog.text, timeout=60,
                   what="the reload to be refused for want of an audit")
        assert _approvers(services) == ["bob"]
        own_redis.start()
        reload.request()
        wait_until(lambda: _approvers(services) == ["carol"], timeout=30,
                   what="the next reload to apply the file")
        assert audited(store, "config_reloaded").actor == "worker w"
    finally:
        stop.set()


def _approvers(services: Services) -> list[str]:
    return list(services.config.policy.environments["staging"].approvers.users)


RELOADED = textwrap.dedent(CONFIG).replace('goal: "staging {version}"',
                                           'goal: "reloaded: staging {version}"')
"""The first config with another goal: a plan made after the reload says which file made it."""


def _due(store: Store, request: str) -> tuple[str, datetime]:
    """A schedule whose one occurrence was due two minutes ago (it fires at once, once)."""
    now = datetime.now(UTC)
    fire = (now - timedelta(minutes=2)).replace(second=0, microsecond=0)
    cron = f"{fire.minute} {fire.hour} {fire.day} {fire.month} *"
    schedule = store.schedules.create(Schedule(
        spec=cron, cron=cron, request=request, created_by="U1",
        created_at=now - timedelta(minutes=10), armed_at=now - timedelta(minutes=10)))
    return schedule.id, fire


def _planned_goal(store: Store, schedule: tuple[str, datetime]) -> str:
    run_id = occurrence_run_id(*schedule)

    def fired() -> bool:
        try:
            store.runs.get(run_id)
        except NotFound:
            return False
        return True

    wait_until(fired, timeout=30, what=f"schedule {schedule[0]} to fire")
    run = store.runs.get(run_id)
    return store.plans.get(run.plan_id, run.plan_version).goal


def test_schedules_serve_reloads_on_sighup_and_plans_from_the_new_config(
        config_file: Path, redis_url: str, store: Store, tmp_path: Path) -> None:
    """Issue 39.6: SIGHUP killed `schedules serve`; ignored, it went on planning from the old
    file. Now it reloads like serve and worker: occurrences plan from the new file, a broken
    one is refused (audited) and the one in force stays."""
    first = _due(store, "staging v1.0.0")
    log = tmp_path / "scheduler.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "schedules", "serve", "--config",
             str(config_file)], env={**os.environ, "REDIS_URL": redis_url,
                                     "PYTHONPATH": str(ROOT)},
            stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        assert _planned_goal(store, first) == "staging v1.0.0"  # at start, the first file
        config_file.write_text(RELOADED)
        proc.send_signal(signal.SIGHUP)
        assert audited(store, "config_reloaded").actor.startswith("scheduler-")
        second = _due(store, "staging v1.0.1")
        config_file.write_text(invalid_config())
        proc.send_signal(signal.SIGHUP)  # refused; the schedules are re-read all the same
        assert audited(store, "config_reload_refused").actor.startswith("scheduler-")
        assert _planned_goal(store, second) == "reloaded: staging v1.0.1"
        assert proc.poll() is None, log.read_text()
    finally:
        assert stop(proc) == 0
    said = log.read_text()
    assert said.count("config reloaded from") == 1 and said.count("reload refused") == 1


def test_mcp_http_reloads_on_sighup_and_plans_from_the_new_config(
        config_file: Path, redis_url: str, store: Store, tmp_path: Path) -> None:
    port, log = free_port(), tmp_path / "mcp.log"
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT),
           "DECKHAND_MCP_TOKENS": f"UALICE={MCP_TOKEN}"}
    env.pop("SLACK_BOT_TOKEN", None)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "mcp", "--http", "--port", str(port),
             "--config", str(config_file)], env=env, stdout=out, stderr=subprocess.STDOUT,
            cwd=ROOT)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_until(lambda: proc.poll() is not None or _listening(port), timeout=60,
                   what="deckhand mcp --http to listen")
        assert _mcp_goal(url, "staging v1.0.0") == "staging v1.0.0"
        config_file.write_text(RELOADED)
        proc.send_signal(signal.SIGHUP)
        assert audited(store, "config_reloaded").actor.startswith("mcp ")
        assert _mcp_goal(url, "staging v1.0.1") == "reloaded: staging v1.0.1"
        config_file.write_text(invalid_config())
        proc.send_signal(signal.SIGHUP)
        assert audited(store, "config_reload_refused").actor.startswith("mcp ")
        assert _mcp_goal(url, "staging v1.0.2") == "reloaded: staging v1.0.2"
        assert proc.poll() is None, log.read_text()
    finally:
        assert stop(proc) in (0, -signal.SIGTERM)  # uvicorn re-raises the SIGTERM it handled
    assert "Logging error" not in log.read_text()  # uvicorn's access lines pass the log door


MCP_TOKEN = "t0ken-for-alice-0123456789abcdef"


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _mcp_goal(url: str, request: str) -> str:
    """The goal of the plan `deckhand mcp --http` makes of ``request`` (a session each)."""
    async def scenario() -> str:
        client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {MCP_TOKEN}"})
        async with client, streamable_http_client(url, http_client=client) as (
                read, write, *_), ClientSession(read, write) as session:
            await session.initialize()
            return str(ok(await session.call_tool("plan", {"request": request}))["plan"]["goal"])

    return anyio.run(scenario)


def test_a_sighup_while_the_process_starts_is_a_reload_once_it_can_reload(
        config_file: Path, store: Store) -> None:
    """Between `main()` and the reload being set up (config, Redis, Sentinel: seconds), a
    SIGHUP used to be taken for a terminal hanging up, and stdout and stderr — a
    container's log — went to /dev/null for the life of the process."""
    services = build_services(load_config(config_file), store=store)
    before, stop_reloads = signal.getsignal(signal.SIGHUP), threading.Event()
    try:
        hold_sighup()
        os.kill(os.getpid(), signal.SIGHUP)  # handled at once, in this (the main) thread
        config_file.write_text(textwrap.dedent(CONFIG).replace("users: [bob]", "users: [carol]"))
        reload_on_sighup(services, actor="starting", stop=stop_reloads)
        assert audited(store, "config_reloaded").actor == "starting"
        # the reload thread audits, then swaps: the new rules are in force a moment later
        wait_until(lambda: _approvers(services) == ["carol"], what="the reloaded rules")
    finally:
        stop_reloads.set()
        signal.signal(signal.SIGHUP, before)
