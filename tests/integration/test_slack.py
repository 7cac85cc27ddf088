"""The Slack bot end to end: signed HTTP requests in, the real WebClient out to a stand-in."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse

from agents.ids import short_id
from agents.run.record import RunStatus
from bot.cli.demo import probe
from bot.slack import blocks as bk
from tests.fixtures.slack_world import SlackWorld, button
from tests.fixtures.slack_world import actions_of as _actions


def test_signatures_are_verified(world: SlackWorld) -> None:
    body = urllib.parse.urlencode({"command": "/deckhand", "text": "help", "user_id": "UBOB",
                                   "channel_id": "C1", "trigger_id": "t"})
    assert world.signer.post(body)[0] == 200
    assert world.signer.post(body, secret="wrong-secret")[0] == 401
    assert world.signer.post(body, timestamp=int(time.time()) - 3600)[0] == 401


def test_deploy_posts_plan_then_two_approvals_run_it(world: SlackWorld) -> None:
    status, text, took = world.deploy("v2.3.1")
    assert status == 200 and "Planning" in text and took < 3.0
    plan_msg = world.plan_message()
    assert {"approve", "modify", "reject"} <= {e["action_id"] for b in _actions(plan_msg)
                                               for e in b["elements"]}
    approve = button(plan_msg, "approve")
    assert "confirm" in json.dumps(_actions(plan_msg))  # production asks for confirmation
    run_id, _, _ = bk.parse_button_value(approve)
    assert world.store.runs.get(run_id).status is RunStatus.AWAITING_APPROVAL

    world.click("approve", approve, user="UMALLORY")
    refusal = world.standin.wait_for(lambda: world.told("UMALLORY"), what="the refusal")
    assert "not allowed" in refusal[0] and "SOPS" in refusal[0]

    world.click("approve", approve, user="UALICE")  # requester: no self-approval in production
    said = world.standin.wait_for(lambda: world.told("UALICE"), what="the second refusal")
    assert "your own request" in said[0]

    world.click("approve", approve, user="UBOB")
    world.standin.wait_for(lambda: any("1 more approval" in str(c.payload.get("text"))
                                       for c in world.standin.of("chat.postMessage")))
    assert world.store.runs.get(run_id).status is RunStatus.AWAITING_APPROVAL
    world.click("approve", approve, user="UCAROL")  # in the SOPS group
    run = world.wait_run(run_id)
    assert run.status is RunStatus.SUCCEEDED
    assert [a.user for a in run.approvals] == ["UBOB", "UCAROL"]
    assert {p.body for p in probe(world.config)} == {"v2.3.1"}
    summary = world.standin.wait_for(lambda: [c for c in world.standin.of("chat.postMessage")
                                              if "SUCCEEDED" in c.text_of_blocks()],
                                     what="the summary")
    assert "critical path" in summary[0].text_of_blocks()
    # The status message is posted once, then edited. A loaded machine may run the whole run
    # before the sender first wakes, so its only appearance can be the post (this flaked when
    # the test looked at edits alone).
    statuses = [c for c in world.standin.calls if c.method in ("chat.postMessage", "chat.update")
                and "*Run `" in c.text_of_blocks()]
    assert statuses and "succeeded" in statuses[-1].text_of_blocks()
    span = max(run.duration or 0, 1.0)
    assert len(statuses) <= span / 1.0 + 3  # coalesced to about one edit per second
    assert world.standin.violations == []


def _approve_fully(world: SlackWorld, value: str) -> None:
    world.click("approve", value, user="UBOB")
    world.standin.wait_for(lambda: any("1 more approval" in str(c.payload.get("text"))
                                       for c in world.standin.of("chat.postMessage")))
    world.click("approve", value, user="UCAROL")


def test_failing_step_rolls_back_and_announces_it(world: SlackWorld) -> None:
    world.deploy("v2.4.0-broken")
    value = button(world.plan_message(), "approve")
    run_id = bk.parse_button_value(value)[0]
    _approve_fully(world, value)
    run = world.wait_run(run_id)
    assert run.status is RunStatus.ROLLED_BACK
    posts = world.standin.wait_for(
        lambda: (p := world.standin.of("chat.postMessage")) and any(
            "ROLLED BACK" in c.text_of_blocks() for c in p) and p, what="the summary")
    failure = [c for c in posts if "`smoke_staging` failed" in c.text_of_blocks()]
    assert failure and "health check failed" in failure[0].text_of_blocks()
    announce = [c for c in posts if "Rolling back run" in c.text_of_blocks()]
    assert announce and announce[0].payload.get("reply_broadcast") in (True, "true", "1", 1)
    text = announce[0].text_of_blocks()
    assert "<@UALICE>" in text and "<@UBOB>" in text and "<@UCAROL>" in text
    assert {p.body for p in probe(world.config) if p.status} <= {"v2.3.1"}


def test_double_click_and_slack_retry_create_one_run(world: SlackWorld) -> None:
    world.deploy("v2.3.1", trigger="same-trigger")
    _, retried, _ = world.deploy("v2.3.1", trigger="same-trigger")  # Slack retried it
    assert "Planning" not in retried  # recognised before the ack: it will plan nothing
    value = button(world.plan_message(), "approve")
    world.standin.wait_for(lambda: world.store.runs.recent(limit=5))
    assert len([c for c in world.standin.of("chat.postMessage") if _actions(c)]) == 1
    threads = [threading.Thread(target=world.click, args=("approve", value),
                                kwargs={"user": "UBOB"}) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    world.standin.wait_for(lambda: world.told("UBOB"), what="the second click's refusal")
    run = world.store.runs.get(bk.parse_button_value(value)[0])
    assert [a.user for a in run.approvals] == ["UBOB"]


def test_modify_yaml_new_version_and_stale_button(world: SlackWorld) -> None:
    world.deploy("v2.3.1 to staging")
    first = world.plan_message()
    old_value = button(first, "approve")
    run_id = bk.parse_button_value(old_value)[0]
    meta = json.dumps({"run": run_id, "v": 1, "channel": "CDEPLOY"})
    status, body, _ = world.submit("modify_submit", meta, {"yaml": "goal: [unclosed"},
                                   user="UBOB")
    assert status == 200 and json.loads(body)["response_action"] == "errors"
    assert "invalid YAML" in json.loads(body)["errors"]["yaml"]
    status, body, _ = world.submit("modify_submit", meta, {
        "yaml": "goal: g\nsteps: [{id: a, tool: rm_rf, params: {}}]"}, user="UBOB")
    assert "unknown tool 'rm_rf'" in json.loads(body)["errors"]["yaml"]
    edited = ("goal: Check staging\nsteps:\n- id: status\n  tool: status\n"
              "  params: {environment: staging}\n")
    assert world.submit("modify_submit", meta, {"yaml": edited}, user="UBOB")[0] == 200
    second = world.plan_message(1)
    assert "version 2" in second.text_of_blocks().lower()
    superseded = world.standin.wait_for(lambda: [c for c in world.standin.of("chat.update")
                                                 if "Superseded" in c.text_of_blocks()])
    assert not _actions(superseded[0])  # old buttons are gone
    world.click("approve", old_value, user="UBOB")
    refusal = world.standin.wait_for(lambda: world.told("UBOB"), what="the refusal")
    assert "version 1, but the plan is now version 2" in refusal[0]
    assert world.store.runs.get(run_id).status is RunStatus.AWAITING_APPROVAL


def test_reject_records_reason(world: SlackWorld) -> None:
    world.deploy("v2.3.1")
    reject_value = button(world.plan_message(), "reject")
    run_id = bk.parse_button_value(reject_value)[0]
    world.click("reject", reject_value, user="UMALLORY")  # a bystander cannot close it
    refusal = world.standin.wait_for(  # through the response_url: never rate-limited
        lambda: [r for r in world.standin.responses if "only the requester" in str(r)])
    assert refusal[0]["response_type"] == "ephemeral"
    assert not world.standin.of("views.open")
    meta = json.dumps({"run": run_id, "v": 1, "channel": "CDEPLOY"})
    world.submit("reject_submit", meta, {"reason": "change freeze"}, user="UBOB")
    world.standin.wait_for(lambda: world.store.runs.get(run_id).status is RunStatus.REJECTED)
    assert "change freeze" in (world.store.runs.get(run_id).reason or "")
    audit = [(e.action, e.actor) for e in world.store.audit.entries(run_id=run_id)]
    assert audit == [("planned", "UALICE"), ("refused", "UMALLORY"), ("rejected", "UBOB")]


def test_unknown_request_and_invalid_params_get_clear_answers(world: SlackWorld) -> None:
    world.deploy("make me a sandwich")
    world.deploy("v2.3.1;reboot")
    found = world.standin.wait_for(lambda: len(world.standin.responses) >= 2
                                   and world.standin.responses)
    texts = " ".join(r["text"] for r in found)
    assert "don't know how to plan" in texts and "does not match the pattern" in texts
    assert world.store.runs.recent() == []


def test_rate_limited_updates_still_deliver_the_final_status(world: SlackWorld) -> None:
    world.standin.rate_limit("chat.update", times=2, retry_after=0)
    world.deploy("v2.3.1 to staging")
    value = button(world.plan_message(), "approve")
    world.click("approve", value, user="UBOB")
    run = world.wait_run(bk.parse_button_value(value)[0])
    assert run.status is RunStatus.SUCCEEDED
    world.standin.wait_for(lambda: any("succeeded" in c.text_of_blocks() and "Run `" in
                                       c.text_of_blocks()
                                       for c in world.standin.of("chat.update")
                                       + world.standin.of("chat.postMessage")),
                           what="the final status edit")


def test_deckhand_command_help_runs_status_cancel(world: SlackWorld) -> None:
    world.signer.command("/deckhand", "help", user="UMALLORY",
                         response_url=f"{world.standin.url}/response/h")
    world.standin.wait_for(lambda: world.standin.responses)
    help_text = world.standin.responses[-1]["text"]
    assert "/deploy" in help_text and "cannot approve plans in any environment" in help_text
    world.deploy("v2.3.1")
    run_id = bk.parse_button_value(button(world.plan_message(), "approve"))[0]
    world.signer.command("/deckhand", f"cancel {run_id}", user="UMALLORY",
                         response_url=f"{world.standin.url}/response/c")
    refusal = world.standin.wait_for(lambda: world.standin.responses[1:])
    said = refusal[0]["text"]  # mentions only from records, never from text (issue 29.7):
    assert "only the requester (<@UALICE>) or an approver" in said  # Slack recorded UALICE
    assert "<@UBOB>" in said and "<!subteam^SOPS>" in said  # the policy's (issue 41 §5)
    assert world.store.runs.get(run_id).status is RunStatus.AWAITING_APPROVAL
    world.signer.command("/deckhand", f"cancel {short_id(run_id)}", user="UALICE",
                         response_url=f"{world.standin.url}/response/c")
    world.standin.wait_for(lambda: len(world.standin.responses) >= 3)
    assert world.store.runs.get(run_id).status is RunStatus.CANCELLED
    world.signer.command("/deckhand", "runs", user="UBOB",
                         response_url=f"{world.standin.url}/response/r")
    world.standin.wait_for(lambda: len(world.standin.responses) >= 4)
    assert short_id(run_id) in world.standin.responses[-1]["text"]


def test_mention_plans_like_deploy_once_per_event(world: SlackWorld) -> None:
    event = {"type": "app_mention", "user": "UALICE", "channel": "CDEPLOY",
             "text": "<@UBOT> deploy v2.3.1 to staging", "ts": "1.1"}
    assert world.signer.event(event, event_id="Ev1")[0] == 200
    assert world.signer.event(event, event_id="Ev1", retry=1)[0] == 200
    world.plan_message()
    assert len(world.store.runs.recent()) == 1


def test_forty_step_plan_fits_block_kit(world: SlackWorld) -> None:
    from agents.plan.model import Plan
    from agents.run.record import Run

    steps = [{"id": f"step_{i:02d}", "tool": "status", "params": {"environment": "staging"},
              "description": "x" * 200, "depends_on": [f"step_{i - 1:02d}"] if i % 3 else []}
             for i in range(40)]
    plan = Plan.model_validate({"goal": "g" * 400, "steps": steps})
    run = Run.for_plan(plan, world.runtime.services.targets(plan))
    client = world.runtime.bot.client
    client.chat_postMessage(channel="C1", text="plan",
                            blocks=bk.plan_blocks(plan, run, world.config.policy))
    client.chat_postMessage(channel="C1", text="status", blocks=bk.status_blocks(plan, run))
    assert world.standin.violations == []


def test_schedules_from_slack_post_occurrences_for_approval(world: SlackWorld) -> None:
    from datetime import UTC, datetime, timedelta

    from bot.scheduler import Scheduler
    from bot.slack.listeners.schedules import post_occurrence

    world.signer.command("/deckhand", 'schedule add "every day at 02:00" deploy v2.3.1 to '
                         'staging --tz Europe/Berlin', user="UBOB",
                         response_url=f"{world.standin.url}/response/s")
    reply = world.standin.wait_for(lambda: world.standin.responses)[-1]["text"]
    assert "Scheduled" in reply and "Europe/Berlin" in reply
    world.signer.command("/deckhand", 'schedule add "61 * * * *" deploy v2.3.1', user="UBOB",
                         response_url=f"{world.standin.url}/response/s")
    world.standin.wait_for(lambda: len(world.standin.responses) >= 2)
    assert "61" in world.standin.responses[-1]["text"]  # a clear error naming the bad field
    bot = world.runtime.bot
    scheduler = Scheduler.for_services(bot.services,
                                       report=lambda o: post_occurrence(bot, o))
    fired = scheduler.tick(datetime(2030, 1, 2, 1, 0, tzinfo=UTC) + timedelta(minutes=1))
    assert len(fired) == 1
    plan_msg = world.plan_message()
    assert "⏰" in plan_msg.text_of_blocks() and "approve" in plan_msg.text_of_blocks()
    run_id = bk.parse_button_value(button(plan_msg, "approve"))[0]
    assert world.store.runs.get(run_id).requested_by.startswith("schedule:")
    assert world.standin.violations == []


def test_read_only_request_runs_without_approval(world: SlackWorld) -> None:
    event = {"type": "app_mention", "user": "UMALLORY", "channel": "CDEPLOY",
             "text": "<@UBOT> status production", "ts": "2.2"}
    assert world.signer.event(event, event_id="EvStatus")[0] == 200
    posted = world.standin.wait_for(lambda: [c for c in world.standin.of("chat.postMessage")
                                             if "Read-only" in c.text_of_blocks()])
    assert not _actions(posted[0])  # no buttons: nothing to approve
    run = world.standin.wait_for(lambda: (r := world.store.runs.recent(limit=1)) and
                                 r[0].status.terminal and r[0], what="the status run")
    assert run.status is RunStatus.SUCCEEDED and run.approvals == []
    assert "queued_read_only" in [e.action for e in world.store.audit.entries(run_id=run.id)]


def test_the_channel_sees_the_outcome(world: SlackWorld) -> None:
    world.deploy("v2.3.1 to staging")
    plan = world.plan_message()
    value = button(plan, "approve")
    world.click("approve", value, user="UBOB")
    run = world.wait_run(bk.parse_button_value(value)[0])
    assert run.status is RunStatus.SUCCEEDED
    plan_ts = plan.reply["ts"]
    last = world.standin.wait_for(
        lambda: (u := [c for c in world.standin.of("chat.update") if c.payload["ts"] == plan_ts])
        and "succeeded" in u[-1].text_of_blocks() and u[-1], what="the plan message's outcome")
    assert not _actions(last)
    summary = [c for c in world.standin.of("chat.postMessage") if "SUCCEEDED" in c.text_of_blocks()]
    assert summary[0].payload.get("reply_broadcast") in (True, "true", "1", 1)
    assert "succeeded" in summary[0].payload["text"] and "run run-" not in summary[0].payload["text"]


def test_announcements_do_not_wait_behind_rate_limited_status_edits(world: SlackWorld) -> None:
    world.deploy("v2.4.0-broken to staging")
    value = button(world.plan_message(), "approve")
    world.standin.rate_limit("chat.update", times=12, retry_after=1)  # about 12 s of 429s
    world.click("approve", value, user="UBOB")
    run = world.wait_run(bk.parse_button_value(value)[0])
    assert run.status is RunStatus.ROLLED_BACK
    announce = world.standin.wait_for(
        lambda: [c for c in world.standin.of("chat.postMessage")
                 if "Rolling back run" in c.text_of_blocks()], what="the rollback broadcast")
    final = world.standin.wait_for(
        lambda: [c for c in world.standin.of("chat.update") if "*Run `" in c.text_of_blocks()
                 and "rolled back" in c.text_of_blocks()], timeout=60, what="the final status")
    edits = [c for c in world.standin.of("chat.update") if "*Run `" in c.text_of_blocks()]
    assert announce[0].at < edits[0].at  # not queued behind the edit stuck in 429s
    assert final[-1] is edits[-1]  # and the status ends final
