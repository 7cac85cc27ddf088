"""Slash commands: /deploy REQUEST and /deckhand runs|status|cancel|help."""

from __future__ import annotations

import shlex
from typing import Any

from slack_bolt import Ack, App, Respond

from bot.slack import blocks as bk
from bot.slack.bot import Bot
from bot.slack.listeners.common import first_delivery
from bot.slack.listeners.schedules import schedule_reply
from bot.slack.work import BUSY

DEPLOY_USAGE = ("Usage: `/deploy v2.3.1` — or any request the planner knows, e.g. "
                "`/deploy v2.3.1 to staging`. `/deckhand help` lists everything.")


def register(app: App, bot: Bot) -> None:
    @app.command("/deploy")
    def deploy(ack: Ack, command: dict[str, Any], respond: Respond) -> None:
        text = command.get("text", "").strip()
        if not text:
            ack(DEPLOY_USAGE)
            return
        # One Redis SET NX before the ack (fast): a retried delivery is answered, not replanned
        if not first_delivery(bot, f"cmd:{command.get('trigger_id')}"):
            ack()
            return
        user, channel = command["user_id"], command["channel_id"]
        request = text if text.lower().startswith("deploy ") else f"deploy {text}"
        queued = bot.work.submit("/deploy", lambda: bot.propose(request, user=user,
                                                                channel=channel),
                                 tell=bot.teller(command, respond), tell_busy=False)
        ack(f"Planning `{bk.escape(bk.trim(text, 200))}`…" if queued else BUSY)

    @app.command("/deckhand")
    def deckhand(ack: Ack, command: dict[str, Any], respond: Respond) -> None:
        text, user, channel = command.get("text", ""), command["user_id"], command["channel_id"]

        def reply() -> None:
            respond(text=bk.trim(answer(bot, text, user=user, channel=channel), 3900),
                    response_type="ephemeral")
        queued = bot.work.submit("/deckhand", reply, tell=bot.teller(command, respond),
                                 tell_busy=False)
        if queued:
            ack()
        else:
            ack(BUSY)


def answer(bot: Bot, text: str, *, user: str, channel: str) -> str:
    """The reply to ``/deckhand TEXT`` (ephemeral)."""
    words = _split(text)
    verb, args = (words[0].lower(), words[1:]) if words else ("help", [])
    if verb == "runs":
        return _runs_text(bot)
    if verb == "status" and args:
        run = bot.store.run(args[0])
        return (f"{bk.RUN_EMOJI.get(run.status, '')} `{run.id}` {run.status.value} — "
                f"{bk.escape(run.goal)}" + (f"\nwhy: {bk.escape(run.reason)}" if run.reason
                                            else ""))
    if verb == "cancel" and args:
        return _cancel_text(bot, args[0], user=user)
    if verb == "schedule":
        rest = text.strip()[len(words[0]):].strip()  # raw: the schedule parser quotes itself
        return schedule_reply(bot, rest, user=user, channel=channel)
    return help_text(bot, user)


def _runs_text(bot: Bot) -> str:
    runs = bot.store.runs(limit=10)
    if not runs:
        return "No runs yet. Start one with `/deploy v2.3.1`."
    return "\n".join(f"{bk.RUN_EMOJI.get(r.status, '')} `{r.id}` {r.status.value} — "
                     f"{bk.escape(r.goal)} "
                     f"({bk.mention(r.requested_by)})" for r in runs)


def _cancel_text(bot: Bot, run_id: str, *, user: str) -> str:
    bot.check_may_steer(bot.store.run(run_id), user)  # a refusal is told by the work queue
    after = bot.cancel(run_id, user=user)
    return f"`{run_id}` is {after.status.value}."


def help_text(bot: Bot, user: str) -> str:
    """What this user may do (approvals only for the environments they may approve)."""
    policy = bot.services.config.policy
    groups = bot.directory.groups_of(user)
    envs = sorted(bot.services.config.inventory.environments)
    approvable = [e for e in envs if policy.may_approve(user, groups, [e])]
    lines = ["*deckhand* — deploys you can read before they run.",
             "• `/deploy REQUEST` — plan a deploy and post it for approval",
             "• `/deckhand runs` — recent runs · `/deckhand status RUN` — one run",
             "• `/deckhand cancel RUN` — cancel a run you requested"
             + (" or may approve" if approvable else ""),
             "• `/deckhand schedule add|list|pause|resume|remove|run` — recurring plans"]
    if approvable:
        lines.append(f"• You can approve plans for: {', '.join(approvable)}")
    else:
        lines.append("• You cannot approve plans in any environment.")
    examples = [p.examples[0] for p in bot.services.config.playbooks if p.examples]
    if examples:
        lines.append("Requests I know: " + ", ".join(f"`{e}`" for e in examples))
    return "\n".join(lines)


def _split(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()
