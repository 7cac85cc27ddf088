"""No planted secret reaches any sink: a release step that fails printing secrets of every
kind is driven through real processes (the CLI over a real redis-server, an OTLP receiver,
the Slack bot against its stand-in, the LLM planner against the OpenAI stand-in, the MCP
tools, the audit sink's shipper against a SIEM stand-in), and every sink's bytes are searched for every secret — Redis key by key.

The sinks × secrets matrix is ``SINKS`` × ``SECRETS``; each test asserts one row set.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import openai
import pytest
import redis

from agents.config import Config, load_config
from agents.planning.llm import LLMPlanner
from agents.run.record import RunStatus
from agents.services import build_services
from agents.store import Store
from bot.mcp.desk import Desk
from bot.mcp.server import DeskTools
from bot.slack import blocks as bk
from tests.fixtures.openai_standin import API_KEY, OpenAIStandin
from tests.fixtures.otlp import Receiver
from tests.fixtures.polling import wait_until
from tests.fixtures.siem_standin import SiemStandin
from tests.fixtures.slack_standin import SlackStandin
from tests.fixtures.slack_world import button, start_world
from tests.integration.test_llm_planner import step, wire

ROOT = Path(__file__).resolve().parents[2]
CONFIGURED = "cfg-Secret-7f3a9c2e1d"
ENV_SECRET = "env-Secret-4b8d2f6a0c"
PEM_BODY = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUPEMSECRETBODY0123456789"
WEBHOOK = "https://hooks.slack.com/services/T0ABCDEF/B0GHIJKL/XyZwebhookSecret12345"
SECRETS = {  # kind → what is planted; the needle searched for is the value itself
    "configured": CONFIGURED,
    "env": ENV_SECRET,
    "slack token": "xoxb-1111111111-2222222222-AbCdEfGhIjKlMnOpQr",
    "github token": "ghp_" + "Zz9" * 12,
    "aws key id": "AKIAQWERTYUIOPASDFGH",
    "url credentials": "Url-Pa55-9e8d7c6b",
    "webhook": "XyZwebhookSecret12345",
    "private key": PEM_BODY,
}
LINE = (f"failing with {CONFIGURED} token {SECRETS['slack token']} env {ENV_SECRET} "
        f"gh {SECRETS['github token']} aws {SECRETS['aws key id']} "
        f"repo https://deploy:{SECRETS['url credentials']}@git.example.com/app.git hook $1")
SCRIPT = f"""#!/bin/sh
echo '-----BEGIN OPENSSH PRIVATE KEY-----' >&2
echo '{PEM_BODY}' >&2
echo '-----END OPENSSH PRIVATE KEY-----' >&2
echo "{LINE}" >&2
exit 3
"""
CONFIG = f"""
inventory:
  hosts:
    web-1: {{connection: local}}
  environments:
    staging: {{hosts: [web-1]}}
tools:
  release:
    description: release a version (fails, printing what it must not)
    command: "sh {{vars.script}} {{hook}}"
    target: environment
    mutates: true
    rollback: undo
    params:
      version: {{type: string, pattern: '^v\\d+\\.\\d+\\.\\d+$'}}
      hook: {{type: string, default: "{WEBHOOK}"}}
  undo:
    description: put the release back
    command: "echo undone >> {{vars.log}}"
    target: environment
    mutates: true
vars:
  script: "{{config_dir}}/release.sh"
  log: "{{config_dir}}/log.txt"
secrets: ["{CONFIGURED}"]
playbooks:
  - name: ship
    description: release a version to staging
    match: ['^(?:deploy )?ship (?P<version>v\\S+)$']
    examples: ["ship v1.0.0"]
    goal: "Ship {{version}}"
    steps:
      - {{id: release, tool: release, params: {{environment: staging, version: "{{version}}"}}}}
    rollback:
      - {{id: back, tool: undo, params: {{environment: staging}}}}
