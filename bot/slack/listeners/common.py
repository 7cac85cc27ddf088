"""Helpers shared by the listener modules."""

from __future__ import annotations

from bot.slack.bot import Bot


def first_delivery(bot: Bot, key: str, *, ttl: float = 3600) -> bool:
    """True the first time Slack delivers ``key`` (a retry or double click returns False)."""
    return bot.store.dedupe.first_time(key, ttl=ttl)
