"""Slash commands: /deploy REQUEST and /deckhand runs|status|where|cancel|lock|unlock|help."""

from __future__ import annotations

from typing import Any

from slack_bolt import Ack, App, Respond

from agents.config import Config
from agents.engine.manual_locking import LOCK_VERBS, NOOP_VERBS, WCID
from agents.ids import short_id
from bot.slack import blocks as bk
from bot.slack.bot import Bot
from bot.slack.listeners.common import deploy_request, first_delivery, split_words
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
        doing = _submit_deploy(bot, command, respond, text)
        ack(f"{doing} `{bk.escape(bk.trim(text, 200))}`…" if doing else BUSY)

    @app.command("/deckhand")
    def deckhand(ack: Ack, command: dict[str, Any], respond: Respond) -> None:
        text, user, channel = command.get("text", ""), command["user_id"], command["channel_id"]

        def reply() -> None:
            answered = answer(bot, text, user=user, channel=channel)
            if isinstance(answered, ForEveryone):  # a lock is news for the whole channel
                respond(text=bk.trim(answered, 3900), response_type="in_channel")
            elif isinstance(answered, list):
                respond(blocks=answered, text="deckhand", response_type="ephemeral")
            else:
                respond(text=bk.trim(answered, 3900), response_type="ephemeral")
        queued = bot.work.submit("/deckhand", reply, tell=bot.teller(command, respond),
                                 tell_busy=False)
        if queued:
            ack()
        else:
            ack(BUSY)


def answer(bot: Bot, text: str, *, user: str, channel: str) -> str | list[bk.Block]:
    """The reply to ``/deckhand TEXT`` (ephemeral)."""
    words = split_words(text)
    verb, args = (words[0].lower(), words[1:]) if words else ("help", [])
    if WCID.fullmatch(" ".join(text.split())):
        return bot.where_can_i_deploy(user, channel)
    if verb in LOCK_VERBS:
        return ForEveryone(bot.lock_by_hand(words, user=user, channel=channel))
    if verb in NOOP_VERBS and args:  # a dry run: the plan and its checks follow in channel
        request = deploy_request(text.strip()[len(words[0]):].strip())
        run = bot.dry_run(request, user=user, channel=channel)
        if run is None:
            return "Which service? Choose it above; nothing was planned yet."
        return f"Dry run `{short_id(run.id)}`: {run.status.value} (nothing was changed)."
    if verb == "runs":
        return _runs_text(bot)
    if verb == "status" and args:
        run = bot.store.runs.find(args[0])
        return (f"{bk.RUN_EMOJI.get(run.status, '')} `{short_id(run.id)}` {run.status.value} — "
                f"{bk.escape(run.goal)}" + (f"\nwhy: {bk.escape(run.reason)}" if run.reason
                                            else ""))
    if verb == "where":
        config, args = _service_arg(bot, args, channel)
        env, svc, history = (args[0] if args else None), config.key, bot.store.history
        states = [history.current(svc, env)] if env else history.everywhere(svc)
        held = bot.store.manual_locks.all(service=svc)
        return bk.where_text(states, [lock for e, lock in held.items() if env in (None, e)])
    if verb == "history" and args:
        config, args = _service_arg(bot, args, channel)
        if not args:
            return "Usage: `/deckhand history [SERVICE] ENV`"
        svc, history = config.key, bot.store.history
        live = history.current(svc, args[0]).version
        return bk.history_blocks(args[0], history.recent(svc, args[0], limit=10), live,
                                 service=svc)
    if verb == "cancel" and args:
        return _cancel_text(bot, args[0], user=user)
    if verb == "schedule":
        rest = text.strip()[len(words[0]):].strip()  # raw: the schedule parser quotes itself
        return schedule_reply(bot, rest, user=user, channel=channel)
    return help_text(bot, user)


def _service_arg(bot: Bot, args: list[str], channel: str) -> tuple[Config, list[str]]:
    """The service a read names first (``where api production``), else the channel's
    default, else the only one (WhichService lists them); and the words after it."""
    org = bot.services.org
    named = bot.services.names.lookup(args[0]) if args else None
    if named is not None:
        return org.services[named], args[1:]
    default = org.channels.get(channel)
    return (org.services[default] if default else bot.services.config), args


