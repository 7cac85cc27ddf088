"""Every mutating start waits for a replica: a real primary, replica and three sentinels,
real sshd hosts, and a replica held back (SIGSTOP) mid-run.

Each step appends a line to a marker file on its host: a step that ran twice shows twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import redis
import yaml

from agents.config import Config, load_config
from agents.engine.worker import Worker, WorkerOptions
from agents.plan.model import Plan
from agents.run.record import RunStatus, StepStatus
from agents.services import build_services
from agents.store import Store
from tests.fixtures.builders import make_plan
from tests.fixtures.polling import wait_until
from tests.fixtures.redis_sentinel import SentinelGroup
from tests.fixtures.sshd import SSHFleet
from tests.integration.test_store import submit

HOST = "staging-1"
TOOLS = {
    "mark": {"description": "append a line to the host's marker file (not idempotent)",
             "command": "echo {label} >> {host.dir}/marks; sleep 0.5",
             "target": "environment", "mutates": True, "rollback": "undo",
             "params": {"label": {"type": "string"}}},
    "undo": {"description": "put the host back", "target": "environment", "mutates": True,
             "command": "echo undo >> {host.dir}/marks"},
    "hold": {"description": "wait here until the test says go (read-only)",
             "command": "touch {vars.held}; for i in $(seq 1 600); do "
                        "[ -e {vars.go} ] && exit 0; sleep 0.05; done; exit 1",
             "idempotent": True, "timeout": 60},
}


def host_config(tmp_path: Path, fleet: SSHFleet, tools: dict[str, Any] = TOOLS) -> Config:
    """One staging host whose marker file (``marks``) records what ran on it; the tools'
    ``held``/``go``/``done`` files let a test pause a step and release it."""
    host_dir = tmp_path / "host"
    host_dir.mkdir()
    data = {
        "inventory": {"known_hosts": str(fleet.known_hosts),
                      "hosts": {HOST: fleet.inventory_host(HOST, vars={"dir": str(host_dir)})},
                      "environments": {"staging": {"hosts": [HOST]}}},
        "tools": tools,
        "vars": {"held": str(tmp_path / "held"), "go": str(tmp_path / "go"),
                 "done": str(tmp_path / "done")},
    }
    path = tmp_path / "deckhand.yml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


def one_hold_two(two: str = "mark") -> Plan:
    """one changes the host; hold waits for the test; two (tool ``two``) changes it again."""
    return make_plan(
        [{"id": "one", "tool": "mark", "params": {"environment": "staging", "label": "one"}},
         {"id": "hold", "tool": "hold", "depends_on": ["one"]},
         {"id": "two", "tool": two, "depends_on": ["hold"],
          "params": {"environment": "staging", "label": "two"}}],
        rollback=[{"id": "undo", "tool": "undo", "params": {"environment": "staging"}}])


def marks(tmp_path: Path) -> list[str]:
    """What ran on the host, a line each, oldest first."""
    path = tmp_path / "host" / "marks"
    return path.read_text().splitlines() if path.exists() else []


def _raw_run(port: int, run_id: str) -> dict:
    """The run record as Redis holds it, read without deckhand's store."""
    client = redis.Redis(port=port, socket_timeout=2)
    key = next(k for k in client.scan_iter(match=f"*run:{run_id}", count=1000))
    return dict(json.loads(client.get(key)))


def _step_two_refused(store: Store, run_id: str) -> bool:
    return store.runs.get(run_id).steps["two"].status is StepStatus.FAILED


def test_a_replica_stopped_mid_run_holds_the_next_batch_on_a_changed_host(
        tmp_path: Path, sentinel_group: SentinelGroup, sshd_hosts: SSHFleet) -> None:
    store = Store.connect(sentinel_group.url)
    store.replicate_timeout = store.replica_wait = 0.5  # refused after 1 s of waiting
    services = build_services(host_config(tmp_path, sshd_hosts), store=store)
    run = submit(services, one_hold_two(), approvers=("bob",))
    worker = Worker(services, store, name="w", options=WorkerOptions(block=0.1))
    thread = threading.Thread(target=worker.step)
    thread.start()
    try:
        wait_until((tmp_path / "held").exists, what="the run to reach its hold step")
        sentinel_group.pause_replica()  # after "one" changed the host, before "two"
        (tmp_path / "go").touch()
        wait_until(lambda: _step_two_refused(store, run.id), timeout=20,
                   what="step two to be refused")
    finally:
        sentinel_group.resume_replica()  # the rollback may then be replicated
        thread.join(60)
    final = store.runs.get(run.id)
    assert marks(tmp_path) == ["one", "undo"]  # "two" never ran on the host
    assert final.status is RunStatus.ROLLED_BACK, final.reason
    raw = _raw_run(sentinel_group.primary_port, run.id)
    assert raw["status"] == "rolled_back"
    assert "not started: replication to a Redis replica timed out" in raw["steps"]["two"][
        "error"]


def _spawn_worker(config: Config, url: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "worker", "--config", str(config.path), "--name",
         "doomed", "--lease", "1", "--claim-after", "1"],
        env={**os.environ, "REDIS_URL": url, "DECKHAND_REPLICA_WAIT": "0.5"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, cwd=Path(__file__).resolve().parents[2])


def test_a_crash_while_the_replica_lags_runs_nothing_twice_after_promotion(
        tmp_path: Path, sentinel_group: SentinelGroup, sshd_hosts: SSHFleet) -> None:
    """The replica falls behind (SIGSTOP), the worker refuses step two, then the worker and
    the primary die and Sentinel promotes the replica. (What the primary had sent is in the
    replica's socket buffer on loopback and still lands; test 1 is the one that needs a
    replica that never confirms.) The takeover resumes the rollback: each step ran once."""
    store = Store.connect(sentinel_group.url)
    config = host_config(tmp_path, sshd_hosts)
    services = build_services(config, store=store)
    run = submit(services, one_hold_two(), approvers=("bob",))
    doomed = _spawn_worker(config, sentinel_group.url)
    try:
        wait_until((tmp_path / "held").exists, timeout=30, what="the run to reach its hold")
        sentinel_group.pause_replica()  # from here the replica lags
        (tmp_path / "go").touch()
        # the dead worker's last act: "two" refused (its start never replicated) — or, as
        # before the fix, started on the host without waiting
        wait_until(lambda: _step_two_refused(store, run.id) or "two" in marks(tmp_path),
                   timeout=20, what="step two to be refused or to start")
    finally:
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)
        sentinel_group.kill_primary()
        sentinel_group.resume_replica()
    wait_until(lambda: sentinel_group.current_primary() == sentinel_group.replica_port,
               timeout=30, what="Sentinel to promote the lagging replica")
    rescuer = Worker(services, store, name="rescuer",
                     options=WorkerOptions(lease=1, claim_after=1, block=0.1))
    wait_until(lambda: rescuer.step(block=0.1) and store.runs.get(run.id).status.terminal,
               timeout=40, what="the rescuer to take the run over and finish it")
    final = store.runs.get(run.id)
    assert marks(tmp_path) == ["one", "undo"], final.reason  # each ran once on the host
    assert final.status is RunStatus.ROLLED_BACK, final.reason
    raw = _raw_run(sentinel_group.replica_port, run.id)
    assert raw["status"] == "rolled_back"
    assert "not started" in raw["steps"]["two"]["error"]
