"""Ctrl-C during `deckhand run` cancels the run, runs its rollback and waits for it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from agents.run.record import RunStatus, StepStatus
from agents.store import Store
from tests.fixtures.builders import BASE, make_config
from tests.fixtures.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]
TOOLS = """
tools:
  change:
    description: change the host, then report it started the long part
    command: "echo changed > {host.dir}.state; echo started > {vars.flag}; for i in $(seq 1 600); do sleep 0.1; done"
    target: environment
    mutates: true
    rollback: undo
  undo:
    description: put the host back
    command: "sleep 0.5; rm -f {host.dir}.state; echo undone >> {vars.log}"
    target: environment
    mutates: true
vars:
  flag: "{config_dir}/started"
  log: "{config_dir}/log.txt"
playbooks:
  - name: ship
    match: ['^ship$']
    goal: ship it to staging
    steps: [{id: change, tool: change, params: {environment: staging}}]
    rollback: [{id: undo, tool: undo, params: {environment: staging}}]
"""


def test_ctrl_c_rolls_back_before_it_exits(tmp_path: Path) -> None:
    config = make_config(tmp_path, tools=TOOLS)
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"} | {
        "PYTHONPATH": str(ROOT), "COLUMNS": "300"}
    proc = subprocess.Popen([sys.executable, "-m", "bot.cli", "run", "ship", "--yes",
                             "--config", str(config.path)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: (tmp_path / "started").exists(), what="the change to start")
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (tmp_path / "log.txt").read_text() == "undone\n", out  # rollback ran, once
    assert not (tmp_path / "web-1.state").exists()  # the host is back
    assert "CANCELLED" in out and proc.returncode == 1


def test_a_second_ctrl_c_says_what_it_leaves_behind(tmp_path: Path) -> None:
    tools = TOOLS.replace('command: "sleep 0.5; rm -f {host.dir}.state; echo undone >> '
                          '{vars.log}"',
                          'command: "while [ ! -e {vars.flag}.release ]; do sleep 0.05; done"')
    config = make_config(tmp_path, tools=tools)
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"} | {
        "PYTHONPATH": str(ROOT), "COLUMNS": "300"}
    proc = subprocess.Popen([sys.executable, "-u", "-m", "bot.cli", "run", "ship", "--yes",
                             "--config", str(config.path)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    stdout = proc.stdout
    assert stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(iter(stdout.readline, "")))
    reader.start()
    try:
        wait_until(lambda: (tmp_path / "started").exists(), what="the change to start")
        proc.send_signal(signal.SIGINT)
        wait_until(lambda: any("Cancelling" in line for line in lines), what="the cancel")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 130
    finally:
        (tmp_path / "started.release").touch()  # let the abandoned rollback command end
        if proc.poll() is None:
            proc.kill()
        reader.join(10)
    text = "".join(lines)
    assert "Stopping now" in text and "web-1" in text and "deckhand runs show" in text


PIPED_TOOLS = TOOLS.replace("echo undone >> {vars.log}", "echo undone {host.name} >> {vars.log}")


def _piped_run(tmp_path: Path, redis_url: str | None = None) -> subprocess.Popen[str]:
    """`deckhand run` deploying to two hosts at once, its output into a pipe (as under
    `| tee log`); with ``redis_url``, its record and audit in that Redis."""
    path = tmp_path / "deckhand.yml"
    # web-4: staging's own second host (a host production lists too would make this a
    # production change, which promotion refuses before staging)
    base = textwrap.dedent(BASE).replace("staging: {hosts: [web-1]}",
                                         "staging: {hosts: [web-1, web-4]}")
    base = base.replace("    web-3: {connection: local", "    web-4: {connection: local, vars: "
                        "{dir: \"{config_dir}/web-4\"}}\n    web-3: {connection: local")
    path.write_text(base + textwrap.dedent(PIPED_TOOLS))
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"} | {
        "PYTHONPATH": str(ROOT), "COLUMNS": "300"} | ({"REDIS_URL": redis_url} if redis_url else {})
    return subprocess.Popen([sys.executable, "-m", "bot.cli", "run", "ship", "--yes",
                             "--config", str(path)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _assert_rolled_back_on_both(tmp_path: Path, proc: subprocess.Popen[str]) -> None:
    assert proc.wait(60) == 1  # ended as a cancelled run, not by a signal or a crash
    assert sorted((tmp_path / "log.txt").read_text().splitlines()) == [
        "undone web-1", "undone web-4"]  # the rollback visited both hosts, once each
    assert not (tmp_path / "web-1.state").exists() and not (tmp_path / "web-4.state").exists()


def _close_output_once_both_changed(tmp_path: Path, proc: subprocess.Popen[str]) -> None:
    wait_until(lambda: (tmp_path / "web-1.state").exists()
               and (tmp_path / "web-4.state").exists(), what="both hosts to change")
    assert proc.stdout is not None
    proc.stdout.close()  # tee died with the Ctrl-C: every write now fails with EPIPE


def test_ctrl_c_with_the_output_pipe_closed_still_rolls_back(tmp_path: Path) -> None:
    proc = _piped_run(tmp_path)
    try:
        _close_output_once_both_changed(tmp_path, proc)
        proc.send_signal(signal.SIGINT)
        _assert_rolled_back_on_both(tmp_path, proc)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_hang_up_during_the_rollback_does_not_stop_it(tmp_path: Path, store: Store,
                                                        redis_url: str) -> None:
    proc = _piped_run(tmp_path, redis_url)
    try:
        _close_output_once_both_changed(tmp_path, proc)
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGHUP)  # the operator's SSH session dropped too
        _assert_rolled_back_on_both(tmp_path, proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    (run,) = store.runs.recent(limit=5)  # the record and the audit say what the hosts show
    assert run.status is RunStatus.CANCELLED, run.reason
    assert sorted(run.rollback["undo"].hosts) == ["web-1", "web-4"]
    assert {h.status for h in run.rollback["undo"].hosts.values()} == {StepStatus.SUCCEEDED}
    audit = [(e.action, e.details.get("status")) for e in store.audit.entries(run_id=run.id)]
    assert ("rollback_finished", "succeeded") in audit
    assert [a for a in audit if a[0] == "run_finished"] == [("run_finished", "cancelled")]
