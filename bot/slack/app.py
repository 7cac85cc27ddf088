"""``build_app(services, settings)`` → the Bolt App, for Socket Mode or HTTP.

Listeners ack first and then work (Bolt runs them on its thread pool and answers Slack as
soon as ``ack()`` is called). Errors from any listener reach the one ``@app.error``
handler, which logs the traceback and tells the user what failed.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt import App
from slack_sdk import WebClient
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
)

from agents.services import Services
from agents.settings import Settings
from bot.slack.bot import Bot, Directory
from bot.slack.listeners import actions, commands, events, home, views
from bot.slack.listeners import schedules as slack_schedules
from tools.errors import ConfigError, DeckhandError, Problem

log = logging.getLogger("deckhand.slack")


def make_client(settings: Settings) -> WebClient:
    """The Web API client: base URL from SLACK_API_URL, honours 429 Retry-After."""
    token = _required(settings.slack_bot_token, "SLACK_BOT_TOKEN", "the bot token (xoxb-…)")
    return WebClient(token=token, base_url=settings.slack_api_url,
                     retry_handlers=[RateLimitErrorRetryHandler(max_retry_count=5),
                                     ConnectionErrorRetryHandler(max_retry_count=2)])


def build_app(services: Services, settings: Settings, *, client: WebClient | None = None
              ) -> tuple[App, Bot]:
    """The Bolt app with every listener registered, and the Bot the listeners share."""
    client = client or make_client(settings)
    secret = _required(settings.slack_signing_secret, "SLACK_SIGNING_SECRET",
                       "the app's signing secret (Basic Information page)")
    app = App(client=client, signing_secret=secret, process_before_response=False,
              logger=logging.getLogger("deckhand.bolt"))
    bot = Bot(services, client, Directory(client))
    for module in (commands, actions, views, events, home, slack_schedules):
        module.register(app, bot)
    app.error(_error_handler(bot))
    return app, bot


def _error_handler(bot: Bot) -> Any:
    def handle(error: Exception, body: dict[str, Any]) -> None:
        if isinstance(error, DeckhandError):
            log.info("user-facing error: %s", error)
            message = f"⚠️ {error}"
        else:
            log.error("listener failed", exc_info=error)
            message = (f"⚠️ Something went wrong handling that ({type(error).__name__}). "
                       f"It was logged; try again, or ask the deckhand admins.")
        try:
            bot.tell(body, bot.services.redact(message))
        except Exception:  # the error path itself must not raise into Bolt
            log.exception("could not tell the user about an error")
    return handle


def _required(value: Any, name: str, what: str) -> str:
    if value is None or not value.get_secret_value():
        raise ConfigError([Problem("environment", f"set {name} to {what}")])
    return str(value.get_secret_value())
