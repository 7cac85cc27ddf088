"""The sample app as a new team meets it: phrasings, rollback, its own ports, clean demo."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from rich.console import Console

from agents.config import Config
from agents.errors import NoPlanFound, PlanInvalid
from agents.run.record import RunStatus
from agents.services import Services, build_services
from bot.cli.demo import app_port, probe, run_demo
from bot.terminal.console import ConsoleFlow
from tests.fixtures.sample import EXAMPLES


class Impostor(BaseHTTPRequestHandler):
    """Another checkout's server: right version, healthy, but not this deployment."""

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        body = b"v2.3.1\n" if self.path == "/version" else b"ok instance=someone-else\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def impostor() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Impostor)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


@pytest.fixture
def services(sample_config: Config) -> Iterator[Services]:
    built = build_services(sample_config)
    yield built
    built.close()


@pytest.mark.parametrize(("request_", "playbook"), [
    ("deploy v2.3.1", "deploy"), ("ship v2.3.1 to production", "deploy"),
    ("DEPLOY V2.3.1", "deploy"), ("deploy v2.3.1 to staging only", "deploy-staging"),
    ("ship v2.3.1 to staging", "deploy-staging"), ("roll back production", "rollback"),
    ("roll back production to the previous release", "rollback"),
    ("what's running in production?", "status"), ("status of production", "status"),
    ("Status of Production", "status")])
def test_sample_playbooks_understand_phrasings(services: Services, request_: str,
                                               playbook: str) -> None:
    plan = services.make_plan(request_, requested_by="alice", face="cli")
    assert plan.planner.name == f"playbook {playbook}"


def test_rolling_back_to_a_version_never_live_there_is_refused(services: Services) -> None:
    with pytest.raises(PlanInvalid, match="v2.3.0 was never live in production"):
        services.make_plan("roll back production to v2.3.0", requested_by="alice", face="cli")


def test_unknown_environment_is_named_with_the_known_ones(services: Services) -> None:
    for request in ("deploy v2.3.1 to mars", "status of mars", "roll back mars"):
        with pytest.raises(NoPlanFound) as refused:
            services.make_plan(request, requested_by="alice", face="cli")
        assert "'mars'" in str(refused.value)
        assert "staging (also stage, stg), production (also prod, live)" in str(refused.value)


def test_no_match_suggests_closest_playbooks_with_examples(services: Services) -> None:
    fixed = services.make_plan("rollback prodution please", requested_by="alice", face="cli")
    assert fixed.planner.note == "read 'prodution' as 'production'"  # a typo, said back
    with pytest.raises(NoPlanFound) as refused:  # "please" is filler; the place is named
        services.make_plan("rollback mars please", requested_by="alice", face="cli")
    assert "unknown environment 'mars'" in str(refused.value)
    with pytest.raises(NoPlanFound) as refused:
        services.make_plan("take production back a release", requested_by="alice", face="cli")
    lines = str(refused.value).splitlines()
    assert "I understood: environment production" in lines[0] and "Closest" in lines[1]
    suggested = [line for line in lines if line.startswith("  • ")]
    assert len(suggested) == 4  # all, closest first
    assert all("staging" not in line.split(" — ")[0] for line in suggested[:2])


def test_one_error_per_problem(services: Services) -> None:
    with pytest.raises(PlanInvalid) as refused:
        services.make_plan("deploy v2.3.1\x00", requested_by="alice", face="cli")
    message = str(refused.value)
    assert message.count("'version'") == 1 and "steps run_tests, build_docker" in message


def test_rollback_to_previous_and_to_a_named_version(services: Services,
                                                     sample_config: Config) -> None:
    flow = ConsoleFlow(services, Console(record=True, width=100), user="alice",
                       confirm=lambda word: word)
    for request in ("deploy v2.3.0", "deploy v2.3.1", "roll back production to v2.3.0"):
        run = flow.handle(request, yes=True)
        assert run is not None and run.status is RunStatus.SUCCEEDED, request
    served = {p.host: p.body for p in probe(sample_config)}
    assert served == {"staging-1": "v2.3.1", "prod-1": "v2.3.0", "prod-2": "v2.3.0"}
    run = flow.handle("roll back production", yes=True)
    assert run is not None and run.status is RunStatus.SUCCEEDED
    assert {p.body for p in probe(sample_config)} == {"v2.3.1"}


def test_busy_port_gets_a_free_one_recorded_in_the_workspace(
        services: Services, sample_config: Config, impostor: int) -> None:
    staging = sample_config.inventory.hosts["staging-1"]
    staging.vars["port"] = impostor  # another checkout's server holds the preferred port
    run = ConsoleFlow(services, Console(record=True), user="a").handle("deploy v2.3.1 to staging",
                                                                       yes=True)
    assert run is not None and run.status is RunStatus.SUCCEEDED
    recorded = app_port(staging.vars)
    assert recorded != impostor
    assert (Path(str(staging.vars["dir"])) / "port").read_text().strip() == str(recorded)


def test_smoke_test_refuses_another_deployments_server(tmp_path: Path, impostor: int) -> None:
    (tmp_path / "instance").write_text("mine\n")
    smoke = subprocess.run([str(EXAMPLES / "app/bin/smoke.sh"), str(tmp_path), str(impostor),
                            "v2.3.1"], capture_output=True, text=True, timeout=30)
    assert smoke.returncode == 1 and "another deployment" in smoke.stderr


def _servers_under(path: Path) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(path) in cmdline.read_bytes().decode(errors="replace"):
                found.append(cmdline.parent.name)
        except OSError:
            continue
    return found


def test_demo_stops_what_it_started_unless_keep(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert run_demo(Console(record=True), workdir=tmp_path / "a") == 0
    assert _servers_under(tmp_path / "a") == []
    console = Console(record=True, width=300)
    assert run_demo(console, workdir=tmp_path / "b", keep=True) == 0
    kept = _servers_under(tmp_path / "b")
    assert len(kept) == 3 and "Kept the sample" in console.export_text()
    for host_dir in (tmp_path / "b").glob("*/sample/.deckhand/hosts/*"):
        subprocess.run([str(EXAMPLES / "app/bin/stop.sh"), str(host_dir)], check=True,
                       timeout=30)
    assert _servers_under(tmp_path / "b") == []
