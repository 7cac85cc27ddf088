"""Health answers that tell the truth in bounded time (issue 34.2, 34.4): a hung Redis
(SIGSTOP: connections accepted, nothing answered), a stuck worker, a drain with no store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.config import Config
from agents.store import Store
from bot.cli import main
from tests.fixtures.polling import wait_until
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.sample import free_port
from tests.fixtures.slack_standin import SlackStandin
from tests.fixtures.slack_world import start_world

ROOT = Path(__file__).resolve().parents[2]


def _get(url: str, timeout: float = 10) -> tuple[int, dict[str, Any], float]:
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            status, body = r.status, r.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    return status, json.loads(body), time.monotonic() - started


@pytest.fixture
def hung_redis(own_redis: RedisServer) -> Iterator[RedisServer]:
    """own_redis, continued at the end whatever the test did (a stopped process ignores the
    fixture's SIGTERM)."""
    yield own_redis
    assert own_redis.proc is not None
    own_redis.proc.send_signal(signal.SIGCONT)


def test_readyz_answers_503_with_the_reason_within_2s_when_redis_hangs(
        sample_config: Config, hung_redis: RedisServer, slack_standin: SlackStandin) -> None:
    world = start_world(sample_config, Store.connect(hung_redis.url), slack_standin)
    try:
        assert _get(world.http + "/readyz")[:2] == (200, {"ok": True})
        assert hung_redis.proc is not None
        hung_redis.proc.send_signal(signal.SIGSTOP)
        for _ in range(3):  # every probe is bounded, not only the first
            status, body, took = _get(world.http + "/readyz")
            assert status == 503 and "has not answered a ping" in body["redis"]
            assert took <= 2.0, f"/readyz took {took:.1f} s"
        hung_redis.proc.send_signal(signal.SIGCONT)
        wait_until(lambda: _get(world.http + "/readyz")[0] == 200, timeout=30,
                   what="ready again once Redis answers")
    finally:
        world.runtime.stop()


def test_serve_http_without_redis_url_refuses_unless_single_process_is_asked_for(
        sample_config: Config, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("DECKHAND_SINGLE_PROCESS", raising=False)
    assert main(["serve", "--http", "--config", str(sample_config.path)]) == 2
    out = capsys.readouterr().out
    assert "needs REDIS_URL" in out and "--single-process" in out


def test_worker_health_tells_stuck_from_idle_and_its_drain_gives_up_on_a_hung_store(
        sample_config: Config, hung_redis: RedisServer, tmp_path: Path) -> None:
    port, log = free_port(), tmp_path / "worker.log"
    base = f"http://127.0.0.1:{port}"
    with log.open("w") as err:
        worker = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "worker", "--config", str(sample_config.path),
             "--metrics-port", str(port), "--stuck-after", "3", "--drain-store-wait", "1",
             "--log-format", "json"],
            env={**os.environ, "REDIS_URL": hung_redis.url, "PYTHONPATH": str(ROOT)},
            stderr=err, stdout=err)
        try:
            _worker_story(worker, hung_redis, base)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait(10)
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    messages = [x["message"] for x in lines]  # every line JSON: banners and warnings too
    assert any(m.startswith("metrics and health on http://127.0.0.1:") for m in messages)
    assert any(m.startswith("worker ") and "drains" in m for m in messages)
    assert any("stopped waiting for the store" in m and "has not answered" in m
               for m in messages)


def _worker_story(worker: subprocess.Popen[bytes], redis_server: RedisServer,
                  base: str) -> None:
    started = time.monotonic()

    def idle_and_healthy_past_the_limit() -> bool:
        try:
            status = _get(base + "/healthz")[0]
        except OSError:
            return False
        assert status == 200, "an idle worker is healthy"
        return time.monotonic() - started > 4  # longer than --stuck-after 3

    wait_until(idle_and_healthy_past_the_limit, timeout=30, what="an idle worker, healthy")
    assert healthcheck(base) == (0, "")  # the image's HEALTHCHECK command
    assert _get(base + "/readyz")[:2] == (200, {"ok": True})
    assert "deckhand_queue_depth" in urllib.request.urlopen(base + "/metrics").read().decode()

    assert redis_server.proc is not None
    redis_server.proc.send_signal(signal.SIGSTOP)  # its loop now blocks on a read
    status, body, took = _get(base + "/readyz")
    assert status == 503 and "has not answered" in body["redis"] and took <= 2.0
    stuck = wait_until(lambda: (lambda s: s if s[0] == 503 else None)(_get(base + "/healthz")),
                       timeout=20, what="/healthz to say stuck")
    assert "no progress for" in stuck[1]["worker"]
    status, said = healthcheck(base)
    assert status == 1 and said.startswith("unhealthy: ") and "no progress for" in said

    worker.send_signal(signal.SIGTERM)  # drain, with a store that answers nothing
    assert worker.wait(20) == 0, "the drain gave up on the hung store and exited"


def healthcheck(base: str) -> tuple[int, str]:
    """``python -m bot.healthcheck PORT``, as the image's HEALTHCHECK runs it: exit code and
    what it said on stderr."""
    port = base.rsplit(":", 1)[1]
    done = subprocess.run([sys.executable, "-m", "bot.healthcheck", port], capture_output=True,
                          timeout=30, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    return done.returncode, done.stderr.decode().strip()
