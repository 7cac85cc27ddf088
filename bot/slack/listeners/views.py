"""Modal submissions: Modify (instruction or YAML edit) and Reject (reason)."""

from __future__ import annotations

import json
from typing import Any

from slack_bolt import Ack, App

from agents.errors import PlanInvalid
from agents.faces import Face
from agents.plan.model import Plan
from agents.plan.yaml import plan_from_yaml, plan_to_yaml
from bot.slack import blocks as bk
from bot.slack.bot import Bot
from tools.errors import DeckhandError


def register(app: App, bot: Bot) -> None:
    @app.view(bk.ViewId.MODIFY_SUBMIT)
    def modify_submit(ack: Ack, body: dict[str, Any], view: dict[str, Any]) -> None:
        run = bot.store.runs.get(json.loads(view["private_metadata"])["run"])
        plan = bot.store.plans.get(run.plan_id, run.plan_version)
        instruction, edited = _value(view, "instruction"), _value(view, "yaml")
        if edited and edited.strip() != plan_to_yaml(plan).strip():
            _submit_yaml(ack, bot, body, plan, run.id, edited)
            return
        if not instruction:
            ack(response_action="errors",
                errors={"instruction": "Describe the change, or edit the YAML below."})
            return
        bot.work.submit("Modify", lambda: _replan(bot, body, plan, run.id, instruction),
                        tell=bot.teller(body))
        ack(response_action="update",
            view=bk.notice_modal("Revising…", f"Re-planning: _{bk.escape(instruction)}_"))

    @app.view(bk.ViewId.REJECT_SUBMIT)
    def reject_submit(ack: Ack, body: dict[str, Any], view: dict[str, Any]) -> None:
        run_id = json.loads(view["private_metadata"])["run"]
        reason = _value(view, "reason") or "no reason given"
        bot.work.submit("Reject", lambda: _reject(bot, body, run_id, reason),
                        tell=bot.teller(body))
        ack()


def _replan(bot: Bot, body: dict[str, Any], plan: Plan, run_id: str, instruction: str) -> None:
    """Ask the planner for a revision and show the outcome in the modal."""
    user = body["user"]["id"]
    try:
        bot.check_may_steer(bot.store.runs.get(run_id), user, what="modify")
        revised = bot.of(plan.service).planner.modify(plan, instruction, requested_by=user)
        revised.requested_via = Face.SLACK  # the new requester: this click's user
        bot.revise(run_id, revised, user=user)
        text = f"Posted version {revised.version} in the thread."
    except DeckhandError as exc:
        text = (f"⚠️ Could not revise the plan: {bk.escape(str(exc))}\n"
                f"Your instruction, to try again: _{bk.escape(instruction)}_")
    bot.client.views_update(view_id=body["view"]["id"],
                            view=bk.notice_modal("Modify plan", bk.trim(text, 2900)))


def _reject(bot: Bot, body: dict[str, Any], run_id: str, reason: str) -> None:
    user = body["user"]["id"]
    bot.check_may_steer(bot.store.runs.get(run_id), user, what="reject")
    bot.reject(run_id, reason, user=user)


def _submit_yaml(ack: Ack, bot: Bot, body: dict[str, Any], plan: Plan, run_id: str,
                 text: str) -> None:
    """Validate the edit before acking, so problems show inside the modal."""
    user = body["user"]["id"]
    try:
        revised = plan_from_yaml(plan, text, edited_by=user)
        bot.of(plan.service).check(revised)  # the plan's own service's tools and hosts
    except (ValueError, PlanInvalid) as exc:
        ack(response_action="errors", errors={"yaml": bk.trim(str(exc), 2000)})
        return

    def revise() -> None:
        bot.check_may_steer(bot.store.runs.get(run_id), user, what="modify")
        bot.revise(run_id, revised, user=user)
    bot.work.submit("Modify", revise, tell=bot.teller(body))
    ack()


def _value(view: dict[str, Any], block_id: str) -> str:
    block = view.get("state", {}).get("values", {}).get(block_id, {})
    return (block.get("value", {}).get("value") or "").strip()
