"""The App Home tab: published when a user opens it, refreshed when their runs change."""

from __future__ import annotations

from typing import Any

from slack_bolt import App

from bot.slack.bot import Bot
from bot.slack.home import HomeTab


def register(app: App, bot: Bot) -> None:
    home = bot.home = HomeTab(bot)
    bot.watchers.append(home.changed)

    @app.event("app_home_opened")
    def home_opened(event: dict[str, Any]) -> None:
        if event.get("tab", "home") == "home":  # the Messages tab fires this event too
            user = event["user"]
            bot.work.submit("App Home", lambda: home.opened(user))
