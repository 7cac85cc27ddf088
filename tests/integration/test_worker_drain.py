"""Stopping a worker drains it: the run it owns finishes, no new one starts, it exits 0.

So workers can be upgraded with runs in flight (SIGTERM from the orchestrator, or Ctrl-C).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from agents.run.record import RunStatus
from agents.services import build_services
from agents.store import Store
from tests.fixtures.polling import wait_until
from tests.integration.test_store import _spawn_worker, config_for, gated_plan, submit


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
