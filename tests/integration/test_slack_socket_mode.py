"""Socket Mode end to end against a loopback WebSocket stand-in, and start-up failures that
say what to fix (issue 14.6)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import SecretStr

from agents.config import Config
from agents.run.record import RunStatus
from agents.services import build_services
from agents.settings import Settings
from agents.store import Store
from bot.slack import blocks as bk
from bot.slack.app import build_app
from bot.slack.runtime import check_app_token
from tests.fixtures.sample import free_port
from tests.fixtures.slack_standin import SlackStandin
from tests.fixtures.slack_world import SlackWorld, button
from tests.fixtures.socket_standin import SocketStandin
from tools.errors import ConfigError


def test_a_refused_app_token_says_which_token_and_why(slack_standin: SlackStandin) -> None:
    slack_standin.fail("apps.connections.open", "invalid_auth")
    with pytest.raises(ConfigError) as refused:
        check_app_token(f"{slack_standin.url}/api/", "xapp-1-bad")
    assert "SLACK_APP_TOKEN" in str(refused.value) and "invalid_auth" in str(refused.value)
    with pytest.raises(ConfigError, match="app-level token"):
        check_app_token(f"{slack_standin.url}/api/", "xoxb-a-bot-token")


def test_an_answer_without_a_url_does_not_loop(slack_standin: SlackStandin) -> None:
    with pytest.raises(ConfigError, match="no URL"):
        check_app_token(f"{slack_standin.url}/api/", "xapp-1-good")


def test_no_network_is_one_line_at_start(sample_config: Config, store: Store) -> None:
    closed = f"http://127.0.0.1:{free_port()}/api/"
    with pytest.raises(ConfigError, match="cannot reach Slack"):
        check_app_token(closed, "xapp-1-good")
    settings = Settings(SLACK_BOT_TOKEN=SecretStr("xoxb-t"), SLACK_SIGNING_SECRET=SecretStr("s"),
                        SLACK_API_URL=closed)
    with pytest.raises(ConfigError, match="cannot reach Slack") as failed:
        build_app(build_services(sample_config, settings, store=store), settings)
    assert "SLACK_API_URL" in str(failed.value)


def test_socket_mode_end_to_end(world: SlackWorld) -> None:
    ws = SocketStandin()
    world.standin.socket_url = ws.url
    handler = world.runtime.connect_socket_mode("xapp-1-test")
    try:
        ws.send({"envelope_id": "env-cmd", "type": "slash_commands",
                 "accepts_response_payload": True,
                 "payload": {"command": "/deploy", "text": "v2.3.1 to staging",
                             "user_id": "UALICE", "channel_id": "CDEPLOY", "team_id": "T1",
                             "api_app_id": "A1", "trigger_id": "sock-1",
                             "response_url": f"{world.standin.url}/response/sock"}})
        ack = ws.ack_for("env-cmd")
        assert "Planning" in json.dumps(ack.get("payload"))
        value = button(world.plan_message(), "approve")
        ws.send({"envelope_id": "env-click", "type": "interactive",
                 "accepts_response_payload": False,
                 "payload": {"type": "block_actions", "user": {"id": "UBOB"},
                             "team": {"id": "T1"}, "api_app_id": "A1", "trigger_id": "t",
                             "channel": {"id": "CDEPLOY"}, "container": {"type": "message"},
                             "actions": [{"type": "button", "action_id": "approve",
                                          "block_id": "b", "value": value,
                                          "action_ts": "1"}]}})
        ws.ack_for("env-click")
        run = world.wait_run(bk.parse_button_value(value)[0])
        assert run.status is RunStatus.SUCCEEDED and [a.user for a in run.approvals] == ["UBOB"]
    finally:
        handler.close()
        ws.close()


def test_serve_with_a_refused_app_token_prints_one_line(
        slack_standin: SlackStandin, tmp_path: Path) -> None:
    """Nothing starts (workers, scheduler) and logs before the token is found bad."""
    import os
    import subprocess
    import sys

    from bot.cli.init import template_text

    (tmp_path / "deckhand.yml").write_text(template_text())
    slack_standin.fail("apps.connections.open", "invalid_auth")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]),
           "SLACK_BOT_TOKEN": "xoxb-t", "SLACK_SIGNING_SECRET": "s",
           "SLACK_APP_TOKEN": "xapp-1-bad", "SLACK_API_URL": f"{slack_standin.url}/api/"}
    env.pop("REDIS_URL", None)
    done = subprocess.run([sys.executable, "-m", "bot.cli", "serve"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, lines
    assert "SLACK_APP_TOKEN" in lines[0] and "invalid_auth" in lines[0]