class ForEveryone(str):
    """A reply the whole channel should see (a lock taken or lifted), not only the asker."""


def _runs_text(bot: Bot) -> str:
    runs = bot.store.runs.recent(limit=10)
    if not runs:
        return "No runs yet. Start one with `/deploy v2.3.1`."
    return "\n".join(f"{bk.RUN_EMOJI.get(r.status, '')} `{short_id(r.id)}` {r.status.value} — "
                     f"{bk.escape(r.goal)} "
                     f"({bk.mention(r.requested_by, r.requested_via)})" for r in runs)


def _cancel_text(bot: Bot, typed: str, *, user: str) -> str:
    run = bot.store.runs.find(typed)  # a unique prefix is enough
    after = bot.cancel(run.id, user=user)  # a refusal is told by the work queue
    return f"`{short_id(run.id)}` is {after.status.value}."


def help_text(bot: Bot, user: str) -> str:
    """What this user may do (approvals only for the environments they may approve, each
    by its own service's rules: ``api/production`` when there are several services)."""
    groups = bot.directory.groups_of(user)
    org = bot.services.org
    several = len(org.services) > 1
    approvable = [f"{name}/{env}" if several else env
                  for name, config in org.services.items()
                  for env in sorted(config.inventory.environments)
                  if config.policy.may_approve(user, groups, [env])]
    lines = ["*deckhand* — deploys you can read before they run.",
             "• `/deploy REQUEST` — plan a deploy and post it for approval",
             "• `/deckhand runs` — recent runs · `/deckhand status RUN` — one run",
             "• `/deckhand where [SERVICE] [ENV]` — which version runs where · "
             "`/deckhand history [SERVICE] ENV` — the last deploys",
             "• `/deckhand cancel RUN` — cancel a run you requested"
             + (" or may approve" if approvable else ""),
             "• `/deckhand lock ENV --reason \"…\" [--for 2h]` · `/deckhand unlock ENV` — hold "
             "an environment (approvers of it; `.lock` in a mention too) · `/deckhand wcid` — "
             "where can I deploy · `/deckhand .noop REQUEST` — a dry run",
             "• `/deckhand schedule add|list|pause|resume|remove|run` — recurring plans"]
    if approvable:
        lines.append(f"• You can approve plans for: {', '.join(approvable)}")
    else:
        lines.append("• You cannot approve plans in any environment.")
    if several:
        lines.append(f"• Services: {', '.join(org.services)} — name one in a request "
                     f"(`/deploy api v2.3.1`), or I ask which")
    examples = [p.examples[0] for config in org.services.values()
                for p in config.playbooks if p.examples][:10]
    if examples:
        lines.append("Requests I know: " + ", ".join(f"`{e}`" for e in examples))
    return "\n".join(lines)


def _submit_deploy(bot: Bot, command: dict[str, Any], respond: Respond, text: str) -> str:
    """Hand ``/deploy TEXT`` (``--dry-run``, ``--break-glass WHY``) to the work pool; what
    the ack should say it is doing, or "" when the pool is full."""
    user, channel = command["user_id"], command["channel_id"]
    request, glass = _break_glass_flag(text)
    request, dry = _dry_run_flag(request)
    request = deploy_request(request)

    def work() -> None:
        if dry:
            bot.dry_run(request, user=user, channel=channel)
        else:
            bot.propose(request, user=user, channel=channel, break_glass=glass)
    queued = bot.work.submit("/deploy", work, tell=bot.teller(command, respond),
                             tell_busy=False)
    return ("Dry-running" if dry else "Planning") if queued else ""


def _break_glass_flag(text: str) -> tuple[str, str | None]:
    """``v2.3.1 --break-glass db is down`` → (``v2.3.1``, ``db is down``)."""
    request, flag, reason = text.partition("--break-glass")
    return (request.strip(), reason.strip() or "no reason given") if flag else (text, None)


def _dry_run_flag(text: str) -> tuple[str, bool]:
    """``v2.3.1 --dry-run`` → (``v2.3.1``, True)."""
    words = text.split()
    dry = "--dry-run" in words
    return " ".join(w for w in words if w != "--dry-run"), dry
