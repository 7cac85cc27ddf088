"""Nothing secret reaches Slack: every Web API payload, acknowledgement and response_url
post passes the one redactor."""

from __future__ import annotations

import urllib.parse

from pydantic import SecretStr

from agents.config import Config
from agents.settings import Settings
from agents.store import Store
from bot.slack import blocks as bk
from bot.slack.app import make_client
from bot.slack.redacting import RedactingWebClient
from tests.fixtures.slack_standin import SlackStandin
from tests.fixtures.slack_world import SlackWorld, start_world
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


def test_acks_and_response_url_replies_pass_the_redactor_too(
        sample_config: Config, store: Store, slack_standin: SlackStandin) -> None:
    """Issue 29.5: the answer to Slack's request (``ack``: "Planning `…`") and the posts to
    its response_url (``respond``) are Slack sinks beside the Web API. Each request echoes
    what was typed: a configured secret holding & and < (so escaped for mrkdwn before the
    door sees it), a token and a signed URL whose signature follows an escaped &."""
    configured, token, signature = "p&ss<w0rd>-configured", "ghp_" + "Q7" * 15, "Sig0123456789abcdef"
    sample_config.secrets = [configured]
    world = start_world(sample_config, store, slack_standin)
    typed = f"{configured} {token} https://x.example/a?b=1&sig={signature}"
    try:
        status, acked, _ = world.deploy(f"v2.3.1 to staging {typed}")
        world.signer.command("/deckhand", f'schedule add "every day at 09:00" "deploy {typed}"',
                             user="UALICE", response_url=f"{slack_standin.url}/response/9")
        slack_standin.wait_for(lambda: len(slack_standin.responses) >= 2 or None,
                               what="the plan refusal and the schedule reply")
    finally:
        world.runtime.stop()
    assert status == 200 and "Planning" in acked and MASK in acked
    replies = [urllib.parse.unquote_plus(b.decode()) for b in slack_standin.bodies]
    assert any("cannot schedule" in r for r in replies)
    for sent in [acked, *replies]:
        for secret in (configured, bk.escape(configured), token, signature):
            assert secret not in sent, (secret, sent)
