"""The image's environment on real processes (issue 34.5). With only what the Dockerfile
and compose set — DECKHAND_LOG_FORMAT=json, DECKHAND_METRICS_HOST=0.0.0.0, secrets from
``*_FILE``, a state directory — every line ``serve --http``, ``worker`` and ``audit ship``
print is JSON (banners, a fatal setting at start — of ``schedules serve`` and ``mcp --http``
too —, config reloads, the audit sink's lines), and /metrics answers on 127.0.0.2, which a socket bound to 127.0.0.1 alone never does."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from agents.config import Config
from agents.store import Store
from tests.fixtures.polling import wait_until
from tests.fixtures.sample import free_port
from tests.fixtures.siem_standin import SiemStandin
from tests.fixtures.slack_standin import SlackStandin
from tests.integration.test_audit_sink import once, sink_config, webhook, write_entries
from tests.integration.test_config_reload import audited, stop
from tests.unit.test_deployment import _dockerfile

ROOT = Path(__file__).resolve().parents[2]
IMAGE = {"DECKHAND_LOG_FORMAT": "json", "DECKHAND_METRICS_HOST": "0.0.0.0"}
"""As the Dockerfile sets them."""


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """This test's environment and the image's, nothing of deckhand's from the caller (the
    health file in this test's directory: the image's /tmp is the container's own)."""
    env = {k: v for k, v in os.environ.items() if k != "PORT"
           and not k.startswith(("DECKHAND_", "REDIS_URL", "SLACK_", "OPENAI_"))}
    return {**env, **IMAGE, "PYTHONPATH": str(ROOT),
            "DECKHAND_STATE_DIR": str(tmp_path / "state"),
            "DECKHAND_EMBEDDED_STORE": "memory",  # as the suite's other tests (conftest)
            "DECKHAND_HEALTH_FILE": str(tmp_path / "health"), **extra}


def image_healthcheck(role: str, env: dict[str, str]) -> tuple[int, str]:
    """The Dockerfile's HEALTHCHECK command for ``role``, run as Docker runs it (in the
    container's environment): exit code and what it said on stderr."""
    _, stages = _dockerfile()
    command = json.loads((stages[role].last("HEALTHCHECK") or "").partition(" CMD ")[2])
    assert command[0] == "python"
    done = subprocess.run([sys.executable, *command[1:]], env=env, capture_output=True,
                          timeout=30, cwd=ROOT)
    return done.returncode, done.stderr.decode().strip()


def _secret(tmp_path: Path, name: str, value: str) -> str:
    path = tmp_path / "secrets" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(value + "\n")
    return str(path)


def _start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "bot.cli", *argv], env=env,
                                stdout=out, stderr=out, cwd=ROOT)


def _records(log: Path) -> list[dict[str, Any]]:
    """Every whole line so far, each of which must be a JSON object."""
    records = []
    for line in log.read_text().split("\n")[:-1]:
        if line.strip():
            try:
                records.append(dict(json.loads(line)))
            except ValueError:
                raise AssertionError(f"a line that is not JSON: {line!r}") from None
    return records


def _said(log: Path, start: str) -> bool:
    return any(str(r["message"]).startswith(start) for r in _records(log))


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


@pytest.mark.parametrize("command", [["worker"], ["serve", "--http"], ["audit", "ship"],
                                     ["schedules", "serve"], ["mcp", "--http"]])
def test_a_bad_setting_at_start_is_one_json_line(command: list[str], tmp_path: Path,
                                                 sample_config: Config) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", *command, "--config", str(sample_config.path)],
        env=_env(tmp_path, REDIS_URL_FILE=str(tmp_path / "no-such-secret")),
        capture_output=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2
    lines = (done.stdout + done.stderr).decode().splitlines()
    (record,) = [json.loads(line) for line in lines if line.strip()]
    assert record["level"] == "error"
    assert "REDIS_URL_FILE: cannot read" in record["message"]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to take a process's file access away")
def test_a_secret_file_it_may_not_read_says_whose_it_is_and_what_to_do(
        tmp_path: Path, sample_config: Config) -> None:
    """Issue 39.8: a secret at mode 0600 owned by another uid (compose mounts the host
    file as it is) — the one line says whose the file is and what to run, and the log
    door leaves it readable (it was "SLACK_BOT_TOKEN_FILE: [REDACTED] read [REDACTED]")."""
    token = _secret(tmp_path, "slack_bot_token", "xoxb-never-read-0123456789")
    os.chown(token, 1234, 1234)
    os.chmod(token, 0o600)
    done = subprocess.run(  # uid 0 without its power to read what is not its own
        ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--",
         sys.executable, "-m", "bot.cli", "worker", "--config", str(sample_config.path)],
        env=_env(tmp_path, SLACK_BOT_TOKEN_FILE=token), capture_output=True, timeout=60,
        cwd=ROOT)
    assert done.returncode == 2
    (record,) = [json.loads(line) for line in (done.stdout + done.stderr).decode().splitlines()
                 if line.strip()]
    message = record["message"]
    assert f"SLACK_BOT_TOKEN_FILE: cannot read {token} (Permission denied): it is owned by " \
           "uid 1234, gid 1234, mode 0600, and deckhand runs as uid 0, gid 0. Make it " \
           "readable by uid 0: for a Docker Compose secret, run `chown 0:0 FILE && chmod " \
           "0400 FILE` on the host file" in message, message
    assert "REDACTED" not in message