"""


def leaks(sink: str, data: bytes | str) -> list[str]:
    """The kinds of secret found in ``data`` (as text, JSON-escaped or not)."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return [f"{kind} in {sink}" for kind, value in SECRETS.items() if value in text]


def redis_bytes(client: redis.Redis) -> dict[str, bytes]:
    """Every key's value as Redis holds it (typed reads, and DUMP), plus the key names."""
    found: dict[str, bytes] = {}
    for key in client.scan_iter("*"):
        found[key.decode()] = repr(_value(client, key)).encode() + key + (client.dump(key) or b"")
    return found


def _value(client: redis.Redis, key: bytes) -> Any:
    kind = client.type(key).decode()
    if kind == "string":
        return client.get(key)
    if kind == "hash":
        return client.hgetall(key)
    if kind == "list":
        return client.lrange(key, 0, -1)
    if kind == "set":
        return client.smembers(key)
    if kind == "zset":
        return client.zrange(key, 0, -1, withscores=True)
    return client.xrange(key)


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Config:
    monkeypatch.setenv("DEPLOY_TOKEN", ENV_SECRET)  # an env secret, known by its name
    (tmp_path / "release.sh").write_text(SCRIPT)
    path = tmp_path / "deckhand.yml"
    path.write_text(textwrap.dedent(CONFIG))
    return load_config(path)


@pytest.fixture
def cli_env(redis_url: str, otlp: Receiver) -> Iterator[dict[str, str]]:
    yield {**os.environ, "REDIS_URL": redis_url, "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint,
           "PYTHONPATH": str(ROOT), "DEPLOY_TOKEN": ENV_SECRET, "COLUMNS": "200"}


