"""Nothing secret reaches Slack: every Web API payload passes the one redactor."""

from __future__ import annotations

from pydantic import SecretStr

from agents.settings import Settings
from bot.slack import blocks as bk
from bot.slack.app import make_client
from bot.slack.redacting import RedactingWebClient
from tests.fixtures.slack_standin import SlackStandin
from tests.fixtures.slack_world import SlackWorld
from tools.redact import MASK, Redactor

SECRET = "hunter2-configured-value"


def test_a_configured_secret_is_masked_in_text_blocks_and_views(
        slack_standin: SlackStandin) -> None:
    settings = Settings(SLACK_BOT_TOKEN=SecretStr("xoxb-test-token"),
                        SLACK_API_URL=f"{slack_standin.url}/api/")
    client = make_client(settings, Redactor([SECRET]))
    posted = client.chat_postMessage(channel="C1", text=f"note={SECRET}",
                                     blocks=[bk.section(f"params: note={SECRET}")])
    client.chat_update(channel="C1", ts=posted["ts"], text="x",
                       blocks=[bk.context(f"`{SECRET}` and a token ghp_{'a' * 30}")])
    client.views_publish(user_id="U1", view={"type": "home",
                                             "blocks": [bk.section(f"last: {SECRET}")]})

    calls = [*slack_standin.of("chat.postMessage"), *slack_standin.of("chat.update"),
             *slack_standin.of("views.publish")]
    assert len(calls) == 3
    for call in calls:
        sent = call.text_of_blocks()
        assert SECRET not in sent and "ghp_" not in sent and MASK in sent, sent
    assert posted["ok"] and posted["ts"]  # ids and timestamps pass untouched


def test_the_running_bot_posts_through_the_redactor_with_the_configs_secrets(
        world: SlackWorld) -> None:
    client = world.runtime.bot.client
    assert isinstance(client, RedactingWebClient)
    assert client.redact is world.runtime.services.redact  # config secrets + environment
