"""Gates judge results with explicit criteria, and fail closed when they cannot judge."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agents.config import load_config
from agents.run.record import RunStatus
from tests.fixtures.builders import make_config, make_executor, make_plan
from tests.fixtures.sample import free_port
from tools.errors import ConfigError, ParamError
from tools.runners.gate import GateRunner


class Answers(ThreadingHTTPServer):
    """A loopback HTTP server answering ``routes[path] = (status, body)``; it records the
    Authorization header of each request."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", free_port()), _Handler)
        self.routes: dict[str, tuple[int, Any]] = {}
        self.queued: dict[str, list[tuple[int, Any]]] = {}
        """Answers given once each, in order, before ``routes``."""
        self.auth: list[str | None] = []
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Answers

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.server.auth.append(self.headers.get("Authorization"))
        path, _, query = self.path.partition("?")
        asked = urllib.parse.parse_qs(query)
        if asked.get("query", [""])[0].startswith("max(timestamp("):
            # how old a gate's inputs are: in this stand-in, as fresh as the query
            at = float(asked["time"][0])
            return self._send(200, {"status": "success", "data": {"resultType": "vector",
                              "result": [{"metric": {}, "value": [at, str(at)]}]}})
        queued = self.server.queued.get(path)
        status, body = queued.pop(0) if queued else self.server.routes.get(path, (404, "nope"))
        self._send(status, body)

    def _send(self, status: int, body: Any) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def answers() -> Iterator[Answers]:
    server = Answers()
    yield server
    server.shutdown()
    server.server_close()


def _gate_config(tmp_path: Path, url: str) -> Any:
    return make_config(tmp_path, tools=f"""
tools:
  healthy:
    description: the service reports healthy
    gate:
      kind: http
      url: "{url}/health/{{service}}"
      body_pattern: "ok"
      json:
        - {{path: checks.0.status, value: pass}}
        - {{path: latency_ms, op: lt, value: 200}}
    params: {{service: {{type: string}}}}
  ci_green:
    description: CI passed
    gate: {{kind: ci_status, repo: acme/app, ref: "{{version}}", api_url: "{url}"}}
    params: {{version: {{type: string}}}}
""")


def _run(config: Any, tool: str, **params: Any) -> tuple[int | None, str]:
    spec = config.catalog.render(config.catalog.get(tool), params, host_vars={},
                                 config_vars=config.vars)
    lines: list[str] = []
    result = GateRunner().run(spec, timeout=10, on_output=lines.append)
    assert result.tail == "\n".join(lines)
    return result.exit_code, result.tail


def test_http_gate_checks_status_body_and_json_paths(tmp_path: Path, answers: Answers) -> None:
    config = _gate_config(tmp_path, answers.url)
    answers.routes["/health/api"] = (200, {"status": "ok", "checks": [{"status": "pass"}],
                                            "latency_ms": 80})
    assert _run(config, "healthy", service="api") == (0, (
        f"✓ GET {answers.url}/health/api → 200 (expected 200)\n✓ body matches 'ok'\n"
        f"✓ checks.0.status = 'pass' (eq 'pass')\n✓ latency_ms = 80 (lt 200)"))
    answers.routes["/health/api"] = (200, {"status": "ok", "checks": [{"status": "fail"}],
                                            "latency_ms": 450})
    code, tail = _run(config, "healthy", service="api")
    assert code == 1 and "✗ checks.0.status = 'fail'" in tail and "✗ latency_ms = 450" in tail
    code, tail = _run(config, "healthy", service="db")  # 404: not the expected status
    assert code == 1 and "→ 404" in tail


def test_a_gate_that_cannot_be_evaluated_fails(tmp_path: Path) -> None:
    config = _gate_config(tmp_path, f"http://127.0.0.1:{free_port()}")  # nothing listens
    code, tail = _run(config, "healthy", service="api")
    assert code == 1 and "cannot evaluate: cannot reach 127.0.0.1" in tail


def test_plan_values_cannot_rewrite_a_gate(tmp_path: Path, answers: Answers) -> None:
    config = _gate_config(tmp_path, answers.url)
    for hostile in ("api/../../admin", 'x"} or vector(1) #', "a b"):
        with pytest.raises(ParamError, match="cannot go into a gate"):
            _run(config, "healthy", service=hostile)


