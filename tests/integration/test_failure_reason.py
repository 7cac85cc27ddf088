"""A failed command's reason quotes the lines that explain it, not only its last line:
``dd`` into a full device (``/dev/full``) on a real sshd host ends with "0 bytes copied",
two lines after "No space left on device" — both are in the step's error, the host's, the
audit and ``deckhand runs show``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agents.config import load_config
from agents.engine.worker import Worker, WorkerOptions
from agents.run.record import Run, RunStatus
from agents.services import build_services
from agents.store import Store
from bot.cli import main
from tests.fixtures.sshd import SSHFleet

TOOLS = {"fill": {"description": "write a block to a full device",
                  "command": "dd if=/dev/zero of=/dev/full bs=256k count=1",
                  "target": "environment"}}
PLAYBOOKS = [{"name": "fill", "match": [r"^fill$"], "goal": "fill the disk",
              "steps": [{"id": "fill", "tool": "fill", "params": {"environment": "production"}}]}]


def test_the_error_line_is_in_the_reason_and_in_runs_show(
        tmp_path: Path, sshd_hosts: SSHFleet, redis_url: str,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    host = next(iter(sshd_hosts.hosts))
    doc = {"tools": TOOLS, "playbooks": PLAYBOOKS, "policy": {"environments": {"production": {
               "approvers": {"users": ["bob"]}}}},
           "inventory": {"known_hosts": str(sshd_hosts.known_hosts),
                         "hosts": {host: sshd_hosts.inventory_host(host)},
                         "environments": {"production": {"hosts": [host]}}}}
    path = tmp_path / "deckhand.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    store = Store.connect(redis_url)
    store.r.flushdb()
    services = build_services(load_config(path), store=store)
    try:
        plan = services.make_plan("fill", requested_by="alice", face="cli")
        store.plans.save(plan)
        run = store.runs.create(Run.for_plan(plan, services.targets(plan)))
        run = store.runs.approve(run.id, face="cli", user="bob", plan_version=run.plan_version,
                                 plan_hash=run.plan_hash, policy=services.config.policy)
        Worker(services, store, name="w1", options=WorkerOptions(block=0.1)).process(run.id)
    finally:
        services.close()
    final = store.runs.get(run.id)
    assert final.status is RunStatus.FAILED
    for error in (final.steps["fill"].error, final.steps["fill"].hosts[host].error):
        assert error is not None
        assert "dd: error writing '/dev/full': No space left on device" in error, error
        assert "bytes copied" in error.rsplit(" … ", 1)[-1], error  # and where it stopped
    audited = [e for e in store.audit.entries(run_id=run.id) if e.action == "step_finished"]
    assert "No space left on device" in str(audited[-1].details)
    assert main(["runs", "show", run.id, "--config", str(path)]) == 0
    assert "No space left on device" in capsys.readouterr().out
