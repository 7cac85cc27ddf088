"""``deckhand hosts check`` and ``hosts trust`` against real sshd hosts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agents.config import load_config
from bot.cli import main
from tests.fixtures.sshd import SSHFleet, keygen, write_ssh_config
from tools.hostcheck import check_hosts
from tools.runners.pool import RunnerPool


def config_with(tmp_path: Path, fleet: SSHFleet, known_hosts: str,
                hosts: dict[str, dict[str, object]] | None = None) -> Path:
    """The SSH sample config with its own known_hosts text and per-host inventory changes."""
    path = write_ssh_config(tmp_path / "sample", fleet)
    known = tmp_path / "known_hosts"
    known.write_text(known_hosts)
    data = yaml.safe_load(path.read_text())
    data["inventory"]["known_hosts"] = str(known)
    for name, extra in (hosts or {}).items():
        data["inventory"]["hosts"][name].update(extra)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_check_reports_every_host_ready(sshd_hosts: SSHFleet, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = write_ssh_config(tmp_path / "sample", sshd_hosts)
    assert main(["hosts", "check", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "all 4 host(s) ready" in out
    assert out.count("trusted") == 4


def test_check_tells_down_unknown_and_refused_hosts_apart(sshd_hosts: SSHFleet,
                                                          tmp_path: Path) -> None:
    known = "".join(sshd_hosts[n].known_hosts_line for n in ("staging-1", "prod-1", "prod-2"))
    stranger = keygen(tmp_path / "id_stranger", "not authorized")
    path = config_with(tmp_path, sshd_hosts, known,
                       {"staging-1": {"key_file": str(stranger)}})
    sshd_hosts["prod-2"].stop()
    inventory = load_config(path).inventory
    rows = {r.host: r for r in check_hosts(inventory, timeout=5)}
    assert rows["prod-1"].ok and rows["prod-1"].latency_ms is not None
    assert (rows["prod-2"].reachable, rows["prod-2"].host_key) == (False, "-")
    assert "refused the connection" in rows["prod-2"].detail
    assert (rows["prod-3"].host_key, rows["prod-3"].auth) == ("unknown", "not tried")
    assert "deckhand hosts trust prod-3" in rows["prod-3"].detail
    assert (rows["staging-1"].host_key, rows["staging-1"].auth) == ("trusted", "refused")
    assert [r.host for r in check_hosts(inventory, "staging", timeout=5)] == ["staging-1"]
    assert main(["hosts", "check", "production", "--config", str(path)]) == 1


def test_trust_adds_the_key_then_the_host_connects(sshd_hosts: SSHFleet, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = config_with(tmp_path, sshd_hosts, "")
    known = tmp_path / "known_hosts"
    assert main(["hosts", "trust", "prod-3", "--config", str(path)]) == 1  # no tty, no --yes
    assert known.read_text() == ""
    assert main(["hosts", "trust", "prod-3", "--yes", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "SHA256:" in out and "added" in out
    assert known.read_text() == sshd_hosts["prod-3"].known_hosts_line
    assert main(["hosts", "trust", "prod-3", "--yes", "--config", str(path)]) == 0
    assert "already trusted" in capsys.readouterr().out
    inventory = load_config(path).inventory
    pool = RunnerPool(inventory=inventory)
    try:
        assert pool.ssh_runner(inventory.hosts["prod-3"]).run("true", timeout=10).ok
    finally:
        pool.close()


def test_trust_never_replaces_a_changed_key(sshd_hosts: SSHFleet, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    port = sshd_hosts["prod-1"].port
    wrong = f"[127.0.0.1]:{port} ssh-ed25519 {sshd_hosts['prod-2'].host_key_pub}\n"
    path = config_with(tmp_path, sshd_hosts, wrong)
    assert main(["hosts", "trust", "prod-1", "--yes", "--config", str(path)]) == 2
    assert f"ssh-keygen -R '[127.0.0.1]:{port}'" in capsys.readouterr().out
    assert (tmp_path / "known_hosts").read_text() == wrong
