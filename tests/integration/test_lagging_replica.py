"""A replica that is alive but truly behind: a real primary, a replica replicating through a
relay that holds the primary's bytes back (tests/fixtures/relay.py), three sentinels, a
real sshd host and real worker processes.

Each step appends a line to a marker file on its host: a step that ran twice, or a copy
that kept running after a takeover's rollback, shows there.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

from agents.config import Config
from agents.engine.worker import Worker, WorkerOptions
from agents.run.record import Run, RunStatus, StepStatus
from agents.services import Services, build_services
from agents.store import Store
from tests.fixtures.polling import wait_until
from tests.fixtures.redis_sentinel import SentinelGroup
from tests.fixtures.relay import ReplicationRelay
from tests.fixtures.sshd import SSHFleet
from tests.integration.test_replicated_starts import TOOLS as REPLICATED_TOOLS
from tests.integration.test_replicated_starts import host_config, marks, one_hold_two
from tests.integration.test_store import submit

HOST = "staging-1"
TOOLS = {
    **REPLICATED_TOOLS,
    "mark": {**REPLICATED_TOOLS["mark"], "command": "echo {label} >> {host.dir}/marks"},
    "slow": {"description": "append a line, work until told (20 s at most), append another",
             "command": "echo {label} >> {host.dir}/marks; for i in $(seq 1 400); do "
                        "[ -e {vars.done} ] && break; sleep 0.05; done; "
                        "echo {label}-done >> {host.dir}/marks",
             "target": "environment", "mutates": True, "rollback": "undo", "timeout": 60,
             "params": {"label": {"type": "string"}}},
}
PID_OF_TWO = rb'"step":"two","result":\{"host":"staging-1","pid":\d'
"""The replicated host-journal write that records step two's process group on the host."""


