"""Issue 33: a "Show output" button on a finished run's status message shows what each step
printed — to the one who clicked, redacted and within Block Kit's limits — driven by signed
requests into the Bolt app, answered through the Slack stand-in."""

from __future__ import annotations

import json
import time

from agents.run.record import RunStatus
from bot.slack import blocks as bk
from tests.fixtures.slack_world import SlackWorld, button


def test_show_output_button_on_the_finished_status_message(world: SlackWorld) -> None:
    world.deploy("v2.3.1 to staging")
    value = button(world.plan_message(), "approve")
    world.click("approve", value, user="UBOB")
    run = world.wait_run(bk.parse_button_value(value)[0])
    assert run.status is RunStatus.SUCCEEDED
    status = world.standin.wait_for(
        lambda: [c for c in world.standin.calls if c.method in ("chat.postMessage",
                                                                 "chat.update")
                 and "*Run `" in c.text_of_blocks() and "show_output" in json.dumps(c.blocks)],
        what="the finished status message with its Show output button")
    assert button(status[-1], "show_output") == run.id

    world.click("show_output", run.id, user="UMALLORY")  # anyone in the channel may read
    shown = world.standin.wait_for(
        lambda: [c for c in world.standin.of("chat.postEphemeral")
                 if "Output of run" in c.text_of_blocks()], what="the output")
    assert shown[0].payload["user"] == "UMALLORY"
    text = shown[0].text_of_blocks()
    tail = run.steps["deploy_staging"].hosts["staging-1"].tail.strip().splitlines()[-1]
    assert "`deploy_staging`* on `staging-1` (succeeded)" in text and tail in text
    assert world.standin.violations == []  # within Block Kit's limits


def test_a_retried_button_click_gets_one_reply(world: SlackWorld) -> None:
    world.deploy("v2.3.1 to staging")
    value = button(world.plan_message(), "approve")
    click = {"type": "block_actions", "user": {"id": "UMALLORY", "username": "m"},
             "team": {"id": "T1"}, "api_app_id": "A1", "trigger_id": "trig-retried",
             "channel": {"id": "CDEPLOY"}, "container": {"type": "message"},
             "response_url": f"{world.standin.url}/response/2",
             "actions": [{"type": "button", "action_id": "approve", "block_id": "b",
                          "value": value, "action_ts": "1700000000.1"}]}
    assert world.signer.interaction(click)[0] == 200
    assert world.signer.interaction(click)[0] == 200  # Slack's retry: acknowledged, dropped
    world.click("approve", value, user="UEVE")  # a later click, answered after both
    world.standin.wait_for(lambda: world.told("UEVE"), what="the later reply")
    to_mallory = [r for r in world.standin.responses if r["_path"] == "/response/2"]
    assert len(to_mallory) == 1 and "not allowed" in to_mallory[0]["text"]


def test_modify_during_a_429_storm_says_so_at_once_through_the_response_url(
        world: SlackWorld) -> None:
    world.deploy("v2.3.1 to staging")
    value = button(world.plan_message(), "modify")
    world.standin.rate_limit("views.open", times=5, retry_after=30)
    started = time.monotonic()
    world.click("modify", value, user="UALICE")
    told = world.standin.wait_for(lambda: [r for r in world.standin.responses
                                           if "rate-limiting" in str(r.get("text"))],
                                  what="the rate-limit notice")
    assert time.monotonic() - started < 3.0  # within the trigger's life, not after 30 s
    assert told[0]["response_type"] == "ephemeral"
    # one 429 answered, none retried (the other four still wait), no form opened
    assert len(world.standin._rate_limits["views.open"]) == 4
    assert not world.standin.of("views.open")
    world.click("reject", value, user="UMALLORY")  # a bystander: refused there too
    world.standin.wait_for(lambda: [r for r in world.standin.responses
                                    if "🚫" in str(r.get("text"))], what="the refusal")
    assert not world.standin.of("chat.postEphemeral")  # the rate-limited API was not used
