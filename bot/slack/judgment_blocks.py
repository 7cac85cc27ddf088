"""The go/no-go message a rollout posts in its run's thread between batches: what the batch
did, and Continue / Roll back (each behind Slack's confirm dialog); once decided, the same
message without buttons, saying who decided what. Pure functions, like ``blocks``."""

from __future__ import annotations

import json

from agents.ids import short_id
from agents.run.judgment import clock_time, measured_line, results_line
from agents.run.record import Judgment, Run, Verdict
from bot.slack.blocks import ActionId, Block, context, escape, mention, section, shown, trim

LABEL = {Verdict.CONTINUE: "Continue", Verdict.ROLLBACK: "Roll back"}
ACTION = {Verdict.CONTINUE: ActionId.JUDGE_CONTINUE, Verdict.ROLLBACK: ActionId.JUDGE_ROLLBACK}


def judgment_value(run_id: str, held: Judgment) -> str:
    """What both buttons carry: the run and the hold they decide (a stale one refuses)."""
    return json.dumps({"run": run_id, "hold": held.hold}, separators=(",", ":"))


def parse_judgment_value(value: str) -> tuple[str, str]:
    data = json.loads(value)
    return str(data["run"]), str(data["hold"])


def judgment_blocks(run_id: str, held: Judgment) -> list[Block]:
    """The hold's results and its buttons."""
    then = "continues" if held.on_timeout is Verdict.CONTINUE else "rolls back"
    gates = "\n".join(f"• gate {escape(g)}" for g in held.gates[:10])
    return [section(f"⏸️ *Go/no-go {escape(held.where())}* — run `{short_id(run_id)}` holds: "
                    f"nothing new starts until someone decides.\n"
                    f"{escape(results_line(held))}" + (f"\n{trim(gates, 2000)}" if gates else "")),
            context((f"{escape(_first_up(measured_line(held)))}. " if held.gates else "")
                    + f"No decision by {clock_time(held.deadline)}: it {then} "
                    f"(rollout.judgment.on_timeout)."),
            {"type": "actions", "block_id": f"judge:{held.hold}"[:255], "elements": [
                _button(run_id, held, Verdict.CONTINUE, "primary",
                        "The next batch starts on more hosts."),
                _button(run_id, held, Verdict.ROLLBACK, "danger",
                        f"The rollback undoes the {len(held.hosts_done)} host(s) changed so "
                        f"far; nothing else is touched.")]}]


def judged_blocks(run_id: str, held: Judgment) -> list[Block]:
    """The same message once decided: who chose what (or the timeout), no buttons."""
    decision = held.decision
    if decision is None:
        return judgment_blocks(run_id, held)
    icon = "▶️" if decision.verdict is Verdict.CONTINUE else "↩️"
    who = (shown(decision.reason, 500) if decision.reason else  # the timeout's, a cancel's
           f"*{LABEL[decision.verdict]}*, decided by {mention(decision.actor, decision.via)} "
           f"(via {escape(decision.via)})")
    return [section(f"{icon} *Go/no-go {escape(held.where())}* — run `{short_id(run_id)}`: "
                    f"{who}\n{escape(results_line(held))}")]


def _first_up(text: str) -> str:
    return text[:1].upper() + text[1:]


def _button(run_id: str, held: Judgment, verdict: Verdict, style: str, effect: str) -> Block:
    label = LABEL[verdict]
    return {"type": "button", "action_id": ACTION[verdict], "style": style,
            "text": {"type": "plain_text", "text": label},
            "value": judgment_value(run_id, held),
            "confirm": {"title": {"type": "plain_text", "text": f"{label}?"},
                        "text": {"type": "mrkdwn", "text": trim(
                            f"Run `{short_id(run_id)}`, {escape(held.where())}: {effect}", 300)},
                        "confirm": {"type": "plain_text", "text": label},
                        "deny": {"type": "plain_text", "text": "Not yet"}}}


def ended_blocks(run: Run, held: Judgment) -> list[Block]:
    """A hold whose run ended before anyone decided (a stop, a rollback): no buttons."""
    if held.decision is not None:
        return judged_blocks(run.id, held)
    return [section(f"⏹️ *Go/no-go {escape(held.where())}* — run `{short_id(run.id)}` "
                    f"{escape(run.status.value.replace('_', ' '))} before anyone decided; "
                    f"nothing is left to decide.\n{escape(results_line(held))}")]
