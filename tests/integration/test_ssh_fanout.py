"""Fan-out to many hosts behind a real sshd that throttles connection setup (issue 23).

sshd's MaxStartups drops connections that have not logged in yet past its limit; a
rollout must pace its setups, retry the dropped ones, and never retry anything else.
Several inventory hosts point at one sshd here, as hosts behind a shared sshd or bastion.
What each host ran is counted on the host (a line per host appended to a file), and what
sshd dropped is counted in its own log.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agents.plan.model import Plan
from agents.run.executor import Executor, ExecutorDeps
from agents.run.record import Event, EventKind, Run, RunStatus
from bot.metrics import Metrics
from tests.fixtures.polling import wait_until
from tests.fixtures.sshd import SSHFleet, keygen, start_shared_sshd
from tools.catalog import Catalog, Tool
from tools.errors import HostKeyError, SSHAuthError
from tools.inventory import Inventory
from tools.runners.pool import RunnerPool

HOSTS = [f"web-{i:02d}" for i in range(30)]


@pytest.fixture
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SSHFleet]:
    """One sshd behind all HOSTS, with the MaxStartups the test is parametrized with."""
    max_startups = getattr(request, "param", "10:30:100")
    try:
        fleet = start_shared_sshd(tmp_path / "sshd", HOSTS, max_startups=max_startups)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    yield fleet
    fleet.stop()


def inventory(fleet: SSHFleet, ssh: dict[str, Any] | None = None,
              **host_overrides: Any) -> Inventory:
    hosts = {n: fleet.inventory_host(n, **host_overrides) for n in fleet.hosts}
    return Inventory.model_validate({
        "known_hosts": str(fleet.known_hosts), "ssh": ssh or {}, "hosts": hosts,
        "environments": {"fleet": {"hosts": list(hosts), "rollout": {
            "batch_size": "100%", "max_parallel": len(hosts)}}}})


def deploy(pool: RunnerPool, inv: Inventory, marker: Path,
           listeners: list[Any] | None = None) -> Run:
    """One mutating step on every host of the fleet, in one batch."""
    tool = Tool(name="deploy", description="record the deploy on the host",
                command=f"echo {{host.name}} >> {marker}", target="environment",
                mutates=True, timeout=60)
    executor = Executor(ExecutorDeps(Catalog({"deploy": tool}), inv, pool.for_host),
                        listeners=listeners or [])
    return executor.execute(Plan.model_validate({"goal": "deploy", "steps": [
        {"id": "deploy", "tool": "deploy", "params": {"environment": "fleet"}}]}))


def deployed(marker: Path) -> list[str]:
    return sorted(marker.read_text().split()) if marker.exists() else []


def test_thirty_hosts_behind_default_maxstartups_are_all_deployed(
        shared: SSHFleet, tmp_path: Path) -> None:
    inv = inventory(shared)
    pool = RunnerPool(inventory=inv)
    baseline = set(threading.enumerate())
    peak = [0]

    def ours() -> int:
        """Threads this deploy started: the executor's, paramiko's transports, the reaper
        (not whatever an earlier test in this process left winding down)."""
        return len([t for t in threading.enumerate() if t not in baseline and (
            isinstance(t, paramiko.Transport)
            or t.name.startswith(("host", "step", "preflight", "ssh-")))])

    def threads(event: Event, run: Run) -> None:
        if event.kind in (EventKind.HOST_STARTED, EventKind.HOST_FINISHED):
            peak[0] = max(peak[0], ours())

    try:
        run = deploy(pool, inv, tmp_path / "deployed", [threads])
    finally:
        pool.close()
    assert run.status is RunStatus.SUCCEEDED, run.reason
    assert deployed(tmp_path / "deployed") == HOSTS
    stats, daemon = pool.setup_stats, shared[HOSTS[0]]
    assert (stats.connections, stats.failures) == (30, 0)
    assert stats.retries == daemon.drops()  # each drop sshd logged was retried, nothing else
    # per host: one thread of ours and paramiko's transport thread (+ the reaper, the step)
    assert 0 < peak[0] <= 2 * len(HOSTS) + 2  # + the step's own thread


@pytest.mark.parametrize("shared", ["1:100:100"], indirect=True)
def test_setups_dropped_while_sshd_is_full_are_retried_until_it_has_room(
        shared: SSHFleet, tmp_path: Path) -> None:
    """MaxStartups 1:100:100 drops every setup while one is pending: ours, held open below,
    makes the first attempts fail for certain; closing it lets the retries through."""
    daemon = shared[HOSTS[0]]
    inv = inventory(shared, {"max_handshakes": 1, "connect_attempts": 10,
                             "retry_backoff": 0.05})
    pool = RunnerPool(inventory=inv)
    blocker = hold_one_setup(daemon.port)  # sshd now counts one setup in progress
    drops_before = daemon.drops()  # the fixture's own probe may have cost the blocker a try
    result: list[Run] = []
    worker = threading.Thread(target=lambda: result.append(
        deploy(pool, inv, tmp_path / "deployed")))
    try:
        worker.start()
        wait_until(lambda: pool.setup_stats.retries >= 1, timeout=30,
                   what="a dropped setup to be retried")
        blocker.close()
        worker.join(120)
    finally:
        blocker.close()
        pool.close()
    assert result and result[0].status is RunStatus.SUCCEEDED, result and result[0].reason
    assert deployed(tmp_path / "deployed") == HOSTS
    assert pool.setup_stats.retries == daemon.drops() - drops_before >= 1
    assert pool.setup_stats.failures == 0
    metrics = Metrics()
    metrics.watch_ssh(lambda: pool.setup_stats)
    exported = {s.labels["result"]: s.value for f in text_string_to_metric_families(
        generate_latest(metrics.registry).decode()) for s in f.samples
        if s.name == "deckhand_ssh_setups_total"}
    assert exported == {"connected": 30, "retried": pool.setup_stats.retries, "failed": 0}


def hold_one_setup(port: int) -> socket.socket:
    """A connection sshd counts as a setup in progress. sshd still counts the fixture's
    banner probe until its pre-auth child exits, and drops us ("Exceeded MaxStartups")
    meanwhile, so try again until it answers with its banner."""
    held: list[socket.socket] = []

    def answered() -> bool:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        if sock.recv(4) == b"SSH-":
            held.append(sock)
            return True
        sock.close()
        return False

    wait_until(answered, timeout=30, what=f"sshd on port {port} to accept a held setup")
    return held[0]


def test_a_refused_login_is_not_retried(shared: SSHFleet, tmp_path: Path) -> None:
    daemon = shared[HOSTS[0]]
    stranger = keygen(tmp_path / "id_stranger", "not authorized")
    inv = inventory(shared, key_file=str(stranger))
    pool = RunnerPool(inventory=inv)
    log = daemon.dir / "sshd.log"
    connections = log.read_text().count("Connection from")
    try:
        with pytest.raises(SSHAuthError, match="refused our key"):
            pool.ssh_runner(inv.hosts[HOSTS[0]]).run("true", timeout=10)
    finally:
        pool.close()
    assert log.read_text().count("Connection from") == connections + 1
    assert (pool.setup_stats.attempts, pool.setup_stats.retries) == (1, 0)


def test_known_hosts_is_read_again_when_it_changes(sshd_hosts: SSHFleet,
                                                   tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(sshd_hosts["prod-2"].known_hosts_line)
    inv = sshd_hosts.inventory(known_hosts=known)
    pool = RunnerPool(inventory=inv)
    try:
        with pytest.raises(HostKeyError, match="is not in"):
            pool.ssh_runner(inv.hosts["prod-1"]).run("true", timeout=10)
        with known.open("a") as out:  # trusted by hand while the pool is up
            out.write(sshd_hosts["prod-1"].known_hosts_line)
        assert pool.ssh_runner(inv.hosts["prod-1"]).run("echo in", timeout=10).tail == "in\n"
        impostor = sshd_hosts["prod-1"].known_hosts_line.replace(
            sshd_hosts["prod-1"].host_key_pub, sshd_hosts["prod-2"].host_key_pub)
        known.write_text(sshd_hosts["prod-2"].known_hosts_line + impostor)  # same size
        pool.ssh_runner(inv.hosts["prod-1"]).close()
        with pytest.raises(HostKeyError, match="HOST KEY CHANGED"):
            pool.ssh_runner(inv.hosts["prod-1"]).run("true", timeout=10)
    finally:
        pool.close()
    assert pool.host_keys.loads == 3  # once per version of the file, not per connection


def test_idle_connections_are_closed_jump_hosts_last(sshd_hosts: SSHFleet) -> None:
    inv = sshd_hosts.inventory({"prod-3": {"jump": "prod-1"}})
    pool = RunnerPool(inventory=inv, ssh=inv.ssh.model_copy(update={"idle_close": 60}))
    try:
        behind = pool.ssh_runner(inv.hosts["prod-3"])
        assert behind.run("true", timeout=10).ok
        later = behind.last_used + 61
        assert pool.close_idle(now=behind.last_used + 1) == []
        assert pool.close_idle(now=later) == ["prod-3"]  # prod-1 still carried its tunnel
        assert pool.close_idle(now=later) == ["prod-1"]
        assert behind.run("echo again", timeout=10).tail == "again\n"
        assert behind.connects == 2
    finally:
        pool.close()
