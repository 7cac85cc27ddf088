"""SSHRunner against real OpenSSH sshd processes on loopback: no fakes anywhere.

The "hosts" share this machine's filesystem and process table, so what a command left
behind on a host (files, processes) is checked directly.
"""

from __future__ import annotations

import pwd
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.plan.model import Plan
from agents.run.executor import Executor, ExecutorDeps
from agents.run.record import RunStatus
from tests.fixtures.polling import wait_until
from tests.fixtures.sshd import SSHFleet, keygen, process_gone
from tools.catalog import Catalog, ParamSpec, Tool
from tools.errors import CommandInterrupted, HostKeyError, SSHAuthError, SSHConnectError
from tools.inventory import Inventory
from tools.runners.base import CancelToken
from tools.runners.pool import RunnerPool
from tools.runners.ssh import SSHRunner


@pytest.fixture
def inventory(sshd_hosts: SSHFleet) -> Inventory:
    return sshd_hosts.inventory()


@pytest.fixture
def pool(inventory: Inventory) -> Iterator[RunnerPool]:
    pool = RunnerPool(inventory=inventory)
    yield pool
    pool.close()


def runner_for(pool: RunnerPool, inventory: Inventory, name: str) -> SSHRunner:
    return pool.ssh_runner(inventory.hosts[name])


def read_pids(*paths: Path) -> list[int]:
    wait_until(lambda: all(p.exists() and p.read_text().strip() for p in paths), timeout=10, what="pid files")
    return [int(p.read_text()) for p in paths]


# -- running commands ------------------------------------------------------------------


def test_exit_code_and_both_streams_reach_the_sink(pool: RunnerPool,
                                                   inventory: Inventory) -> None:
    lines: list[str] = []
    result = runner_for(pool, inventory, "prod-1").run(
        "echo out; echo err >&2; exit 3", timeout=10, on_output=lines.append)
    assert result.exit_code == 3 and not result.ok
    assert sorted(lines) == ["err", "out"]
    assert "out" in result.tail and "err" in result.tail


def test_stdin_is_empty(pool: RunnerPool, inventory: Inventory) -> None:
    result = runner_for(pool, inventory, "prod-1").run("cat; echo after", timeout=10)
    assert (result.exit_code, result.tail) == (0, "after\n")


