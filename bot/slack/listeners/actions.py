"""The plan message's buttons (Approve, Modify, Reject), and the run's (Stop, Show output,
a go/no-go's Continue and Roll back)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from slack_bolt import Ack, App, Respond

from agents.errors import ApprovalRefused
from agents.ids import short_id
from agents.plan.yaml import plan_to_yaml
from agents.run.record import Run, RunStatus, Verdict
from agents.said import Said, said_of
from bot.slack import blocks as bk
from bot.slack.bot import Bot
from bot.slack.judgment_blocks import ACTION as ACTIONS
from bot.slack.judgment_blocks import LABEL, parse_judgment_value
from bot.slack.service_blocks import CHOOSE, parse_choice
from bot.slack.work import Tell


def register(app: App, bot: Bot) -> None:
    @app.action(bk.ActionId.APPROVE)
    def approve(ack: Ack, body: dict[str, Any], action: dict[str, Any],
                respond: Respond) -> None:
        value = bk.parse_button_value(action["value"])
        tell = bot.teller(body, respond)  # a refusal: the response_url, never rate-limited
        bot.work.submit("Approve", lambda: _approve(bot, body, tell, *value), tell=tell)
        ack()

    @app.action(bk.ActionId.ROLLBACK_TO)
    def rollback_to(ack: Ack, body: dict[str, Any], action: dict[str, Any]) -> None:
        request = rollback_request(action)  # an ordinary plan, approved like any other
        service = json.loads(action["value"]).get("service")
        bot.work.submit("Roll back", lambda: bot.propose(request, user=body["user"]["id"],
                                                         channel=body["channel"]["id"],
                                                         service=service),
                        tell=bot.teller(body))
        ack()

    @app.action(re.compile(f"^{CHOOSE}(:.+|_menu)$"))
    def choose_service(ack: Ack, body: dict[str, Any], action: dict[str, Any],
                       respond: Respond) -> None:
        """A which-service button or menu: plans the waiting request for the asker alone."""
        value = action.get("value") or (action.get("selected_option") or {}).get("value", "")
        ask_id, service = parse_choice(str(value))
        user, tell = body["user"]["id"], bot.teller(body, respond)
        bot.work.submit("Choose service", lambda: _choose(bot, respond, ask_id, service, user),
                        tell=tell)
        ack()

    for action_id, (name, steer) in _STEERS.items():  # Stop, Pause, Resume: one shape
        app.action(action_id)(_steer_listener(bot, name, steer))

    for verdict, action_id in ACTIONS.items():
        app.action(action_id)(_judge_listener(bot, verdict))

    @app.action(bk.ActionId.SHOW_OUTPUT)
    def show_output(ack: Ack, body: dict[str, Any], action: dict[str, Any]) -> None:
        run_id = str(action["value"])
        bot.work.submit("Show output", lambda: bot.show_output(body, run_id),
                        tell=bot.teller(body))
        ack()

    @app.action(bk.ActionId.MODIFY)
    def modify(ack: Ack, body: dict[str, Any], action: dict[str, Any],
               respond: Respond) -> None:
        run_id, version, _ = bk.parse_button_value(action["value"])
        tell = bot.teller(body, respond)  # the response_url: not rate-limited like the API
        bot.work.submit("Modify", lambda: _open_modify(bot, body, run_id, version, tell),
                        tell=tell)
        ack()

    @app.action(bk.ActionId.REJECT)
    def reject(ack: Ack, body: dict[str, Any], action: dict[str, Any],
               respond: Respond) -> None:
        run_id, _, _ = bk.parse_button_value(action["value"])
        tell = bot.teller(body, respond)
        bot.work.submit("Reject", lambda: _open_reject(bot, body, run_id, tell), tell=tell)
        ack()


_STEERS: dict[str, tuple[str, Callable[[Bot], Callable[..., Run]]]] = {
    bk.ActionId.STOP: ("Stop", lambda bot: bot.stop),
    bk.ActionId.PAUSE: ("Pause", lambda bot: bot.pause),
    bk.ActionId.RESUME: ("Resume", lambda bot: bot.resume)}
"""The buttons that steer a running run: the job's name and the Bot method it calls."""
CONFIRMED = {
    "Stop": "⏹️ Stopping run `{run}`: running commands are killed, nothing new starts, and "
            "the rollback undoes what it changed. The thread follows it.",
    "Pause": "⏸️ Run `{run}` is paused: running commands finish, nothing new starts until "
             "someone resumes it.",
    "Resume": "▶️ Run `{run}` resumes."}
