"""Stopping a worker drains it: the run it owns finishes, no new one starts, it exits 0.

So workers can be upgraded with runs in flight (SIGTERM from the orchestrator, or Ctrl-C).
A second signal, or a store with no primary while draining, makes it leave at once; the run
is then taken over as after a crash.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.config import Config
from agents.engine.worker import Worker, WorkerOptions
from agents.run.record import RunStatus
from agents.services import build_services
from agents.store import Store
from tests.fixtures.polling import wait_until
from tests.fixtures.redis_sentinel import SentinelGroup
from tests.fixtures.sample import free_port
from tests.fixtures.slack_standin import SlackStandin
from tests.fixtures.slack_world import SECRET
from tests.integration.test_store import _spawn_worker, config_for, gated_plan, submit

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_worker_finishes_its_run_and_takes_no_new_one(
        tmp_path: Path, store: Store, redis_url: str, stop_signal: signal.Signals) -> None:
    config = config_for(tmp_path)
    services = build_services(config, store=store)
    first = submit(services, gated_plan(tmp_path))
    proc = _spawn_worker(config, redis_url, "upgraded")
    try:
        wait_until(lambda: (tmp_path / "started").exists(), what="the first run to start")
        proc.send_signal(stop_signal)
        second = submit(services, gated_plan(tmp_path / "later"))
        (tmp_path / "go").touch()
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert store.runs.get(first.id).status is RunStatus.SUCCEEDED
    assert store.runs.get(second.id).status is RunStatus.QUEUED  # left for the next worker
    assert store.locks.all() == []


def test_a_second_signal_leaves_mid_run_at_once_and_the_run_is_taken_over(
        tmp_path: Path, store: Store, redis_url: str) -> None:
    config = config_for(tmp_path)
    services = build_services(config, store=store)
    run = submit(services, gated_plan(tmp_path))
    log = tmp_path / "worker.log"
    proc = _logged_worker(config, redis_url, log, "--name", "impatient", "--lease", "1")
    try:
        wait_until(lambda: (tmp_path / "started").exists(), what="the run's gate step")
        proc.send_signal(signal.SIGTERM)  # drain: would wait for the gate step…
        wait_until(lambda: any(m.startswith("draining: finishing") for m in _said(log)),
                   what="the worker to start draining")
        proc.send_signal(signal.SIGTERM)  # …but the second signal stops it now
        assert proc.wait(15) == 0, "left without waiting for the step in hand"
    finally:
        if proc.poll() is None:
            proc.kill()
    assert any(m.startswith("stopping now") for m in _said(log))
    assert store.runs.get(run.id).status is RunStatus.RUNNING  # left as a crash leaves it
    (tmp_path / "go").touch()
    rescuer = Worker(services, store, name="rescuer",
                     options=WorkerOptions(lease=1, claim_after=1, block=0.1))
    wait_until(lambda: rescuer.step(block=0.1) and store.runs.get(run.id).status.terminal,
               timeout=30, what="another worker to take the run over")
    assert store.runs.get(run.id).status is RunStatus.SUCCEEDED
    resumed = [e for e in store.audit.entries(run_id=run.id) if e.action == "resumed"]
    assert resumed and resumed[0].details["previous_worker"] == "impatient"


def test_a_draining_worker_leaves_mid_run_when_sentinel_has_no_primary(
        tmp_path: Path, sentinel_group: SentinelGroup) -> None:
    """Issue 34.4: SIGTERM while a run is in hand and Sentinel names no primary. Draining
    must not wait for the run (its step, its last writes) for the whole stop grace period."""
    config = config_for(tmp_path)
    submit(build_services(config, store=Store.connect(sentinel_group.url)),
           gated_plan(tmp_path))
    log = tmp_path / "worker.log"
    proc = _logged_worker(config, sentinel_group.url, log, "--name", "stranded",
                          "--drain-store-wait", "2")
    try:
        wait_until(lambda: (tmp_path / "started").exists(), what="the run's gate step")
        sentinel_group.kill_primary()
        sentinel_group.procs["replica"].kill()  # no member left for Sentinel to name
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, "the drain waited for a store with no primary"
    finally:
        (tmp_path / "go").touch()  # the orphaned gate command ends
        if proc.poll() is None:
            proc.kill()
    assert any(m.startswith("draining: stopped waiting for the store (Redis has not "
                            "answered") for m in _said(log)), _said(log)


def _logged_worker(config: Config, redis_url: str, log: Path,
                   *options: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "worker", "--config", str(config.path),
             "--log-format", "json", *options],
            env={**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)},
            stdout=out, stderr=out, cwd=ROOT)


def _said(log: Path) -> list[str]:
    """The messages of the worker's JSON log lines so far (whole lines only)."""
    return [json.loads(line)["message"] for line in log.read_text().split("\n")[:-1]
            if line.strip()]


