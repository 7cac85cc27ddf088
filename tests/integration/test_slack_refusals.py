"""Issue 14.1/14.2/14.3/14.4: refusals answer at once, acks never wait for a rate-limited
Web API, plans are posted or their run is closed, user text never makes mentions.

Signed requests into the real Bolt app; the real WebClient against the loopback stand-in,
which answers 429 when told to.
"""

from __future__ import annotations

import json

from agents.run.record import RunStatus
from bot.slack import blocks as bk
from tests.fixtures.slack_world import SlackWorld, button

FAST = 1.0
"""An ack well inside Slack's 3 s, even on a loaded test machine (the bench measures ms)."""


def _responses_with(world: SlackWorld, count: int) -> list[dict[str, str]]:
    return world.standin.wait_for(lambda: len(world.standin.responses) >= count
                                  and list(world.standin.responses), what="responses")


def test_refused_commands_answer_200_at_once_and_reach_the_user(world: SlackWorld) -> None:
    world.deploy("v2.3.1 to staging")
    run_id = bk.parse_button_value(button(world.plan_message(), "approve"))[0]
    refused = [world.deploy("v9"),
               world.signer.command("/deckhand", "status run-doesnotexist", user="UBOB",
                                    response_url=f"{world.standin.url}/response/s"),
               world.signer.command("/deckhand", f"cancel {run_id}", user="UMALLORY",
                                    response_url=f"{world.standin.url}/response/c")]
    assert [status for status, _, _ in refused] == [200, 200, 200]
    assert max(took for _, _, took in refused) < FAST
    texts = " ".join(r["text"] for r in _responses_with(world, 3))
    assert "does not match the pattern" in texts and "run-doesnotexist" in texts
    assert "only the requester" in texts
    assert all(r.get("response_type") == "ephemeral" for r in world.standin.responses)


def test_a_deploy_behind_twenty_refusals_is_acked_at_once(world: SlackWorld) -> None:
    for i in range(20):
        status, _, took = world.signer.command("/deckhand", f"cancel run-nope{i}", user="UBOB",
                                               response_url=f"{world.standin.url}/response/x")
        assert status == 200 and took < FAST
    status, text, took = world.deploy("v2.3.1 to staging")
    assert status == 200 and "Planning" in text and took < FAST
    world.plan_message()


def test_refused_click_and_stale_modal_answer_200(world: SlackWorld) -> None:
    world.deploy("v2.3.1 to staging")
    value = button(world.plan_message(), "approve")
    status, _, took = world.click("approve", value, user="UMALLORY")
    assert status == 200 and took < FAST
    meta = json.dumps({"run": "run-doesnotexist", "v": 1, "channel": "CDEPLOY"})
    status, body, took = world.submit("reject_submit", meta, {"reason": "no"}, user="UBOB")
    assert status == 200 and took < FAST
    world.standin.wait_for(lambda: world.told("UMALLORY"), what="the click's refusal")
    refusals = world.standin.wait_for(lambda: len(world.standin.of("chat.postEphemeral")) +
                                      len(world.standin.of("chat.postMessage")) >= 2
                                      and world.standin.calls, what="the modal's refusal")
    texts = " ".join(str(c.payload.get("text")) for c in refusals) + str(world.told("UMALLORY"))
    assert "not allowed" in texts and "run-doesnotexist" in texts


def test_acks_stay_fast_and_every_plan_is_posted_under_a_429_storm(world: SlackWorld
                                                                  ) -> None:
    world.standin.rate_limit("chat.postMessage", times=30, retry_after=0)
    acks = [world.deploy("v2.3.1 to staging") for _ in range(10)]
    assert all(status == 200 and "Planning" in text for status, text, _ in acks)
    assert max(took for _, _, took in acks) < FAST
    plans = world.standin.wait_for(
        lambda: len(p := [c for c in world.standin.of("chat.postMessage")
                          if "approve" in c.text_of_blocks()]) >= 10 and p, what="10 plans")
    assert len(plans) == 10
    world.standin.wait_for(lambda: world.runtime.bot.work.idle(), what="the work to finish")
    assert all(r.meta.get("slack") for r in world.store.runs.recent(limit=20))


