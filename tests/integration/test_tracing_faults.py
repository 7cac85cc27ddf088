"""Tracing under faults: a worker SIGKILLed mid-command over SSH, and the worker that takes
the run over continues the same trace, emitting the dead worker's run span (closed, "worker
lost") and linking its own to it; nothing secret reaches the exported data."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from agents.store import Store
from tests.fixtures.otlp import Receiver
from tests.fixtures.polling import wait_until
from tests.fixtures.sshd import SSHFleet

ROOT = Path(__file__).resolve().parents[2]
SECRET = "hunter2-zq81"  # in the config's secrets, the request, a parameter and the output
CONFIG = f"""
secrets: ["{SECRET}"]
inventory:
  known_hosts: KNOWN_HOSTS
  hosts:
    web-1: WEB_1
  environments:
    staging: {{hosts: [web-1]}}
policy:
  promotion: [staging]
  environments:
    staging: {{min_approvals: 2, approvers: {{anyone: true}}}}
tools:
  change:
    description: change the host; waits for a release file on its first try
    command: "echo note {{note}}; echo started >> {{vars.flag}}; while [ ! -e {{vars.flag}}.go ] && [ $(wc -l < {{vars.flag}}) -lt 2 ]; do sleep 0.05; done; echo changed >> {{vars.log}}"
    params: {{note: {{type: string}}}}
    target: environment
    mutates: true
    idempotent: true
    rollback: undo
  undo:
    description: put the host back
    command: "echo undone >> {{vars.log}}"
    target: environment
    mutates: true
vars:
  flag: "{{config_dir}}/started"
  log: "{{config_dir}}/log.txt"
playbooks:
  - name: change
    match: ['^change staging (?P<note>\\S+)$']
    goal: change staging
    steps: [{{id: change, tool: change, params: {{environment: staging, note: "{{note}}"}}}}]
    rollback: [{{id: undo, tool: undo, params: {{environment: staging}}}}]
"""


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bot.cli", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


def _worker(name: str, env: dict[str, str], config: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "bot.cli", "worker", "--config",
                             str(config), "--name", name, "--lease", "1", "--claim-after",
                             "1"], env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def test_a_taken_over_run_is_one_trace_showing_both_attempts_and_no_secret(
        tmp_path: Path, store: Store, redis_url: str, otlp: Receiver,
        sshd_hosts: SSHFleet) -> None:
    config = tmp_path / "deckhand.yml"
    config.write_text(CONFIG.replace("KNOWN_HOSTS", json.dumps(str(sshd_hosts.known_hosts)))
                      .replace("WEB_1", json.dumps(sshd_hosts.inventory_host("staging-1"))))
    env = {**os.environ, "REDIS_URL": redis_url, "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint,
           "OTEL_SERVICE_NAME": "deckhand-test", "PYTHONPATH": str(ROOT)}
    planned = _cli(["run", f"change staging {SECRET}", "--yes", "--user", "alice",
                    "--config", str(config)], env)
    assert "1 more approval" in planned.stdout, planned.stdout + planned.stderr
    (run,) = store.runs.recent()
    assert _cli(["approve", run.id, "--user", "bob", "--config", str(config)],
                env).returncode == 0

    doomed = _worker("doomed", env, config)
    try:
        wait_until(lambda: (tmp_path / "started").exists(), what="the change to start")
    finally:
        doomed.send_signal(signal.SIGKILL)
        doomed.wait()
    recorded = store.runs.get(run.id).meta["trace_attempt"]  # what the dead worker left
    assert recorded["worker"] == "doomed" and not recorded["ended"]
    rescuer = _worker("rescuer", env, config)
    try:
        wait_until(lambda: store.runs.get(run.id).status.terminal, timeout=60,
                   what="the rescuer to finish the run")
    finally:
        rescuer.send_signal(signal.SIGTERM)  # drains, then flushes its spans as it exits
        assert rescuer.wait(60) == 0
    final = store.runs.get(run.id)
    assert final.status.value == "succeeded"
    assert (tmp_path / "log.txt").read_text().splitlines() == ["changed"]  # on the host, once
    assert final.meta["trace_attempt"]["worker"] == "rescuer" and final.meta["trace_attempt"][
        "ended"]

    wait_until(lambda: len(otlp.named("deckhand.run")) == 2, what="both attempts' run spans")
    (plan,) = otlp.named("deckhand.plan")
    by_worker = {s.attributes["deckhand.worker"]: s for s in otlp.named("deckhand.run")}
    lost, taken = by_worker["doomed"], by_worker["rescuer"]
    # the dead worker's span, under the id it recorded, closed when the run was taken over
    assert (lost.trace_id, lost.span_id) == tuple(recorded["traceparent"].split("-")[1:3])
    assert lost.parent_id == plan.span_id and lost.start == recorded["start"]
    assert lost.status == 2 and lost.status_message == "worker lost"
    assert lost.start < lost.end <= taken.start
    assert taken.links == [(plan.trace_id, lost.span_id)]  # the takeover, as a link
    assert taken.attributes["deckhand.run.taken_over_from"] == "doomed"
    assert taken.trace_id == plan.trace_id and taken.parent_id == plan.span_id
    assert taken.status == 1
    steps = otlp.named("step change (change)")
    assert steps and {(s.trace_id, s.parent_id) for s in steps} <= {
        (plan.trace_id, lost.span_id), (plan.trace_id, taken.span_id)}
    assert any(b"step change" in body for body in otlp.bodies)  # the search can find
    assert all(SECRET.encode() not in body for body in otlp.bodies)


def test_a_tracing_backend_that_is_down_is_one_warning_and_no_retry_lines(
        tmp_path: Path) -> None:
    from tests.fixtures.sample import free_port

    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("OTEL_")}
    env |= {"PYTHONPATH": str(ROOT), "OTEL_EXPORTER_OTLP_ENDPOINT":
            f"http://127.0.0.1:{free_port()}"}  # nothing listens there
    init = subprocess.run([sys.executable, "-m", "bot.cli", "init"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)
    assert init.returncode == 0, init.stderr
    done = subprocess.run([sys.executable, "-m", "bot.cli", "run", "deploy v1.0.0", "--yes"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert (tmp_path / ".deckhand/hosts/prod-1/current").read_text().strip() == "v1.0.0"
    assert "Transient error" not in out and "Traceback" not in out
    assert len([line for line in out.splitlines() if line.startswith("traces:")]) == 1, out
