"""The "which service?" question (bot.slack.service_blocks): buttons while few, a static
select of the first 100 when many, values that round-trip, within Slack's limits."""

from __future__ import annotations

from bot.slack.service_blocks import (
    CHOOSE,
    CHOOSE_MENU,
    MAX_OPTIONS,
    parse_choice,
    which_blocks,
)
from tests.fixtures.slack_standin import check_limits


def _elements(blocks: list[dict]) -> list[dict]:
    return [e for b in blocks if b["type"] == "actions" for e in b["elements"]]


def test_a_button_per_service_while_they_are_few() -> None:
    blocks = which_blocks("ask-1", "deploy v1", ["web", "api"])
    buttons = _elements(blocks)
    assert [b["action_id"] for b in buttons] == [f"{CHOOSE}:web", f"{CHOOSE}:api"]
    assert [parse_choice(b["value"]) for b in buttons] == [("ask-1", "web"), ("ask-1", "api")]
    assert not check_limits("chat.postEphemeral", {"blocks": blocks})


def test_a_menu_of_the_first_hundred_when_many() -> None:
    names = [f"svc{i:03d}" for i in range(150)]
    blocks = which_blocks("ask-2", "deploy v1 <@U1>", names)
    [menu] = _elements(blocks)
    assert menu["action_id"] == CHOOSE_MENU and len(menu["options"]) == MAX_OPTIONS
    assert parse_choice(menu["options"][0]["value"]) == ("ask-2", "svc000")
    assert "50 more services" in blocks[-1]["elements"][0]["text"]
    assert "<@U1>" not in blocks[0]["text"]["text"]  # the request is shown, never a mention
    assert not check_limits("chat.postEphemeral", {"blocks": blocks})
