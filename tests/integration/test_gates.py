"""A metric gate between rollout batches, against a real Prometheus scraping the sample app."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from agents.config import Config
from agents.run.record import Run, RunStatus
from agents.services import Services, build_services
from bot.cli.demo import probe
from bot.terminal.console import ConsoleFlow
from tests.fixtures.polling import wait_until
from tests.fixtures.prometheus import Prometheus


@pytest.fixture
def prometheus(sample_config: Config, tmp_path: Path) -> Iterator[Prometheus]:
    environments = {h: e for e, env in sample_config.inventory.environments.items()
                    for h in env.hosts}
    targets = {name: (int(host.vars["port"]), environments[name])
               for name, host in sample_config.inventory.hosts.items()}
    server = Prometheus(tmp_path / "prometheus", targets)
    yield server
    server.stop()


def _run(services: Services, request: str) -> Run:
    run = ConsoleFlow(services, Console(record=True, width=160), user="alice",
                      confirm=lambda word: word).handle(
        request, yes=True)
    assert run is not None
    return run


def test_error_rate_gate_stops_the_rollout_after_the_first_batch(
        sample_config: Config, prometheus: Prometheus) -> None:
    sample_config.vars["prometheus"] = prometheus.url
    services = build_services(sample_config)
    assert _run(services, "deploy v2.3.1").status is RunStatus.SUCCEEDED
    rate = 'rate(app_errors_total{environment="production"}[10s])'
    wait_until(lambda: len(prometheus.query(rate)) == 2, timeout=30,
               what="Prometheus to have two scrapes of both production hosts")
    rollout = sample_config.inventory.environments["production"].rollout
    rollout.after_each_batch = ["error_rate"]

    good = _run(services, "deploy v2.4.0")
    assert good.status is RunStatus.SUCCEEDED
    assert {p.body for p in probe(sample_config)} == {"v2.4.0"}

    bad = _run(services, "deploy v2.5.0-errors")  # healthy, passes smoke tests, fails requests
    assert bad.status is RunStatus.ROLLED_BACK
    step = bad.steps["deploy_production"]
    assert step.error is not None and "gate error_rate failed after batch 1" in step.error
    assert set(step.hosts) == {"prod-1"}  # the second batch never started
    assert {p.body for p in probe(sample_config)} == {"v2.4.0"}  # and prod-1 is back
