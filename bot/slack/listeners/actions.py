"""The plan message's buttons: Approve, Modify, Reject."""

from __future__ import annotations

import json
from typing import Any

from slack_bolt import Ack, App
from slack_sdk import WebClient

from agents.errors import ApprovalRefused
from agents.plan_yaml import plan_to_yaml
from agents.runs import Run, RunStatus
from bot.slack import blocks as bk
from bot.slack.bot import Bot


def register(app: App, bot: Bot) -> None:
    @app.action(bk.ActionId.APPROVE)
    def approve(ack: Ack, body: dict[str, Any], action: dict[str, Any]) -> None:
        ack()
        run_id, version, plan_hash = bk.parse_button_value(action["value"])
        try:
            bot.approve(run_id, version, plan_hash, user=body["user"]["id"])
        except ApprovalRefused as exc:
            bot.tell(body, f"🚫 Not approved: {exc}")
            if not body.get("channel"):  # clicked in the App Home: show it as it is now
                bot.changed(bot.store.run(run_id))

    @app.action(bk.ActionId.ROLLBACK_TO)
    def rollback_to(ack: Ack, body: dict[str, Any], action: dict[str, Any]) -> None:
        ack()  # an ordinary plan: validated, posted for approval like any other
        bot.propose(rollback_request(action), user=body["user"]["id"],
                    channel=body["channel"]["id"])

    @app.action(bk.ActionId.MODIFY)
    def modify(ack: Ack, body: dict[str, Any], action: dict[str, Any],
               client: WebClient) -> None:
        ack()
        run_id, version, _ = bk.parse_button_value(action["value"])
        run = bot.store.run(run_id)
        if not _may_steer(bot, run, body):
            return
        if run.status is not RunStatus.AWAITING_APPROVAL or run.plan_version != version:
            bot.ephemeral(channel=body["channel"]["id"], user=body["user"]["id"],
                          text=f"This plan can no longer be modified (run is "
                               f"{run.status.value}, plan version {run.plan_version}).")
            return
        plan = bot.store.plan(run.plan_id, run.plan_version)
        client.views_open(trigger_id=body["trigger_id"],
                          view=bk.modify_modal(run, plan_to_yaml(plan), _metadata(run, body)))

    @app.action(bk.ActionId.REJECT)
    def reject(ack: Ack, body: dict[str, Any], action: dict[str, Any],
               client: WebClient) -> None:
        ack()
        run_id, _, _ = bk.parse_button_value(action["value"])
        run = bot.store.run(run_id)
        if _may_steer(bot, run, body):
            client.views_open(trigger_id=body["trigger_id"],
                              view=bk.reject_modal(_metadata(run, body)))


def rollback_request(action: dict[str, Any]) -> str:
    """The request a "Roll back to this version" button stands for."""
    target = json.loads(action["value"])
    return f"roll back {target['environment']} to {target['version']}"


def _may_steer(bot: Bot, run: Run, body: dict[str, Any]) -> bool:
    """Refuse a bystander's Modify or Reject click."""
    try:
        bot.check_may_steer(run, body["user"]["id"])
    except ApprovalRefused as exc:
        bot.tell(body, f"🚫 {exc}")
        return False
    return True


def _metadata(run: Run, body: dict[str, Any]) -> str:
    return json.dumps({"run": run.id, "v": run.plan_version, "channel": body["channel"]["id"]})