def deckhand(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bot.cli", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


def test_a_failing_release_leaks_into_no_store_terminal_span_log_or_audit_sink(
        config: Config, store: Store, cli_env: dict[str, str], otlp: Receiver,
        siem: SiemStandin, tmp_path: Path) -> None:
    cfg = ["--config", str(config.path)]
    ran = deckhand({**cli_env, "COLUMNS": "60"},  # narrow: a table cell wraps a secret
                   "run", "ship v1.0.0", "--yes", "--user", "alice", *cfg)
    (run,) = store.runs.recent()
    assert run.status is RunStatus.ROLLED_BACK, ran.stdout + ran.stderr
    assert "[REDACTED]" in (run.steps["release"].error or "")  # the failure reason, masked
    assert (tmp_path / "log.txt").read_text() == "undone\n"  # the rollback really ran
    worker = deckhand({**cli_env, "DECKHAND_LOG_FORMAT": "json"}, "worker", "--once", *cfg)
    shown = deckhand(cli_env, "runs", "show", run.id, *cfg)
    audit = deckhand(cli_env, "audit", "--run", run.id, *cfg)
    export = deckhand(cli_env, "audit", "export", *cfg)
    verified = deckhand(cli_env, "audit", "verify", *cfg)
    assert verified.returncode == 0, verified.stdout
    shipping = tmp_path / "shipping.yml"  # the same config, with the SIEM as audit sink
    shipping.write_text(config.path.read_text() + f'audit: {{sink: {{webhook: {{url: "{siem.url}"}}}}}}\n')
    shipped = deckhand(cli_env, "audit", "ship", "--once", "--config", str(shipping))
    assert shipped.returncode == 0, shipped.stdout + shipped.stderr
    assert any(line["action"] == "step_finished" for line in siem.received())
    assert run.id[:8] in shown.stdout and "step_finished" in audit.stdout

    found = [*leaks("terminal: run (live table, summary)", ran.stdout + ran.stderr),
             *leaks("terminal: runs show", shown.stdout), *leaks("terminal: audit", audit.stdout),
             *leaks("audit export", export.stdout), *leaks("logs", worker.stderr),
             *leaks("audit sink (SIEM bytes)", b"".join(p.body for p in siem.posts))]
    wait_for_spans(otlp)
    found += leaks("spans (OTLP bytes)", b"".join(otlp.bodies))
    stored = redis_bytes(redis.Redis.from_url(cli_env["REDIS_URL"]))
    assert any(k.endswith(":audit") for k in stored) and any(":run:" in k for k in stored)
    for key, data in stored.items():
        found += leaks(f"redis {key}", data)
    assert found == []


def wait_for_spans(otlp: Receiver) -> None:
    wait_until(lambda: otlp.named("deckhand.run") and otlp.named("deckhand.request")
               and otlp.named("deckhand.host"), what="the request's, run's and hosts' spans")


def test_log_records_are_redacted_for_every_handler(caplog: pytest.LogCaptureFixture,
                                                    config: Config, store: Store) -> None:
    build_services(config, store=store)  # activates the config's secrets for the log door
    caplog.set_level(logging.DEBUG)
    log = logging.getLogger("deckhand.test")
    log.warning("step failed: %s\n%s", LINE.replace("$1", WEBHOOK),
                f"-----BEGIN OPENSSH PRIVATE KEY-----\n{PEM_BODY}\n-----END OPENSSH PRIVATE KEY-----")
    try:
        raise RuntimeError(f"boom {CONFIGURED} {SECRETS['github token']}")
    except RuntimeError:
        log.exception("crashed with %s", ENV_SECRET)
    text = caplog.text + "".join(r.exc_text or "" for r in caplog.records)
    assert "boom" in text and "step failed" in text
    assert leaks("logs", text) == []


def test_the_model_never_sees_a_secret_or_a_webhook_default(
        config: Config, store: Store, openai_standin: OpenAIStandin) -> None:
    services = build_services(config, store=store)
    client = openai.OpenAI(api_key=API_KEY, base_url=openai_standin.base_url, max_retries=0)
    planner = LLMPlanner(config, client=client, model="standin-model", redact=services.redact)
    openai_standin.reply_json(wire(
        [step("release", "release", {"environment": "staging", "version": "v1.0.0"})],
        [step("back", "undo", {"environment": "staging"})], goal="Ship v1.0.0"))
    planner.plan(f"ship v1.0.0, {LINE.replace('$1', WEBHOOK)} key -----BEGIN RSA PRIVATE "
                 f"KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----", requested_by="alice")
    sent = json.dumps([r.body for r in openai_standin.requests])
    assert openai_standin.requests and "release" in sent
    assert leaks("model prompt", sent) == []


def test_mcp_answers_hold_no_secret(config: Config, store: Store,
                                    cli_env: dict[str, str]) -> None:
    deckhand(cli_env, "run", "ship v1.0.0", "--yes", "--user", "alice",
             "--config", str(config.path))
    (run,) = store.runs.recent()
    tools = DeskTools(Desk(build_services(config, store=store)))
    answers = [anyio.run(tools.run_status, run.id), anyio.run(tools.catalog)]
    text = json.dumps([a.model_dump(mode="json") for a in answers])
    assert "release" in text and run.id in text
    assert leaks("mcp answers", text) == []


def test_slack_thread_of_a_failing_release_holds_no_secret(
        config: Config, store: Store, slack_standin: SlackStandin, monkeypatch: pytest.MonkeyPatch,
        redis_url: str) -> None:
    world = start_world(config, store, slack_standin)
    try:
        world.deploy("ship v1.0.0", user="UALICE")
        value = button(world.plan_message(), "approve")
        run_id, _, _ = bk.parse_button_value(value)
        world.click("approve", value, user="UBOB")
        assert world.wait_run(run_id).status is RunStatus.ROLLED_BACK
        slack_standin.wait_for(lambda: any("REDACTED" in json.dumps(c.payload)
                                           for c in slack_standin.calls),
                               what="the failure posted in the thread")
    finally:
        world.runtime.stop()
    sent = json.dumps([c.payload for c in slack_standin.calls] + slack_standin.responses)
    found = leaks("slack", sent)
    for key, data in redis_bytes(redis.Redis.from_url(redis_url)).items():
        found += leaks(f"redis {key}", data)
    assert found == []
