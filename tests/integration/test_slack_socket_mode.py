"""Socket Mode and start-up fail with one line that says what to fix (issue 14.6)."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from agents.config import Config
from agents.services import build_services
from agents.settings import Settings
from agents.store import Store
from bot.slack.app import build_app
from bot.slack.runtime import check_app_token
from tests.fixtures.sample import free_port
from tests.fixtures.slack_standin import SlackStandin
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
