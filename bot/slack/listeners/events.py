"""Events: ``@deckhand deploy v2.3.1 to staging`` works like /deploy."""

from __future__ import annotations

import re
from typing import Any

from slack_bolt import App

from bot.slack.bot import Bot
from bot.slack.listeners.common import first_delivery

_MENTION = re.compile(r"<@[A-Z0-9]+>")


def register(app: App, bot: Bot) -> None:
    @app.event("app_mention")
    def mention(event: dict[str, Any], body: dict[str, Any]) -> None:
        text = _MENTION.sub("", event.get("text", "")).strip()
        if not text or not first_delivery(bot, f"evt:{body.get('event_id')}"):
            return
        user, channel = event["user"], event["channel"]
        bot.work.submit("@deckhand", lambda: bot.propose(text, user=user, channel=channel),
                        tell=bot.teller(body))
