"""Modal submissions: Modify (instruction or YAML edit) and Reject (reason)."""

from __future__ import annotations

import json
from typing import Any

from slack_bolt import Ack, App
from slack_sdk import WebClient

from agents.errors import PlanInvalid
from agents.plan import Plan
from agents.plan_yaml import plan_from_yaml, plan_to_yaml
from bot.slack import blocks as bk
from bot.slack.bot import Bot
from tools.errors import DeckhandError


def register(app: App, bot: Bot) -> None:
    @app.view(bk.ViewId.MODIFY_SUBMIT)
    def modify_submit(ack: Ack, body: dict[str, Any], view: dict[str, Any],
                      client: WebClient) -> None:
        meta = json.loads(view["private_metadata"])
        user = body["user"]["id"]
        run = bot.store.run(meta["run"])
        bot.check_may_steer(run, user)
        plan = bot.store.plan(run.plan_id, run.plan_version)
        instruction = _value(view, "instruction")
        edited = _value(view, "yaml")
        if edited and edited.strip() != plan_to_yaml(plan).strip():
            _submit_yaml(ack, bot, plan, run.id, edited, user)
            return
        if not instruction:
            ack(response_action="errors",
                errors={"instruction": "Describe the change, or edit the YAML below."})
            return
        ack(response_action="update", view=bk.notice_modal("Revising…",
                                                           f"Re-planning: _{instruction}_"))
        try:
            revised = bot.services.planner.modify(plan, instruction, requested_by=user)
            bot.revise(run.id, revised, user=user)
            text = f"Posted version {revised.version} in the thread."
        except DeckhandError as exc:
            text = f"⚠️ Could not revise the plan: {exc}"
        client.views_update(view_id=body["view"]["id"],
                            view=bk.notice_modal("Modify plan", bk.trim(text, 2900)))

    @app.view(bk.ViewId.REJECT_SUBMIT)
    def reject_submit(ack: Ack, body: dict[str, Any], view: dict[str, Any]) -> None:
        ack()
        meta = json.loads(view["private_metadata"])
        user = body["user"]["id"]
        bot.check_may_steer(bot.store.run(meta["run"]), user)
        bot.reject(meta["run"], _value(view, "reason") or "no reason given", user=user)


def _submit_yaml(ack: Ack, bot: Bot, plan: Plan, run_id: str, text: str, user: str) -> None:
    """Validate the edit before acking, so problems show inside the modal."""
    try:
        revised = plan_from_yaml(plan, text, edited_by=user)
        bot.services.check(revised)
    except (ValueError, PlanInvalid) as exc:
        ack(response_action="errors", errors={"yaml": bk.trim(str(exc), 2000)})
        return
    ack()
    bot.revise(run_id, revised, user=user)


def _value(view: dict[str, Any], block_id: str) -> str:
    block = view.get("state", {}).get("values", {}).get(block_id, {})
    return (block.get("value", {}).get("value") or "").strip()
