"""A Redis outage longer than the worker's lease, with a real worker process, a real
redis-server shut down and restarted on the same port, and a real sshd host.

The worker starts no command while it cannot vouch for its lease (fencing at the command
boundary); what it could not write lands, in order, once Redis is back; the run that did
all its work is not rolled back, nor taken over by its own worker as if from a stranger;
no audit entry is lost — in the stream, nor in the SIEM's copy, which the worker's audit
shipper sends through the same outages.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import yaml

from agents.config import Config, load_config
from agents.plan.model import Plan
from agents.run.record import Run, RunStatus, StepStatus
from agents.services import build_services
from agents.store import Store
from agents.store.chain import verify_copy
from tests.fixtures.builders import make_plan
from tests.fixtures.polling import wait_until
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.siem_standin import SiemStandin
from tests.fixtures.sshd import SSHFleet
from tests.integration.test_audit_sink import once, stream_keys
from tests.integration.test_store import submit

ROOT = Path(__file__).resolve().parents[2]

TOOLS = {
    "mark": {"description": "mark the host, wait for the test's go-ahead, mark it again",
             "command": "echo start {label} >> {host.dir}/log; "
                        "while [ ! -e {host.dir}/go-{label} ]; do sleep 0.05; done; "
                        "echo done {label} >> {host.dir}/log",
             "target": "environment", "mutates": True, "rollback": "undo",
             "params": {"label": {"type": "string"}}},
    "undo": {"description": "undo on the host", "command": "echo undo >> {host.dir}/log",
             "target": "environment", "mutates": True},
}


def _config(tmp_path: Path, fleet: SSHFleet, siem: SiemStandin) -> Path:
    host_dir = tmp_path / "host"
    host_dir.mkdir()
    for label in ("a",):  # released from the start
        (host_dir / f"go-{label}").touch()
    data = {"inventory": {"known_hosts": str(fleet.known_hosts),
                          "hosts": {"staging-1": fleet.inventory_host(
                              "staging-1", vars={"dir": str(host_dir)})},
                          "environments": {"staging": {"hosts": ["staging-1"]}}},
            "tools": TOOLS,
            "audit": {"sink": {"webhook": {"url": siem.url}, "batch": 5, "backoff": 0.05,
                               "max_backoff": 0.2}}}
    path = tmp_path / "deckhand.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _host_log(tmp_path: Path) -> list[str]:
    path = tmp_path / "host" / "log"
    return path.read_text().splitlines() if path.exists() else []


def _worker_log(tmp_path: Path) -> str:
    return (tmp_path / "worker.err").read_text()


def _marks(*labels: str) -> Plan:
    """A plan marking the host with each label in turn (each after the one before), on
    staging, with one undo."""
    env = {"environment": "staging"}
    steps = [{"id": label, "tool": "mark", "params": {"label": label, **env},
              **({"depends_on": [labels[i - 1]]} if i else {})}
             for i, label in enumerate(labels)]
    return make_plan(steps, rollback=[{"id": "undo", "tool": "undo", "params": env}])


def _start_worker(tmp_path: Path, config: Config, redis_url: str, *,
                  claim_after: int) -> subprocess.Popen[bytes]:
    """A real `deckhand worker` named steady, its lease 2 s, stderr in worker.err."""
    with (tmp_path / "worker.err").open("wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "worker", "--config", str(config.path),
             "--name", "steady", "--lease", "2", "--claim-after", str(claim_after)],
            env={**os.environ, "REDIS_URL": redis_url}, cwd=ROOT,
            stdout=subprocess.DEVNULL, stderr=err)


def test_a_redis_outage_longer_than_the_lease_fences_commands_and_loses_nothing(
        tmp_path: Path, own_redis: RedisServer, sshd_hosts: SSHFleet,
        siem: SiemStandin) -> None:
    config = load_config(_config(tmp_path, sshd_hosts, siem))
    store = Store.connect(own_redis.url)
    services = build_services(config, store=store)
    run = submit(services, _marks("a", "b", "c"))
    proc = _start_worker(tmp_path, config, own_redis.url, claim_after=3)
    try:
        # outage 1, while b runs: b finishes during it; c must not start until it ends
        wait_until(lambda: "start b" in _host_log(tmp_path), timeout=30, what="b to start")
        own_redis.stop()
        (tmp_path / "host" / "go-b").touch()
        wait_until(lambda: "no command starts until the lease is renewed"
                   in _worker_log(tmp_path), timeout=30, what="the lease to lapse")
        assert "done b" in _host_log(tmp_path) and "start c" not in _host_log(tmp_path)
        own_redis.start()
        wait_until(lambda: "start c" in _host_log(tmp_path), timeout=30, what="c to start")

        # outage 2, while c (the last step) runs: the run ends during it
        own_redis.stop()
        (tmp_path / "host" / "go-c").touch()
        wait_until(lambda: "ended succeeded" in _worker_log(tmp_path), timeout=30,
                   what="the worker to finish the run")
        beats = _worker_log(tmp_path).count("heartbeat for")
        # each failed heartbeat first spends the client's retry budget (over a second)
        wait_until(lambda: _worker_log(tmp_path).count("heartbeat for") >= beats + 2,
                   timeout=30, what="the 2 s lease to run out with Redis away")
        own_redis.start()
        wait_until(lambda: store.runs.get(run.id).status.terminal, timeout=30,
                   what="the run's end to land in Redis")
        # its audit entries land after the record: the copy is compared once they have
        wait_until(lambda: any(e.action == "run_finished"
                               for e in store.audit.entries(run_id=run.id)), timeout=30,
                   what="the run's last audit entry")
        wait_until(lambda: once(siem.received()) == stream_keys(store), timeout=30,
                   what="the worker's shipper to send every entry to the SIEM")
    finally:
        proc.terminate()
        proc.wait(30)
    _assert_truthful(store, store.runs.get(run.id), _host_log(tmp_path), _worker_log(tmp_path))
    report = verify_copy(siem.received())  # the SIEM's copy: whole, linked, in order
    assert report.ok and report.entries == len(stream_keys(store)), report.broken


def test_a_worker_stopped_longer_than_its_lease_carries_on_and_says_it_stalled(
        tmp_path: Path, own_redis: RedisServer, sshd_hosts: SSHFleet,
        siem: SiemStandin) -> None:
    config = load_config(_config(tmp_path, sshd_hosts, siem))
    store = Store.connect(own_redis.url)
    services = build_services(config, store=store)
    run = submit(services, _marks("a", "b"))
    proc = _start_worker(tmp_path, config, own_redis.url, claim_after=60)
    try:
        wait_until(lambda: "start b" in _host_log(tmp_path), timeout=30, what="b to start")
        proc.send_signal(signal.SIGSTOP)  # a laptop lid, a paused VM: the store stays up
        wait_until(lambda: store.r.get(store.keys.owner(run.id)) is None, timeout=30,
                   what="the lease to expire in Redis")
        (tmp_path / "host" / "go-b").touch()
        proc.send_signal(signal.SIGCONT)
        wait_until(lambda: store.runs.get(run.id).status.terminal, timeout=30,
                   what="the run to end")
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        proc.wait(30)
    final = store.runs.get(run.id)
    assert _host_log(tmp_path) == ["start a", "done a", "start b", "done b"]  # no undo
    assert final.status is RunStatus.SUCCEEDED and final.worker == "steady", final.reason
    audit = store.audit.entries(run_id=run.id)
    actions = [e.action for e in audit]
    assert "store_outage" not in actions and "resumed" not in actions  # the true cause
    (stalled,) = [e.details for e in audit if e.action == "worker_stalled"]
    assert stalled["lease_lapsed"] and stalled["seconds"] >= 2
    assert [e.details["step"] for e in audit if e.action == "step_finished"] == ["a", "b"]


def _assert_truthful(store: Store, final: Run, host: list[str], worker_log: str) -> None:
    assert host == ["start a", "done a", "start b", "done b", "start c", "done c"]  # no undo
    assert final.status is RunStatus.SUCCEEDED, final.reason
    assert final.worker == "steady"
    assert all(s.status is StepStatus.SUCCEEDED for s in final.steps.values())
    audit = store.audit.entries(run_id=final.id)
    actions = [e.action for e in audit]
    finished = [e.details.get("step") for e in audit if e.action == "step_finished"]
    assert finished == ["a", "b", "c"] and actions.count("run_finished") == 1
    assert "resumed" not in actions and "leftover_stopped" not in actions
    outages = [e.details for e in audit if e.action == "store_outage"]
    assert any(o["lease_lapsed"] and "c" in (o["waiting"] or "") for o in outages), outages
    assert "died" not in worker_log