def test_ci_status_needs_every_check_green_and_never_shows_the_token(
        tmp_path: Path, answers: Answers, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_supersecret0123456789")
    config = _gate_config(tmp_path, answers.url)
    base = "/repos/acme/app/commits/v2.3.1"
    answers.routes[f"{base}/status"] = (200, {"state": "success",
                                              "statuses": [{"context": "ci/unit"}]})
    answers.routes[f"{base}/check-runs"] = (200, {"check_runs": [
        {"name": "lint", "status": "completed", "conclusion": "success"},
        {"name": "e2e", "status": "in_progress", "conclusion": None}]})
    code, tail = _run(config, "ci_green", version="v2.3.1")
    assert code == 1 and "✗ check e2e: in_progress" in tail and "✓ check lint: success" in tail
    answers.routes[f"{base}/check-runs"] = (200, {"check_runs": [
        {"name": "lint", "status": "completed", "conclusion": "success"}]})
    assert _run(config, "ci_green", version="v2.3.1")[0] == 0
    assert set(answers.auth) == {"Bearer ghp_supersecret0123456789"}
    answers.routes[f"{base}/status"] = (502, "bad gateway")
    code, tail = _run(config, "ci_green", version="v2.3.1")
    assert code == 1 and "GitHub answered 502" in tail and "ghp_" not in tail
    assert _run(config, "ci_green", version="v9.9.9")[0] == 1  # no status at all: not green


def test_rollouts_may_only_wait_on_gates(tmp_path: Path) -> None:
    path = tmp_path / "deckhand.yml"
    text = (Path(__file__).parents[2] / "examples" / "deckhand.yml").read_text()
    text = text.replace("rollout: {batch_size: 1, stop_on_failure: true}",
                        "rollout: {batch_size: 1, after_each_batch: [deploy, eror_rate]}", 1)
    path.write_text(text.replace("tools: tools.yml", "tools: " + str(
        Path(__file__).parents[2] / "examples" / "tools.yml")))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert "deploy is not a gate" in message
    assert "unknown tool 'eror_rate'. Did you mean 'error_rate'?" in message


def _vector(*series: tuple[str, float, str]) -> tuple[int, Any]:
    return 200, {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"instance": name}, "value": [at, value]} for name, at, value in series]}}


def test_stale_and_vanished_series_fail_the_gate_named(answers: Answers) -> None:
    now = time.time()
    spec = {"kind": "prometheus", "url": answers.url, "query": "up", "min": 1, "interval": 0}
    answers.queued["/api/v1/query"] = [_vector(("a", now, "1"), ("b", now - 900, "1"))]
    stale = GateRunner().run(json.dumps(spec), timeout=5)
    assert stale.exit_code == 1
    assert 'instance="b"} = 1' in (stale.gate.reason or "") and "stale" in stale.tail
    answers.queued["/api/v1/query"] = [_vector(("a", now, "1"), ("b", now, "1")),
                                       _vector(("a", now, "1"))]
    gone = GateRunner().run(json.dumps({**spec, "count": 2}), timeout=5)
    assert gone.exit_code == 1
    assert 'instance="b"} = absent' in (gone.gate.reason or "") and "vanished" in gone.tail


def test_a_gate_step_records_its_samples_in_the_run(tmp_path: Path, answers: Answers) -> None:
    config = make_config(tmp_path, tools=f"""
tools:
  healthy_ratio:
    description: every instance answers
    gate: {{kind: prometheus, url: "{answers.url}", query: "up", min: 1, interval: 0}}
""")
    now = time.time()
    answers.routes["/api/v1/query"] = _vector(("a", now, "1"), ("b", now, "0"))
    plan = make_plan([{"id": "judge", "tool": "healthy_ratio", "params": {}}])
    run = make_executor(config).execute(plan)
    assert run.status is RunStatus.FAILED
    [check] = run.gates
    assert (check.name, check.step, check.ok) == ("healthy_ratio", "judge", False)
    assert sorted(s.value for s in check.samples) == ["0", "1"]
    assert 'instance="b"} = 0' in (check.reason or "")


