"""Tracing under faults: a worker SIGKILLed mid-command, and the worker that takes the run
over continues the same trace; nothing secret reaches the exported data."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from agents.store import Store
from tests.fixtures.otlp import Receiver
from tests.fixtures.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]
SECRET = "hunter2-zq81"  # in the config's secrets, the request, a parameter and the output
CONFIG = f"""
secrets: ["{SECRET}"]
inventory:
  hosts:
    web-1: {{connection: local}}
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


def test_a_taken_over_run_stays_one_trace_and_no_secret_is_exported(
        tmp_path: Path, store: Store, redis_url: str, otlp: Receiver) -> None:
    config = tmp_path / "deckhand.yml"
    config.write_text(CONFIG)
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
    rescuer = _worker("rescuer", env, config)
    try:
        wait_until(lambda: store.runs.get(run.id).status.terminal, timeout=60,
                   what="the rescuer to finish the run")
    finally:
        rescuer.send_signal(signal.SIGTERM)  # drains, then flushes its spans as it exits
        assert rescuer.wait(60) == 0

    wait_until(lambda: otlp.named("deckhand.run"), what="the rescuer's run span")
    (plan,) = otlp.named("deckhand.plan")
    (taken,) = otlp.named("deckhand.run")  # the dead worker's span never ended: never sent
    assert taken.attributes["deckhand.worker"] == "rescuer"
    assert taken.attributes["deckhand.run.taken_over_from"] == "doomed"
    assert taken.trace_id == plan.trace_id and taken.parent_id == plan.span_id
    assert {s.trace_id for s in otlp.named("deckhand.step")} == {plan.trace_id}
    assert any(b"deckhand.step" in body for body in otlp.bodies)  # the search can find
    assert all(SECRET.encode() not in body for body in otlp.bodies)
    assert store.runs.get(run.id).status.value == "succeeded"


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