def _raw(port: int, store: Store, run_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The run record and its host journal (oldest first) as that Redis server holds them,
    read without deckhand's store."""
    client = redis.Redis(port=port, socket_timeout=2)
    record = client.get(store.keys.run(run_id))
    assert record is not None, f"no run {run_id} on port {port}"
    journal = [json.loads(v) for v in client.hgetall(store.keys.run_hosts(run_id)).values()]
    return json.loads(record), sorted(journal, key=lambda change: change["seq"])


def _relay(group: SentinelGroup) -> ReplicationRelay:
    assert group.relay is not None
    return group.relay


def _two_refused_on_host(store: Store, run_id: str) -> bool:
    host = store.runs.get(run_id).steps["two"].hosts.get(HOST)
    return host is not None and host.status is StepStatus.FAILED


def test_a_replica_held_back_stops_a_mutating_step_but_not_the_rollback(
        tmp_path: Path, relayed_sentinel_group: SentinelGroup, sshd_hosts: SSHFleet) -> None:
    """Step one changed the host; then the replica falls behind (connected, acknowledging,
    nothing arriving). Step two does not start: no replica confirms that it may, within the
    bounded wait. The rollback is not held back by that gate (README, "Workers and
    durability"): it waits as long, goes ahead, and the record names what no replica
    confirmed — the host is back where it was, the run rolled back."""
    group, relay = relayed_sentinel_group, _relay(relayed_sentinel_group)
    store = Store.connect(group.url)
    store.replicate_timeout = store.replica_wait = 0.5
    services = build_services(host_config(tmp_path, sshd_hosts, TOOLS), store=store)
    run = submit(services, one_hold_two("slow"), approvers=("bob",))
    worker = Worker(services, store, name="w", options=WorkerOptions(block=0.1))
    thread = threading.Thread(target=worker.step)
    thread.start()
    try:
        wait_until((tmp_path / "held").exists, what="the run to reach its hold step")
        relay.hold()  # after "one" changed the host, before "two"
        (tmp_path / "go").touch()
        wait_until(lambda: store.runs.get(run.id).status.terminal or "two" in marks(tmp_path),
                   timeout=20, what="the run to end (or, wrongly, step two to start)")
    finally:
        thread.join(30)
    assert marks(tmp_path) == ["one", "undo"]  # "two" never started; the undo did
    assert relay.kept_bytes > 0  # the replica was truly behind: bytes were held back
    final = store.runs.get(run.id)
    assert final.status is RunStatus.ROLLED_BACK, final.reason
    raw, _ = _raw(group.primary_port, store, run.id)
    assert raw["status"] == "rolled_back"
    assert "not started: replication to a Redis replica timed out" in raw["steps"]["two"]["error"]
    assert raw["meta"]["unreplicated"] == [
        "rollback: the start of undo on 1 host(s)",
        f"rollback: the process group of undo on {HOST}", "end (rolled_back)"]
    relay.release()  # the replica catches up: it ends with the same record
    wait_until(lambda: _raw(group.replica_port, store, run.id)[0]["status"] == "rolled_back",
               timeout=10, what="the replica to catch up once released")


def _spawn_worker(config: Config, url: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "worker", "--config", str(config.path), "--name",
         "doomed", "--lease", "1", "--claim-after", "1"],
        env={**os.environ, "REDIS_URL": url, "DECKHAND_REPLICA_WAIT": "0.5"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, cwd=Path(__file__).resolve().parents[2])


def _kill_together(worker: subprocess.Popen[bytes], group: SentinelGroup) -> None:
    """The worker and the primary die at once; Sentinel promotes the lagging replica."""
    worker.send_signal(signal.SIGKILL)
    group.procs["primary"].send_signal(signal.SIGKILL)
    worker.wait(10)
    group.procs["primary"].wait(10)
    wait_until(lambda: group.current_primary() == group.replica_port, timeout=20,
               what="Sentinel to promote the lagging replica")


@contextlib.contextmanager
def _doomed_at_hold(tmp_path: Path, group: SentinelGroup, fleet: SSHFleet
                    ) -> Iterator[tuple[Store, Services, Run]]:
    """A worker process runs one → hold → two (slow, not idempotent) on the host; the block
    starts at the hold, and the worker and the primary are SIGKILLed together when it ends."""
    store = Store.connect(group.url)
    config = host_config(tmp_path, fleet, TOOLS)
    services = build_services(config, store=store)
    run = submit(services, one_hold_two("slow"), approvers=("bob",))
    doomed = _spawn_worker(config, group.url)
    try:
        wait_until((tmp_path / "held").exists, timeout=20, what="the run to reach its hold")
        yield store, services, run
    finally:
        _kill_together(doomed, group)


def _take_over(services: Any, store: Store, run_id: str) -> None:
    rescuer = Worker(services, store, name="rescuer",
                     options=WorkerOptions(lease=1, claim_after=1, block=0.1))
    wait_until(lambda: rescuer.step(block=0.1) and store.runs.get(run_id).status.terminal,
               timeout=20, what="the rescuer to take the run over and finish it")


def test_a_lost_process_group_record_fails_the_takeover_closed(
        tmp_path: Path, relayed_sentinel_group: SentinelGroup, sshd_hosts: SSHFleet) -> None:
    """The issue's failover: the replica confirms that step two may start on the host, then
    falls behind just before the record of its process group. The worker's start gate
    waits for that record on a replica, is refused, and the command never runs; then the
    worker and the primary are SIGKILLed together and the lagging replica is promoted. It
    holds step two "running" with nothing to stop it by: the takeover does not run it
    again, says why, and rolls back."""
    group, relay = relayed_sentinel_group, _relay(relayed_sentinel_group)
    with _doomed_at_hold(tmp_path, group, sshd_hosts) as (store, services, run):
        relay.hold_at(PID_OF_TWO)
        (tmp_path / "go").touch()
        wait_until(lambda: _two_refused_on_host(store, run.id) or "two" in marks(tmp_path),
                   timeout=20, what="the start gate to refuse step two (or, wrongly, let it run)")
        assert "two" not in marks(tmp_path)
        assert relay.held
    assert relay.dropped_bytes > 0  # the pid record and all after it died with the primary
    _, journal = _raw(group.replica_port, store, run.id)
    two = [c["result"] for c in journal if c["step"] == "two"]
    assert two and two[-1]["status"] == "running" and two[-1]["pid"] is None
    _take_over(services, store, run.id)
    assert marks(tmp_path) == ["one", "undo"]  # "two" never ran on the host
    final = store.runs.get(run.id)
    assert final.status is RunStatus.ROLLED_BACK, final.reason
    raw, _ = _raw(group.replica_port, store, run.id)
    assert raw["status"] == "rolled_back"
    assert ("no record of its process group to stop it by, so it is not re-run"
            in raw["steps"]["two"]["error"])


def test_a_step_started_before_the_replica_fell_behind_is_stopped_not_repeated(
        tmp_path: Path, relayed_sentinel_group: SentinelGroup, sshd_hosts: SSHFleet) -> None:
    """Step two's start and process group reached the replica, so it started; then the
    replica falls behind, and the worker and the primary die together. The takeover on the
    promoted replica stops the dead worker's copy first, does not run step two again, and
    rolls back: one "two" line, no "two-done" after the undo, no process left."""
    group, relay = relayed_sentinel_group, _relay(relayed_sentinel_group)
    with _doomed_at_hold(tmp_path, group, sshd_hosts) as (store, services, run):
        (tmp_path / "go").touch()
        wait_until(lambda: "two" in marks(tmp_path), timeout=20, what="step two to start")
        relay.hold()  # from here the replica is behind
    _, journal = _raw(group.replica_port, store, run.id)
    pid = next(c["result"]["pid"] for c in reversed(journal) if c["step"] == "two")
    assert pid is not None  # confirmed before the command was let go
    _take_over(services, store, run.id)
    assert marks(tmp_path) == ["one", "two", "undo"]
    wait_until(lambda: _gone(pid), timeout=5, what="the dead worker's copy to be stopped")
    final = store.runs.get(run.id)
    assert final.status is RunStatus.ROLLED_BACK, final.reason
    raw, _ = _raw(group.replica_port, store, run.id)
    assert "its tool is not idempotent, so it is not re-run" in raw["steps"]["two"]["error"]


def _gone(pgid: int) -> bool:
    """No process of that group is left (the sshd hosts run on this machine)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_replica_cut_off_from_the_primary_still_holds_a_mutating_start(
        tmp_path: Path, relayed_sentinel_group: SentinelGroup, sshd_hosts: SSHFleet) -> None:
    """The replica loses its link to the primary (the primary counts no replica), yet
    Sentinel still sees it and promotes it when the primary dies. Step two must not start
    without a replica's confirmation — else the takeover on the promoted replica, which
    never heard of it, runs it a second time while the dead worker's copy still runs."""
    group, relay = relayed_sentinel_group, _relay(relayed_sentinel_group)
    with _doomed_at_hold(tmp_path, group, sshd_hosts) as (store, services, run):
        relay.cut()
        (tmp_path / "go").touch()
        wait_until(lambda: _two_refused_on_host(store, run.id) or "two" in marks(tmp_path),
                   timeout=20, what="step two to be refused (or, wrongly, to start)")
        assert "two" not in marks(tmp_path)
    (tmp_path / "done").touch()  # step two, when it runs, need not work long
    _take_over(services, store, run.id)
    assert marks(tmp_path) == ["one", "two", "two-done"]  # once, by the takeover
    final = store.runs.get(run.id)
    assert final.status is RunStatus.SUCCEEDED, final.reason
