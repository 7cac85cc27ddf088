"""``build_app(services, settings)`` → the Bolt App, for Socket Mode or HTTP.

Listeners parse, authorize against Redis, hand the rest to the Bot's own work pool and ack
last: nothing raised after an ack can reach Bolt (whose error path would reset the ack and
answer 404 after 3 s), and no Web API call ever runs on Bolt's listener threads. Errors
before the ack reach the one ``@app.error`` handler; errors in handed-off work are told to
the user by the work pool.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from slack_bolt import App, BoltResponse
from slack_bolt.error import BoltError
from slack_bolt.logger.messages import warning_client_prioritized_and_token_skipped
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from agents.services import Services
from agents.settings import Settings
from bot.slack.bot import Bot, Directory
from bot.slack.listeners import actions, commands, events, home, views, workflow
from bot.slack.listeners import schedules as slack_schedules
from bot.slack.listeners.common import register_once
from bot.slack.redacting import RedactingApp, RedactingWebClient
from bot.slack.retries import web_api_retries
from tools.errors import ConfigError, DeckhandError, Problem
from tools.redact import Redactor

log = logging.getLogger("deckhand.slack")


def make_client(settings: Settings, redact: Callable[[str], str] | None = None) -> WebClient:
    """The Web API client: base URL from SLACK_API_URL, deckhand's one retry policy, and
    redacts every payload (``redact``: the config's secrets too; default: the environment's)."""
    token = _required(settings.slack_bot_token, "SLACK_BOT_TOKEN", "the bot token (xoxb-…)")
    return RedactingWebClient(
        token=token, base_url=settings.slack_api_url,
        redact=redact or Redactor.from_env(settings.secret_values()),
        retry_handlers=web_api_retries())


def build_app(services: Services, settings: Settings, *, client: WebClient | None = None
              ) -> tuple[App, Bot]:
    """The Bolt app with every listener registered, and the Bot the listeners share."""
    client = client or make_client(settings, services.redact)
    secret = _required(settings.slack_signing_secret, "SLACK_SIGNING_SECRET",
                       "the app's signing secret (Basic Information page)")
    web = client
    # acks and response_url posts follow the Web API client's redactor, which a config
    # reload widens (SlackRuntime.adopt): one set of secrets for every Slack sink
    redact: Callable[[str], str] = (lambda text: web.redact(text)) \
        if isinstance(web, RedactingWebClient) else services.redact
    app = _connect(lambda: RedactingApp(client=client, signing_secret=secret,
                                        process_before_response=False,
                                        logger=_bolt_logger(), redact=redact),
                   client, token_name="SLACK_BOT_TOKEN")
    bot = Bot(services, client, Directory(client))
    register_once(app, bot)
    for module in (commands, actions, views, events, home, slack_schedules, workflow):
        module.register(app, bot)
    app.error(_error_handler(bot))
    return app, bot


T = TypeVar("T")


def _connect(call: Callable[[], T], client: WebClient, *, token_name: str) -> T:
    """``call`` (which talks to Slack), with one-line errors that say what to fix."""
    try:
        return call()
    except (BoltError, SlackApiError) as exc:
        raise ConfigError([Problem("environment", f"Slack refused {token_name} ({_why(exc)}); "
                                   f"check the token and the app's installation")]) from exc
    except OSError as exc:
        raise ConfigError([Problem("network", f"cannot reach Slack at {client.base_url} "
                                   f"({getattr(exc, 'reason', exc)}); check the network, "
                                   f"proxy or SLACK_API_URL")]) from exc


def _why(exc: Exception) -> str:
    if isinstance(exc, SlackApiError):
        return str(exc.response.get("error", "refused"))
    return str(exc).splitlines()[0][:200]


def _bolt_logger() -> logging.Logger:
    """Bolt's logger, without its start-up warning that SLACK_BOT_TOKEN goes unused: the
    client it is given was built from that very token."""
    logger = logging.getLogger("deckhand.bolt")
    skipped = warning_client_prioritized_and_token_skipped()
    if not any(isinstance(f, _Drop) for f in logger.filters):
        logger.addFilter(_Drop(skipped))
    return logger


class _Drop(logging.Filter):
    def __init__(self, message: str):
        super().__init__()
        self.message = message

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != self.message


def _error_handler(bot: Bot) -> Any:
    """Log a listener's failure and tell its user from deckhand's own work pool.

    Listeners ack last, so an error here came before the ack: Bolt would answer 500 and
    Slack would show the user a generic failure. The response becomes an empty 200 instead
    and the user reads what failed in an ephemeral message."""
    def handle(error: Exception, body: dict[str, Any], response: BoltResponse | None) -> None:
        if isinstance(error, DeckhandError):
            log.info("user-facing error: %s", error)
            message = f"⚠️ {error}"
        else:
            log.error("listener failed", exc_info=error)
            message = (f"⚠️ Something went wrong handling that ({type(error).__name__}). "
                       f"It was logged; try again, or ask the deckhand admins.")
        if response is not None:
            response.status, response.body = 200, ""
        tell = bot.teller(body)
        bot.work.submit("error notice", lambda: tell(message))
    return handle


def _required(value: Any, name: str, what: str) -> str:
    if value is None or not value.get_secret_value():
        raise ConfigError([Problem("environment", f"set {name} to {what}")])
    return str(value.get_secret_value())