def test_a_gate_step_records_its_samples_redacted(tmp_path: Path, answers: Answers) -> None:
    """Series labels are the measured system's words: a credential in one is masked in the
    run's record of the gate (samples, lines and reason alike), not only at the sinks."""
    config = make_config(tmp_path, tools=f"""
tools:
  healthy_ratio:
    description: every instance answers
    gate: {{kind: prometheus, url: "{answers.url}", query: "up", min: 1, interval: 0}}
""")
    answers.routes["/api/v1/query"] = 200, {"status": "success", "data": {
        "resultType": "vector", "result": [{"metric": {"dsn": "postgres://app:hunter2@db"},
                                            "value": [time.time(), "0"]}]}}
    run = make_executor(config).execute(make_plan([{"id": "judge", "tool": "healthy_ratio",
                                                    "params": {}}]))
    [check] = run.gates
    assert "hunter2" not in check.model_dump_json()
    assert check.samples[0].series == '{dsn="postgres://app:[REDACTED]@db"}'


def _sample(series: str, value: str, round_no: int, *, ok: bool = True) -> Any:
    from tools.gates import GateSample

    return GateSample(query="ratio", series=series, value=value, bound="must be ≥ 0.99",
                      at=1.0, round=round_no, ok=ok, problem=None if ok else "below 0.99")


def test_a_gates_figure_names_every_series_of_its_last_round() -> None:
    """What a go/no-go shows of a gate: each series' last value against the bound, failed
    samples a failure_limit tolerated, and the lines of a gate with no samples."""
    from agents.run.gates import FIGURE_SERIES, figure
    from agents.run.record import GateCheck

    samples = [_sample('{s="a"}', "0.5", 1, ok=False), _sample('{s="b"}', "1", 1),
               _sample('{s="a"}', "0.995", 2), _sample('{s="b"}', "1", 2)]
    check = GateCheck(name="ratio", step="ship", after_batch=1, batches=3, ok=True,
                      samples=samples, samples_total=4)
    assert figure(check) == (
        'ratio after batch 1 of 3: passed — 4 sample(s); round 2: {s="a"} = 0.995, '
        '{s="b"} = 1 (must be ≥ 0.99); 1 failed sample(s) tolerated (failure_limit), '
        'first: ✗ sample 1/2 {s="a"} = 0.5 (must be ≥ 0.99) at 00:00:01Z: below 0.99')
    many = [_sample(f'{{s="{n}"}}', "1", 1) for n in range(FIGURE_SERIES + 3)]
    assert figure(check.model_copy(update={"samples": many, "samples_total": len(many)})) \
        .endswith(f'{{s="{FIGURE_SERIES - 1}"}} = 1 and 3 more series (must be ≥ 0.99)')
    http = GateCheck(name="healthy", step="ship", after_batch=2, batches=3, ok=True,
                     lines=["✓ GET http://x/health → 200 (expected 200)", "✓ body matches 'ok'"])
    assert figure(http) == ("healthy after batch 2 of 3: passed — ✓ GET http://x/health → "
                            "200 (expected 200); ✓ body matches 'ok'")


def test_a_large_gate_keeps_its_failed_samples_then_its_newest_rounds() -> None:
    from agents.run.gates import MAX_SAMPLES, gate_check
    from tools.gates import GateResult
    from tools.runners.gate import GateCommandResult

    rounds = 3
    samples = [_sample(f'{{s="{n}"}}', "1", r) for r in range(1, rounds + 1)
               for n in range(MAX_SAMPLES // 2)]
    samples[5] = _sample('{s="5"}', "0.5", 1, ok=False)
    result = GateCommandResult(exit_code=0, tail="", duration=0.1,
                               gate=GateResult(True, samples=samples))
    kept = gate_check("ratio", "ship", result, after_batch=1, batches=1).samples
    assert len(kept) == MAX_SAMPLES and not kept[0].ok
    assert {s.round for s in kept[1:]} == {rounds, rounds - 1}  # the newest, whole rounds
