"""Helpers shared by the listener modules."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

from slack_bolt import App, BoltResponse

from bot.slack.bot import Bot


def first_delivery(bot: Bot, key: str, *, ttl: float = 3600) -> bool:
    """True the first time Slack delivers ``key`` (a retry or double click returns False)."""
    return bot.store.dedupe.first_time(key, ttl=ttl)


def register_once(app: App, bot: Bot) -> None:
    """Slack's retry of a button click (same trigger and action time) is acknowledged and
    dropped here, before any listener: one click, one reply, whatever the listener."""

    @app.middleware
    def drop_retried_clicks(body: dict[str, Any], next: Callable[[], None]
                            ) -> BoltResponse | None:  # noqa: A002 - Bolt's argument name
        if body.get("type") == "block_actions" and body.get("trigger_id"):
            stamps = ",".join(str(a.get("action_ts")) for a in body.get("actions") or [])
            if not first_delivery(bot, f"act:{body['trigger_id']}:{stamps}"):
                return BoltResponse(status=200, body="")  # the ack Slack waits for
        next()
        return None


CURLY = str.maketrans({"“": '"', "”": '"', "‘": "'", "’": "'"})
"""Slack's clients may turn typed quotes into typographic ones."""


def split_words(text: str) -> list[str]:
    """``lock production --reason "db migration"`` → its words, quotes honoured (curly ones
    too); unbalanced quotes split on spaces rather than fail."""
    plain = text.translate(CURLY)
    try:
        return shlex.split(plain)
    except ValueError:
        return plain.split()


def deploy_request(text: str) -> str:
    """``v2.3.1 to staging`` → ``deploy v2.3.1 to staging`` (a request already saying
    ``deploy`` stays as typed)."""
    return text if text.lower().startswith("deploy ") else f"deploy {text}"