def test_a_stopping_worker_and_serve_leave_within_their_bound_when_every_sentinel_is_down(
        tmp_path: Path, sentinel_group: SentinelGroup, slack_standin: SlackStandin) -> None:
    """Issue 39.7: every sentinel down, the primary up. The pooled connection still
    answered a ping, so a draining worker waited for its run in hand (44 s in the issue; the
    stop grace period in compose) and said nothing, though nothing could reconnect or follow
    a failover; `serve` with an embedded worker waited 66 s (the interpreter's exit waits
    for the run's step commands). Both now ask Sentinel too: they say what they wait for and
    leave within --drain-store-wait; a run is taken over after its lease once the sentinels
    are back (the worker's, on a 1 s lease, here; serve's lease is 30 s)."""
    config = config_for(tmp_path)
    store = Store.connect(sentinel_group.url)
    services = build_services(config, store=store)
    gates = {"staging": tmp_path / "a", "production": tmp_path / "b"}
    runs = [submit(services, gated_plan(gate, env),  # production needs two approvals
                   approvers=("bob", "carol") if env == "production" else ("bob",))
            for env, gate in gates.items() if gate.mkdir() is None]
    wait, logs = 3.0, {"worker": tmp_path / "worker.log", "serve": tmp_path / "serve.log"}
    procs = {"worker": _logged_worker(config, sentinel_group.url, logs["worker"], "--name",
                                      "stranded", "--lease", "1", "--drain-store-wait",
                                      str(wait)),
             "serve": _logged_serve(config, sentinel_group.url, logs["serve"], slack_standin,
                                    "--drain-store-wait", str(wait))}
    took: dict[str, float] = {}
    try:
        wait_until(lambda: all((g / "started").exists() for g in gates.values()), timeout=60,
                   what="a run in hand in each process (at its gate step)")
        for index in range(3):
            sentinel_group.procs[f"sentinel{index}"].kill()
            sentinel_group.procs[f"sentinel{index}"].wait(10)
        began = time.monotonic()
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        for name, proc in procs.items():
            assert proc.wait(30) == 0, name
            took[name] = time.monotonic() - began
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
    for name, doing in (("worker", "draining"), ("serve", "stopping")):
        assert took[name] < wait + 4, f"{name} took {took[name]:.1f} s (wait {wait:g} s)"
        said = _said(logs[name])
        # the cause is the sentinels': "no Redis Sentinel names a primary" when they are
        # asked, "… named a primary … in time" when a ping had to open a connection first
        # (which comes first is timing)
        assert any(m.startswith(f"{doing}: the store does not answer (") and
                   "sentinel" in m.lower() and
                   m.endswith(f"waiting up to {wait:g} s for it, then exiting — another "
                              f"worker takes the run in hand over after this one's lease")
                   for m in said), said
        assert any(m.startswith(f"{doing}: stopped waiting for the store (") and
                   "sentinel" in m.lower() and
                   m.endswith("exiting now — another worker takes the run in hand over "
                              "after this one's lease") for m in said), said

    sentinel_group.restart_sentinels()
    for gate in gates.values():
        (gate / "go").touch()
    (stranded,) = [r for r in runs if store.runs.get(r.id).worker == "stranded"]  # lease 1 s
    assert all(store.runs.get(r.id).status is RunStatus.RUNNING for r in runs)  # as left
    rescuer = Worker(services, store, name="rescuer",
                     options=WorkerOptions(lease=1, claim_after=1, block=0.1))
    wait_until(lambda: rescuer.step(block=0.1) is not None and store.runs.get(
        stranded.id).status.terminal, timeout=30, what="another worker to take the run over")
    assert store.runs.get(stranded.id).status is RunStatus.SUCCEEDED


def _logged_serve(config: Config, redis_url: str, log: Path, slack: SlackStandin,
                  *options: str) -> subprocess.Popen[bytes]:
    """`serve --http` with one embedded worker (as `deckhand serve` runs by default)."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "serve", "--http", "--host", "127.0.0.1",
             "--port", str(free_port()), "--metrics-port", "0", "--workers", "1",
             "--config", str(config.path), "--log-format", "json", *options],
            env={**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT),
                 "SLACK_BOT_TOKEN": "xoxb-test-token", "SLACK_SIGNING_SECRET": SECRET,
                 "SLACK_API_URL": f"{slack.url}/api/"},
            stdout=out, stderr=out, cwd=ROOT)