def test_a_plan_slack_never_takes_closes_its_run_and_says_so(world: SlackWorld) -> None:
    world.standin.rate_limit("chat.postMessage", times=100, retry_after=0)
    status, _, took = world.deploy("v2.3.1 to staging")
    assert status == 200 and took < FAST
    told = _responses_with(world, 1)
    assert "could not be posted" in told[0]["text"] or "refused the plan" in told[0]["text"]
    run = world.store.runs.recent()[0]
    assert run.status is RunStatus.EXPIRED and not run.meta.get("slack")
    assert [e.action for e in world.store.audit.entries(run_id=run.id)][-1] == "plan_not_posted"


def test_a_rate_limited_group_lookup_keeps_group_approvers(world: SlackWorld) -> None:
    world.deploy("v2.3.1")
    value = button(world.plan_message(), "approve")
    world.click("approve", value, user="UBOB")
    world.standin.wait_for(lambda: any("1 more approval" in str(c.payload.get("text"))
                                       for c in world.standin.of("chat.postMessage")))
    world.runtime.bot.directory._next = 0.0  # the cache is due for a reload: it will fail
    world.standin.rate_limit("usergroups.list", times=20, retry_after=0)
    world.click("approve", value, user="UCAROL")  # in SOPS, known from the first lookup
    run = world.standin.wait_for(
        lambda: (r := world.store.runs.get(bk.parse_button_value(value)[0])).status
        is not RunStatus.AWAITING_APPROVAL and r, what="the second approval")
    assert [a.user for a in run.approvals] == ["UBOB", "UCAROL"]


def test_reject_reason_cannot_mention_or_link(world: SlackWorld) -> None:
    world.deploy("v2.3.1 to staging")
    run_id = bk.parse_button_value(button(world.plan_message(), "approve"))[0]
    meta = json.dumps({"run": run_id, "v": 1, "channel": "CDEPLOY"})
    reason = "<!channel> @here <https://evil.example|click> " + "x" * 600
    world.submit("reject_submit", meta, {"reason": reason}, user="UBOB")
    world.standin.wait_for(lambda: world.store.runs.get(run_id).status is RunStatus.REJECTED)
    shown = world.standin.wait_for(
        lambda: [c for c in world.standin.calls if "Rejected" in c.text_of_blocks()
                 + str(c.payload.get("text"))] or None, what="the rejection")
    for call in shown:
        text = call.text_of_blocks() + str(call.payload.get("text"))
        assert "<!channel>" not in text and "<https://evil" not in text
        assert "&lt;!channel&gt;" in text


def test_an_approval_clicked_before_the_bot_heard_back_is_replied_in_its_thread(
        world: SlackWorld) -> None:
    release = world.standin.hold("chat.postMessage")  # the plan shows; its poster waits
    try:
        world.deploy("v2.3.1 to staging")
        plan = world.plan_message()
        world.signer.interaction({
            "type": "block_actions", "user": {"id": "UBOB"}, "team": {"id": "T1"},
            "api_app_id": "A1", "trigger_id": "t", "channel": {"id": "CDEPLOY"},
            "container": {"type": "message", "message_ts": plan.reply["ts"]},
            "actions": [{"type": "button", "action_id": "approve", "block_id": "b",
                         "value": button(plan, "approve"), "action_ts": "1"}]})
        approved = world.standin.wait_for(
            lambda: [c for c in world.standin.of("chat.postMessage")
                     if "Approved by" in str(c.payload.get("text"))], what="the approval")
    finally:
        release.set()
    assert approved[0].payload["thread_ts"] == plan.reply["ts"]


def test_an_error_before_the_ack_still_answers_200_and_tells_the_user(world: SlackWorld
                                                                      ) -> None:
    meta = json.dumps({"run": "run-doesnotexist", "v": 1, "channel": "CDEPLOY"})
    status, body, took = world.submit("modify_submit", meta, {"instruction": "skip"},
                                      user="UBOB")
    assert status == 200 and body == "" and took < FAST
    told = world.standin.wait_for(
        lambda: [c for c in world.standin.of("chat.postMessage")
                 if "run-doesnotexist" in str(c.payload.get("text"))], what="the refusal")
    assert told[0].payload["channel"] == "UBOB"
