"""Events: ``@deckhand deploy v2.3.1 to staging`` works like /deploy.

``@deckhand lock production --reason "db migration"`` (``.lock``, ``unlock``) holds an
environment by hand, said in the channel for everyone; ``@deckhand .wcid`` (where can I
deploy) tells the asker each environment's lock and freeze and whether they may approve there.

``@deckhand cancel`` (stop it, pause the deploy, resume…) acts on a run instead of planning
one, under the same rules as the run's buttons: in a run's thread, on that run; elsewhere, on
the one run of the person asking that has not ended, or it names theirs and asks which.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from slack_bolt import App

from agents.engine.manual_locking import LOCK_VERBS, NOOP_VERBS, WCID
from agents.ids import short_id
from agents.requests.phrasing import normalize
from agents.run.record import Run, RunStatus
from bot.slack.bot import Bot
from bot.slack.listeners.common import deploy_request, first_delivery, split_words
from tools.errors import DeckhandError

_MENTION = re.compile(r"<@[A-Z0-9]+>")
_CONTROL = re.compile(
    r"^(?P<verb>cancel|stop|abort|halt|pause|hold|resume|continue|unpause)"
    r"(?: (?:it|this|that|the (?:deploy(?:ment)?|run|release|rollout)|deploy(?:ment)?|run))?$",
    re.IGNORECASE)
_VERBS = {"cancel": "cancel", "stop": "cancel", "abort": "cancel", "halt": "cancel",
          "pause": "pause", "hold": "pause", "resume": "resume", "continue": "resume",
          "unpause": "resume"}


def register(app: App, bot: Bot) -> None:
    @app.event("app_mention")
    def mention(event: dict[str, Any], body: dict[str, Any]) -> None:
        text = _MENTION.sub("", event.get("text", "")).strip()
        if not text or not first_delivery(bot, f"evt:{body.get('event_id')}"):
            return
        user, channel = event["user"], event["channel"]
        said = _branch_deploy_word(bot, text, user=user, channel=channel)
        if said is not None:
            bot.work.submit(said[0], said[1], tell=bot.teller(body))
            return
        control = _CONTROL.fullmatch(normalize(text))
        if control:
            verb = _VERBS[control.group("verb").lower()]
            bot.work.submit(f"@deckhand {verb}", lambda: _control(bot, event, verb),
                            tell=bot.teller(body))
            return
        bot.work.submit("@deckhand", lambda: bot.propose(text, user=user, channel=channel),
                        tell=bot.teller(body))


def _branch_deploy_word(bot: Bot, text: str, *, user: str, channel: str
                       ) -> tuple[str, Callable[[], Any]] | None:
    """The job for ``.wcid`` (told to the asker alone), ``.noop REQUEST`` (a dry run) or
    ``.lock``/``.unlock`` (said in the channel), named for the work pool; None for others."""
    words = text.split(maxsplit=1)
    if WCID.fullmatch(" ".join(text.split())):
        return "@deckhand wcid", lambda: bot.ephemeral(
            channel=channel, user=user, text=bot.where_can_i_deploy(user, channel))
    if words[0].lower() in NOOP_VERBS and len(words) > 1:
        request = deploy_request(words[1])
        return "@deckhand noop", lambda: bot.dry_run(request, user=user, channel=channel)
    if words[0].lower() in LOCK_VERBS:
        return "@deckhand lock", lambda: bot.announce(
            channel, bot.lock_by_hand(split_words(text), user=user, channel=channel))
    return None


def _control(bot: Bot, event: dict[str, Any], verb: str) -> None:
    """Cancel, pause or resume the run this mention means (DeckhandError says why not)."""
    run, user = _meant(bot, event, verb), event["user"]
    acts: dict[str, Callable[[], Run]] = {
        "cancel": lambda: bot.cancel(run.id, user=user, via="mention"),
        "pause": lambda: bot.pause(run.id, user=user),
        "resume": lambda: bot.resume(run.id, user=user)}
    acts[verb]()


def _meant(bot: Bot, event: dict[str, Any], verb: str) -> Run:
    thread = event.get("thread_ts")
    open_runs = bot.store.runs.recent(limit=500, statuses=[
        s for s in RunStatus if not s.terminal])
    if thread:
        mine = [r for r in open_runs if _thread_of(r) == (event["channel"], thread)]
        if not mine:
            raise DeckhandError(f"No run of this thread is waiting or running, so there is "
                                f"nothing to {verb}.")
        return mine[0]
    mine = [r for r in open_runs if r.requested_by == event["user"]]
    if len(mine) == 1:
        return mine[0]
    if not mine:
        raise DeckhandError(f"You have no run waiting or running to {verb}. To act on "
                            f"someone else's, say it in that run's thread.")
    listed = ", ".join(f"`{short_id(r.id)}` ({r.goal})" for r in mine[:10])
    elsewhere = " or `/deckhand cancel RUN_ID`" if verb == "cancel" else ""
    raise DeckhandError(f"You have {len(mine)} runs that have not ended: {listed}. Say "
                        f"{verb!r} in the thread of the one you mean{elsewhere}.")


def _thread_of(run: Run) -> tuple[str, str] | None:
    slack = run.meta.get("slack") or {}
    if not slack.get("channel") or not slack.get("thread_ts"):
        return None
    return slack["channel"], slack["thread_ts"]