def test_serve_http_in_single_process_mode_logs_only_json(
        tmp_path: Path, sample_config: Config, slack_standin: SlackStandin) -> None:
    port, metrics, log = free_port(), free_port(), tmp_path / "serve.log"
    env = _env(tmp_path, DECKHAND_SINGLE_PROCESS="1", PORT=str(port),  # not the image's 3000
               SLACK_BOT_TOKEN_FILE=_secret(tmp_path, "bot", "xoxb-image-test"),
               SLACK_SIGNING_SECRET_FILE=_secret(tmp_path, "signing", "image-test-secret"),
               SLACK_API_URL=f"{slack_standin.url}/api/")
    proc = _start(["serve", "--http", "--host", "127.0.0.1", "--metrics-port", str(metrics),
                   "--config", str(sample_config.path)], env, log)
    try:
        wait_until(lambda: _said(log, "metrics on "), timeout=60, what="serve's banners")
        assert _status(f"http://127.0.0.1:{port}/readyz") == 200  # on its in-process store
        assert image_healthcheck("serve", env) == (0, "")  # issue 39.8: it checked 3000
        assert _status(f"http://127.0.0.2:{metrics}/metrics") == 200
        proc.send_signal(signal.SIGHUP)
        wait_until(lambda: _said(log, "config reloaded from"), what="the reload's line")
    finally:
        assert stop(proc) == 0
    code, said = image_healthcheck("serve", env)
    assert code == 1 and said.startswith("unhealthy: DECKHAND_HEALTH_FILE=")  # gone with it
    assert _said(log, f"deckhand listening on http://127.0.0.1:{port}/slack/events "
                      f"(/healthz, /readyz); store: ")
    assert _said(log, f"metrics on http://0.0.0.0:{metrics}/metrics")


def test_worker_with_an_audit_sink_logs_only_json(
        tmp_path: Path, store: Store, redis_url: str, siem: SiemStandin) -> None:
    config = Path(sink_config(tmp_path, webhook(siem.url)))
    metrics, log = free_port(), tmp_path / "worker.log"
    env = _env(tmp_path, REDIS_URL_FILE=_secret(tmp_path, "redis_url", redis_url))
    proc = _start(["worker", "--config", str(config), "--name", "imaged",
                   "--metrics-port", str(metrics)], env, log)
    try:
        wait_until(lambda: _status(f"http://127.0.0.2:{metrics}/healthz") == 200,
                   timeout=60, what="the worker's health on a non-loopback-only address")
        assert image_healthcheck("worker", env) == (0, "")  # --metrics-port, not 9100
        write_entries(store, 3)
        wait_until(lambda: len(once(siem.received())) >= 3, what="the worker's shipper")
        config.write_text(config.read_text().replace("batch: 10", "batch: 20"))
        proc.send_signal(signal.SIGHUP)
        audited(store, "config_reloaded")
        wait_until(lambda: _said(log, "config reloaded from"), what="the reload's line")
    finally:
        assert stop(proc) == 0
    assert _said(log, f"metrics and health on http://0.0.0.0:{metrics}/metrics")
    assert _said(log, "audit sink: shipping to ")


def test_audit_ship_logs_only_json(tmp_path: Path, store: Store, redis_url: str,
                                   siem: SiemStandin) -> None:
    config = sink_config(tmp_path, webhook(siem.url))
    log = tmp_path / "ship.log"
    write_entries(store, 4)
    proc = _start(["audit", "ship", "--config", config, "--name", "imaged"],
                  _env(tmp_path, REDIS_URL=redis_url), log)
    try:
        wait_until(lambda: len(once(siem.received())) >= 4, what="the shipper")
        proc.send_signal(signal.SIGHUP)  # reloads like every long-running process (39.6)
        audited(store, "config_reloaded")
        wait_until(lambda: _said(log, "config reloaded from"), what="the reload's line")
    finally:
        assert stop(proc) == 0
    assert _said(log, "shipping the audit stream to ")
    assert _said(log, "audit sink: shipping to ")
