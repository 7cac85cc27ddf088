"""Schedules in Slack: ``/deckhand schedule ...`` and posting each occurrence to its channel."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from slack_bolt import Ack, App

from agents.engine.occurrences import Occurrence, Outcome
from agents.run.record import RunStatus
from bot.schedule_commands import ScheduleReply, handle_schedule_command
from bot.slack import blocks as bk
from bot.slack.bot import Bot

log = logging.getLogger("deckhand.slack.schedules")


def schedule_reply(bot: Bot, text: str, *, user: str, channel: str) -> str:
    """Run ``/deckhand schedule TEXT`` (in the channel's default service, if it has one)
    and return the ephemeral answer."""
    reply = handle_schedule_command(text, user=user, user_groups=bot.directory.groups_of(user),
                                    channel=channel, services=bot.in_channel(channel),
                                    now=datetime.now(UTC))
    _follow_up(bot, reply, user=user, channel=channel)
    described = [v.describe() for v in reply.schedules if v.describe() not in reply.text]
    return "\n".join(bk.escape(line) for line in (reply.text, *described) if line)


def _follow_up(bot: Bot, reply: ScheduleReply, *, user: str, channel: str) -> None:
    if reply.changed and bot.scheduler is not None:
        bot.scheduler.reload()
    if reply.occurrence is not None:
        post_occurrence(bot, reply.occurrence)
    if reply.confirm and reply.plan is not None:
        # --auto: the plan shown here is what gets frozen; the button sends the exact words
        blocks = bk.schedule_confirm_blocks(reply.text, reply.confirm)
        bot.client.chat_postEphemeral(channel=channel, user=user, blocks=blocks,
                                      text="Approve this plan for an unattended schedule?")


def post_occurrence(bot: Bot, occurrence: Occurrence) -> None:
    """Post what a schedule occurrence did to the schedule's channel (plan, buttons, notes)."""
    channel = occurrence.channel
    if channel is None:
        log.info("%s", occurrence.message)
        return
    if occurrence.run is None or occurrence.plan is None:
        bot.client.chat_postMessage(channel=channel, text=f"⏰ {occurrence.message}")
        return
    waiting = occurrence.outcome is Outcome.AWAITING_APPROVAL or (
        occurrence.outcome is Outcome.ALREADY_STORED  # its first claimer stopped before posting
        and occurrence.run.status is RunStatus.AWAITING_APPROVAL)
    diff = occurrence.diff if waiting else None  # shown against the plan approved at creation
    bot.post_plan(occurrence.plan, occurrence.run, channel=channel, actions=waiting,
                  note=f"⏰ {occurrence.message}", diff=diff)


def register(app: App, bot: Bot) -> None:
    @app.action(bk.ActionId.SCHEDULE_CONFIRM)
    def confirm(ack: Ack, body: dict[str, Any], action: dict[str, Any]) -> None:
        words = json.loads(action["value"])
        user, channel = body["user"]["id"], body["channel"]["id"]
        bot.work.submit("schedule confirm", lambda: bot.ephemeral(
            channel=channel, user=user,
            text=schedule_reply(bot, _requote(words), user=user, channel=channel)),
            tell=bot.teller(body))
        ack()


def _requote(words: list[str]) -> str:
    import shlex

    return " ".join(shlex.quote(w) for w in words)
