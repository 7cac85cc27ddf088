""""Which service?": the question Slack asks when a request names none and its channel has
no default (docs/services.md 2.7). Pure Block Kit, like ``blocks.py``."""

from __future__ import annotations

from typing import Any

from bot.slack import blocks as bk

CHOOSE = "choose_service"
"""The buttons' action ids start with this (``choose_service:NAME``: unique in a block)."""
CHOOSE_MENU = "choose_service_menu"
"""The static select offered when there are more services than buttons."""
MAX_BUTTONS = 5
MAX_OPTIONS = 100
"""Slack's limit for a static select's options."""


def choice_value(ask_id: str, service: str) -> str:
    return f"{ask_id}:{service}"


def parse_choice(value: str) -> tuple[str, str]:
    """``ASK:SERVICE`` → (ask id, service); service names hold no ``:``."""
    ask_id, _, service = value.rpartition(":")
    return ask_id, service


def which_blocks(ask_id: str, request: str, services: list[str]) -> list[bk.Block]:
    """The question for ``request``: one button per service when they are few (the
    asker's owned ones first, as ``services`` is ordered), else a menu of the first 100."""
    text = (f"Which service is `{bk.shown(request, 300)}` for? Nothing is planned until "
            f"you choose (this question lasts 15 minutes).")
    blocks = [bk.section(text)]
    if len(services) <= MAX_BUTTONS:
        blocks.append({"type": "actions", "block_id": f"which:{ask_id}", "elements": [
            _button(ask_id, name) for name in services]})
        return blocks
    options = [{"text": {"type": "plain_text", "text": bk.trim(name, 75)},
                "value": choice_value(ask_id, name)} for name in services[:MAX_OPTIONS]]
    blocks.append({"type": "actions", "block_id": f"which:{ask_id}", "elements": [{
        "type": "static_select", "action_id": CHOOSE_MENU, "options": options,
        "placeholder": {"type": "plain_text", "text": "Choose a service"}}]})
    if len(services) > MAX_OPTIONS:
        blocks.append(bk.context(f"{len(services) - MAX_OPTIONS} more services are not "
                                 f"listed: name yours in the request (`deploy api v2.3.1`)."))
    return blocks


def _button(ask_id: str, name: str) -> dict[str, Any]:
    return {"type": "button", "action_id": f"{CHOOSE}:{name}",
            "text": {"type": "plain_text", "text": bk.trim(name, 75)},
            "value": choice_value(ask_id, name)}