"""What the clicker hears, privately, once a control took effect."""


def _steer_listener(bot: Bot, name: str,
                    steer: Callable[[Bot], Callable[..., Run]]) -> Callable[..., None]:
    def listener(ack: Ack, body: dict[str, Any], action: dict[str, Any],
                 respond: Respond) -> None:
        run_id, user = str(action["value"]), body["user"]["id"]

        def job() -> None:
            run = steer(bot)(run_id, user=user)
            bot.confirm(body, respond, CONFIRMED[name].format(run=short_id(run.id)))
        bot.work.submit(name, job, tell=bot.teller(body, respond))
        ack()
    return listener


def _judge_listener(bot: Bot, verdict: Verdict) -> Callable[..., None]:
    """Continue or Roll back on a go/no-go message (confirmed in Slack's dialog)."""
    def judge(ack: Ack, body: dict[str, Any], action: dict[str, Any], respond: Respond) -> None:
        run_id, hold = parse_judgment_value(str(action["value"]))
        user = body["user"]["id"]
        bot.work.submit(LABEL[verdict], lambda: bot.judge(run_id, hold, verdict, user=user),
                        tell=bot.teller(body, respond))  # a refusal: privately, one line
        ack()
    return judge


def _choose(bot: Bot, respond: Respond, ask_id: str, service: str, user: str) -> None:
    """Plan the request ``ask_id`` for ``service`` (AskNotYours, told privately, for anyone
    but its asker); the question becomes what was chosen."""
    bot.choose(ask_id, service, user=user)
    respond(text=f"Planned for *{bk.escape(service)}*.", replace_original=True)


def _approve(bot: Bot, body: dict[str, Any], tell: Tell, run_id: str, version: int,
             plan_hash: str) -> None:
    try:
        bot.approve(run_id, version, plan_hash, user=body["user"]["id"], origin=_origin(body))
    except ApprovalRefused as exc:
        tell(Said("🚫 Not approved: ", said_of(exc)))
        if not body.get("channel"):  # clicked in the App Home: show it as it is now
            bot.changed(bot.store.runs.get(run_id))


def _origin(body: dict[str, Any]) -> dict[str, str] | None:
    """The clicked top-level message, as the run's ``meta["slack"]`` would record it."""
    container, channel = body.get("container") or {}, (body.get("channel") or {}).get("id")
    ts = container.get("message_ts")
    if not channel or not ts or container.get("thread_ts"):
        return None
    return {"channel": channel, "thread_ts": ts, "plan_ts": ts}


def _open_modify(bot: Bot, body: dict[str, Any], run_id: str, version: int,
                 tell: Tell) -> None:
    run = bot.store.runs.get(run_id)
    if not _may_steer(bot, run, body, tell, what="modify"):
        return
    if run.status is not RunStatus.AWAITING_APPROVAL or run.plan_version != version:
        tell(f"This plan can no longer be modified (run is {run.status.value}, "
             f"plan version {run.plan_version}).")
        return
    plan = bot.store.plans.get(run.plan_id, run.plan_version)
    bot.open_modal(body["trigger_id"],
                   bk.modify_modal(run, plan_to_yaml(plan), _metadata(run, body)), tell)


def _open_reject(bot: Bot, body: dict[str, Any], run_id: str, tell: Tell) -> None:
    run = bot.store.runs.get(run_id)
    if _may_steer(bot, run, body, tell, what="reject"):
        bot.open_modal(body["trigger_id"], bk.reject_modal(_metadata(run, body)), tell)


def rollback_request(action: dict[str, Any]) -> str:
    """The request a "Roll back to this version" button stands for."""
    target = json.loads(action["value"])
    return f"roll back {target['environment']} to {target['version']}"


def _may_steer(bot: Bot, run: Run, body: dict[str, Any], tell: Tell, *, what: str) -> bool:
    """Refuse a bystander's Modify or Reject click (through ``tell``: the response_url)."""
    try:
        bot.check_may_steer(run, body["user"]["id"], what=what)
    except ApprovalRefused as exc:
        tell(Said("🚫 ", said_of(exc)))
        return False
    return True


def _metadata(run: Run, body: dict[str, Any]) -> str:
    return json.dumps({"run": run.id, "v": run.plan_version, "channel": body["channel"]["id"]})
