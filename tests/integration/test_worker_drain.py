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


def test_a_draining_worker_leaves_within_its_bound_when_every_sentinel_is_down(
        tmp_path: Path, sentinel_group: SentinelGroup) -> None:
    """Issue 39.7: every sentinel down, the primary up. Its pooled connection still answered
    a ping, so the drain waited for the run in hand (44 s here, the stop grace period in
    compose) and said nothing — yet nothing could reconnect or follow a failover. The drain
    asks Sentinel too: it says what it waits for, gives up within --drain-store-wait, and
    the run is taken over once the sentinels are back."""
    config = config_for(tmp_path)
    store = Store.connect(sentinel_group.url)
    services = build_services(config, store=store)
    run = submit(services, gated_plan(tmp_path))
    log, wait = tmp_path / "worker.log", 3.0
    proc = _logged_worker(config, sentinel_group.url, log, "--name", "stranded", "--lease",
                          "1", "--drain-store-wait", str(wait))
    try:
        wait_until(lambda: (tmp_path / "started").exists(), what="the run's gate step")
        for index in range(3):
            sentinel_group.procs[f"sentinel{index}"].kill()
            sentinel_group.procs[f"sentinel{index}"].wait(10)
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        took = time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()
    assert took < wait + 4, f"the drain took {took:.1f} s with --drain-store-wait {wait:g}"
    said = _said(log)
    nobody = "no Redis Sentinel names a primary for service 'deckhand'"
    assert any(m.startswith(f"draining: the store does not answer ({nobody}") and
               m.endswith(f"waiting up to {wait:g} s for it, then exiting — another worker "
                          f"takes the run in hand over after this one's lease")
               for m in said), said
    assert any(m.startswith(f"draining: stopped waiting for the store ({nobody}") and
               m.endswith("exiting now — another worker takes the run in hand over after "
                          "this one's lease") for m in said), said

    sentinel_group.restart_sentinels()
    (tmp_path / "go").touch()
    rescuer = Worker(services, store, name="rescuer",
                     options=WorkerOptions(lease=1, claim_after=1, block=0.1))
    wait_until(lambda: rescuer.step(block=0.1) and store.runs.get(run.id).status.terminal,
               timeout=30, what="another worker to take the run over")
    assert store.runs.get(run.id).status is RunStatus.SUCCEEDED
