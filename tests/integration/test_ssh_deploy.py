"""The sample app deployed over SSH by the executor, with the playbook plan.

Same examples/app scripts and tools.yml as the local demo; only the inventory differs:
staging-1, prod-1, prod-2, prod-3 are real sshd instances (production rolls out one host
per batch). Every app server is checked over HTTP.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.config import Config
from agents.run.record import Run, RunStatus, StepStatus
from agents.services import Services, build_services
from tests.fixtures.sshd import SSHFleet

S = StepStatus


@pytest.fixture
def services(ssh_sample_config: Config) -> Iterator[Services]:
    services = build_services(ssh_sample_config)
    yield services
    services.close()


def deploy(services: Services, version: str) -> Run:
    plan = services.make_plan(f"deploy {version}", requested_by="alice", face="cli")
    return services.executor.execute(plan)


def versions(config: Config) -> dict[str, str]:
    """What each host's app server answers on /version ("down" if it does not answer)."""
    out = {}
    for host in config.inventory.hosts.values():
        url = f"http://127.0.0.1:{host.vars['port']}/version"
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                out[host.name] = reply.read().decode().strip()
        except (urllib.error.URLError, OSError):
            out[host.name] = "down"
    return out


def host_dir(config: Config, name: str) -> Path:
    return Path(str(config.inventory.hosts[name].vars["dir"]))


def snapshot(root: Path) -> list[tuple[str, int, str]]:
    """Every path under ``root`` with its mtime and content (or link target)."""
    out = []
    for path in sorted([root, *root.rglob("*")]):
        stat = path.lstat()
        body = os.readlink(path) if path.is_symlink() else \
            path.read_text(errors="replace") if path.is_file() else ""
        out.append((str(path.relative_to(root)), stat.st_mtime_ns, body))
    return out


def statuses(run: Run, step: str, *, rollback: bool = False) -> dict[str, StepStatus]:
    state = (run.rollback if rollback else run.steps)[step]
    return {name: result.status for name, result in state.hosts.items()}


def test_sample_app_deploys_to_every_host_over_ssh(services: Services) -> None:
    config = services.config
    run = deploy(services, "v1.0.0")
    assert run.status is RunStatus.SUCCEEDED, run.reason
    assert versions(config) == dict.fromkeys(config.inventory.hosts, "v1.0.0")
    assert statuses(run, "deploy_production") == dict.fromkeys(["prod-1", "prod-2", "prod-3"],
                                                               S.SUCCEEDED)
    smoke = run.steps["smoke_production"].hosts
    assert all("GET /version -> 200 v1.0.0" in r.tail for r in smoke.values())
    # One connection per host served every step that ran there (deploy, smoke).
    for host in config.inventory.hosts.values():
        assert services.runners.ssh_runner(host).connects == 1


def test_failing_host_in_batch_two_stops_the_rollout_and_rolls_back_changed_hosts_only(
        services: Services) -> None:
    config = services.config
    assert deploy(services, "v1.0.0").status is RunStatus.SUCCEEDED
    untouched = snapshot(host_dir(config, "prod-3"))
    # prod-2's disk is in a state its deploy cannot handle: the rollback marker is a directory.
    marker = host_dir(config, "prod-2") / "rollback_to"
    marker.unlink()
    marker.mkdir()

    run = deploy(services, "v1.1.0")

    assert run.status is RunStatus.ROLLED_BACK, run.reason
    assert statuses(run, "deploy_production") == {"prod-1": S.SUCCEEDED, "prod-2": S.FAILED}
    failure = run.steps["deploy_production"].hosts["prod-2"].error or ""
    assert failure.startswith("exit code 1") and "rollback_to: Is a dir" in failure
    assert run.steps["smoke_production"].status is S.SKIPPED
    assert run.changed_hosts == ["staging-1", "prod-1", "prod-2"]
    assert statuses(run, "rollback_production", rollback=True) == {
        "prod-1": S.SUCCEEDED, "prod-2": S.SUCCEEDED}
    assert "rolled back to v1.0.0" in \
        run.rollback["rollback_production"].hosts["prod-1"].tail
    assert statuses(run, "rollback_staging", rollback=True) == {"staging-1": S.SUCCEEDED}
    assert versions(config) == dict.fromkeys(config.inventory.hosts, "v1.0.0")
    assert snapshot(host_dir(config, "prod-3")) == untouched  # never reached, never changed


def test_host_down_fails_the_deploy_cleanly_into_rollback(services: Services,
                                                          sshd_hosts: SSHFleet) -> None:
    config = services.config
    assert deploy(services, "v1.0.0").status is RunStatus.SUCCEEDED
    untouched = snapshot(host_dir(config, "prod-3"))
    sshd_hosts["prod-2"].stop()
    port = sshd_hosts["prod-2"].port

    run = deploy(services, "v1.1.0")

    refused = f"prod-2: {sshd_hosts.user}@127.0.0.1:{port} refused the connection"
    deploy_prod = run.steps["deploy_production"]
    # the pre-flight check found prod-2 down before any production host changed
    assert (deploy_prod.error or "").startswith(f"not started on any host: {refused}")
    assert deploy_prod.hosts == {}
    assert all(state.status.done for state in [*run.steps.values(), *run.rollback.values()])
    assert not any(h.startswith("prod-") for h in run.changed_hosts)
    assert run.rollback["rollback_production"].status is S.SKIPPED
    assert run.rollback["rollback_staging"].status is S.SUCCEEDED
    assert run.status is RunStatus.ROLLED_BACK
    assert run.rollback["notify_rollback"].status is S.SUCCEEDED
    assert versions(config) == dict.fromkeys(config.inventory.hosts, "v1.0.0")
    assert snapshot(host_dir(config, "prod-3")) == untouched