def test_one_connection_serves_many_commands_and_channels_are_closed(
        pool: RunnerPool, inventory: Inventory) -> None:
    runner = runner_for(pool, inventory, "prod-1")
    # More commands than sshd's MaxSessions (10): a leaked channel would get refused.
    results = [runner.run(f"echo {i}", timeout=10) for i in range(25)]
    assert [r.tail for r in results] == [f"{i}\n" for i in range(25)]
    threads_results: list[int | None] = []
    threads = [threading.Thread(target=lambda: threads_results.append(
        runner.run("sleep 0.2; echo ok", timeout=20).exit_code)) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert threads_results == [0] * 12
    assert runner.connects == 1


def test_output_of_login_scripts_is_kept_and_the_command_can_still_be_killed(
        sshd_hosts: SSHFleet, pool: RunnerPool, inventory: Inventory, tmp_path: Path) -> None:
    if not pwd.getpwnam(sshd_hosts.user).pw_shell.endswith("/bash"):
        pytest.skip("needs bash as the login shell (it reads ~/.bashrc for ssh commands)")
    bashrc = sshd_hosts["prod-1"].dir / ".bashrc"  # the fixture hosts' HOME
    bashrc.write_text("echo welcome to prod-1\n")
    try:
        lines: list[str] = []
        runner = runner_for(pool, inventory, "prod-1")
        assert runner.run("echo hi", timeout=10, on_output=lines.append).ok
        assert lines == ["welcome to prod-1", "hi"]
        child = tmp_path / "child.pid"
        result = runner.run(f"sleep 300 & echo $! > {child}; wait", timeout=1.5)
        assert result.timed_out
        pid = read_pids(child)[0]
        wait_until(lambda: process_gone(pid), timeout=10, what=f"process {pid} to be killed")
    finally:
        bashrc.unlink()


def test_five_megabytes_of_output_on_both_streams_does_not_hang(
        pool: RunnerPool, inventory: Inventory) -> None:
    out_line = "o" * 49  # 50 bytes with the newline: 100 000 lines = 5 MB
    counts = {"out": 0, "err": 0, "done": 0}

    def sink(line: str) -> None:
        counts["out" if line == out_line else "done" if line == "done" else "err"] += 1

    command = (f"(yes e | head -n 500000 >&2) & yes {out_line} | head -n 100000; wait; "
               "echo done")
    result = runner_for(pool, inventory, "prod-1").run(command, timeout=60, on_output=sink)
    assert result.exit_code == 0 and not result.timed_out
    # The streams are drained side by side, so only the counts are compared, not the order.
    assert counts == {"out": 100000, "err": 500000, "done": 1}


def test_deadline_kills_the_remote_process_group(pool: RunnerPool, inventory: Inventory,
                                                 tmp_path: Path) -> None:
    shell, child = tmp_path / "shell.pid", tmp_path / "child.pid"
    command = f"echo $$ > {shell}; sleep 300 & echo $! > {child}; wait"
    result = runner_for(pool, inventory, "prod-2").run(command, timeout=2.0)
    assert result.timed_out and result.exit_code is None and not result.cancelled
    pids = read_pids(shell, child)
    wait_until(lambda: all(process_gone(p) for p in pids), timeout=10, what=f"processes {pids} to be killed")


def test_cancel_kills_the_remote_process_group(pool: RunnerPool, inventory: Inventory,
                                               tmp_path: Path) -> None:
    shell, child = tmp_path / "shell.pid", tmp_path / "child.pid"
    token = CancelToken()

    def sink(line: str) -> None:
        if line == "ready":
            token.cancel("operator pressed stop")

    command = f"echo $$ > {shell}; sleep 300 & echo $! > {child}; echo ready; wait"
    result = runner_for(pool, inventory, "prod-2").run(command, timeout=60, on_output=sink,
                                                       cancel=token)
    assert result.cancelled and not result.timed_out and result.exit_code is None
    pids = read_pids(shell, child)
    wait_until(lambda: all(process_gone(p) for p in pids), timeout=10, what=f"processes {pids} to be killed")


def test_injection_in_a_parameter_stays_inert_on_the_remote_host(
        pool: RunnerPool, inventory: Inventory) -> None:
    marker = f"/tmp/pwned-{uuid.uuid4().hex}"
    attempts = [f"x; touch {marker}-1", f"$(touch {marker}-2)", f"`touch {marker}-3`",
                f"' ; touch {marker}-4 ; '", f'" ; touch {marker}-5 ; "', f"a && touch {marker}-6",
                f"| touch {marker}-7", f"$'\\x3b' touch {marker}-8"]
    tool = Tool(name="say", description="print a message on the host", command="echo {text}",
                target="group:prod-1", params={"text": ParamSpec(max_length=300)})
    catalog = Catalog({"say": tool})
    executor = Executor(ExecutorDeps(catalog, inventory, pool.for_host))
    plan = Plan.model_validate({"goal": "say things", "steps": [
        {"id": f"say_{i}", "tool": "say", "params": {"text": text}}
        for i, text in enumerate(attempts)]})
    run = executor.execute(plan)
    assert run.status is RunStatus.SUCCEEDED, run.reason
    printed = [run.steps[f"say_{i}"].hosts["prod-1"].tail for i in range(len(attempts))]
    assert printed == [text + "\n" for text in attempts]
    assert not list(Path("/tmp").glob(Path(marker).name + "*"))


# -- refusing to connect ---------------------------------------------------------------


def test_unknown_host_key_is_refused_with_how_to_trust_it(
        sshd_hosts: SSHFleet, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(sshd_hosts["prod-2"].known_hosts_line)  # knows another host only
    inventory = sshd_hosts.inventory(known_hosts=known)
    port = sshd_hosts["prod-1"].port
    runner = SSHRunner(inventory.hosts["prod-1"], known_hosts=known)
    with pytest.raises(HostKeyError) as caught:
        runner.run(f"touch {tmp_path}/ran", timeout=10)
    message = str(caught.value)
    assert f"[127.0.0.1]:{port} is not in {known}" in message
    assert "ssh-keyscan" not in message  # a blind keyscan trusts whoever answers
    assert "deckhand hosts trust prod-1" in message
    assert "SHA256:" in message
    assert not (tmp_path / "ran").exists()
    assert known.read_text() == sshd_hosts["prod-2"].known_hosts_line  # nothing auto-added


def test_an_encrypted_key_file_says_how_to_use_it(sshd_hosts: SSHFleet, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    key = tmp_path / "id_locked"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "open sesame", "-f", str(key)],
                   check=True, stdin=subprocess.DEVNULL)
    inventory = sshd_hosts.inventory({"prod-1": {"key_file": str(key)}})
    runner = SSHRunner(inventory.hosts["prod-1"], known_hosts=sshd_hosts.known_hosts)
    with pytest.raises(SSHAuthError, match="is encrypted: load it into ssh-agent .* or set "
                                           "DECKHAND_SSH_KEY_PASSPHRASE"):
        runner.run("true", timeout=10)
    monkeypatch.setenv("DECKHAND_SSH_KEY_PASSPHRASE", "open sesame")
    with pytest.raises(SSHAuthError, match="refused our key"):  # loaded; not authorized there
        SSHRunner(inventory.hosts["prod-1"], known_hosts=sshd_hosts.known_hosts).run(
            "true", timeout=10)


def test_changed_host_key_is_refused(sshd_hosts: SSHFleet, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    port = sshd_hosts["prod-1"].port
    impostor = sshd_hosts["prod-2"].host_key_pub  # prod-1's name, another host's key
    known.write_text(f"[127.0.0.1]:{port} ssh-ed25519 {impostor}\n")
    runner = SSHRunner(sshd_hosts.inventory().hosts["prod-1"], known_hosts=known)
    with pytest.raises(HostKeyError) as caught:
        runner.run(f"touch {tmp_path}/ran", timeout=10)
    message = str(caught.value)
    assert "HOST KEY CHANGED" in message
    assert f"ssh-keygen -R '[127.0.0.1]:{port}' -f {known}" in message
    assert not (tmp_path / "ran").exists()


def test_a_key_the_host_does_not_know_is_refused(sshd_hosts: SSHFleet, tmp_path: Path) -> None:
    stranger = keygen(tmp_path / "id_stranger", "not authorized")
    inventory = sshd_hosts.inventory({"prod-1": {"key_file": str(stranger)}})
    runner = SSHRunner(inventory.hosts["prod-1"], known_hosts=sshd_hosts.known_hosts)
    with pytest.raises(SSHAuthError) as caught:
        runner.run("true", timeout=10)
    assert f"refused our key(s) for user {sshd_hosts.user!r}" in str(caught.value)
    assert "authorized_keys" in str(caught.value)


def test_missing_key_file_is_an_auth_error(sshd_hosts: SSHFleet, tmp_path: Path) -> None:
    inventory = sshd_hosts.inventory({"prod-1": {"key_file": str(tmp_path / "nope")}})
    runner = SSHRunner(inventory.hosts["prod-1"], known_hosts=sshd_hosts.known_hosts)
    with pytest.raises(SSHAuthError, match="cannot use key file .*nope"):
        runner.run("true", timeout=10)


def test_host_down_is_a_clear_error_and_the_runner_reconnects_when_it_is_back(
        sshd_hosts: SSHFleet, pool: RunnerPool, inventory: Inventory) -> None:
    runner = runner_for(pool, inventory, "prod-3")
    assert runner.run("true", timeout=10).ok
    sshd_hosts["prod-3"].stop()
    with pytest.raises(SSHConnectError) as caught:
        runner.run("true", timeout=10)
    assert "refused the connection" in str(caught.value)
    assert isinstance(caught.value.__cause__, ConnectionRefusedError)
    sshd_hosts["prod-3"].start()
    assert runner.run("echo back", timeout=10).tail == "back\n"
    assert runner.connects == 2


def test_jump_host_carries_the_connection(sshd_hosts: SSHFleet) -> None:
    inventory = sshd_hosts.inventory({"prod-3": {"jump": "prod-1"}})
    pool = RunnerPool(inventory=inventory)
    try:
        behind = pool.ssh_runner(inventory.hosts["prod-3"])
        assert behind.run("echo via", timeout=10).tail == "via\n"
        jump = pool.ssh_runner(inventory.hosts["prod-1"])
        assert jump.connects == 1 and behind.via is jump
        sshd_hosts["prod-1"].stop()  # the direct route to prod-3 still works; ours must not
        with pytest.raises(SSHConnectError, match="jump host prod-1"):
            behind.run("true", timeout=10)
    finally:
        pool.close()


def test_connection_dropped_mid_command_is_a_clear_error(
        sshd_hosts: SSHFleet, pool: RunnerPool, inventory: Inventory) -> None:
    runner = runner_for(pool, inventory, "prod-3")

    def sink(line: str) -> None:
        if line == "ready":
            sshd_hosts["prod-3"].stop()  # the host goes down while the command runs

    with pytest.raises(CommandInterrupted, match="dropped while the command was running"):
        runner.run("echo ready; sleep 30", timeout=60, on_output=sink)
