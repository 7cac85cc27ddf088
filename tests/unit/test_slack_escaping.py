"""Every text shown in Slack is escaped: user, config, model and command text never mentions
or links (DESIGN invariant; issue 14.3)."""

from __future__ import annotations

import json

from agents.history.deploys import Deploy
from agents.plan.model import Plan
from agents.policy.rules import Policy
from agents.run.record import (
    Approval,
    Decision,
    Judgment,
    Pause,
    Run,
    RunStatus,
    StepStatus,
    Verdict,
)
from bot.slack import blocks as bk
from bot.slack.home_blocks import HomeData, home_view
from bot.slack.judgment_blocks import judged_blocks
from tests.fixtures.builders import NO_TARGETS

HOSTILE = "<!channel> @here <https://evil.example|click> & <@UBOSS>"


def _plan() -> Plan:
    return Plan.model_validate({
        "goal": f"deploy {HOSTILE}",
        "steps": [{"id": "notify", "tool": "notify_team", "params": {"message": HOSTILE}}]})


def _mrkdwn(node: object) -> str:
    """Every mrkdwn text in ``node`` (plain_text, as in headers, never makes mentions)."""
    if isinstance(node, list):
        return "\n".join(_mrkdwn(n) for n in node)
    if isinstance(node, dict):
        if node.get("type") == "mrkdwn":
            return str(node["text"])
        return "\n".join(_mrkdwn(v) for v in node.values())
    return ""


def _assert_inert(text: str) -> None:
    for raw in ("<!channel>", "<https://evil", "<@UBOSS>"):
        assert raw not in text, raw
    assert "&lt;!channel&gt;" in text


def test_plan_status_summary_and_rollback_text_are_escaped() -> None:
    plan = _plan()
    run = Run.for_plan(plan, NO_TARGETS)
    run.reason = HOSTILE
    run.status = RunStatus.ROLLED_BACK
    run.steps["notify"].status = StepStatus.FAILED
    run.steps["notify"].error = HOSTILE
    for blocks in (bk.plan_blocks(plan, run, Policy()), bk.status_blocks(plan, run),
                   bk.summary_blocks(plan, run), bk.failure_blocks("notify", run.steps["notify"])):
        _assert_inert(_mrkdwn(blocks))
    _assert_inert(bk.rollback_text(run, plan))


def test_trim_never_cuts_inside_a_link_mention_or_entity() -> None:
    for text in ("see <https://example.com/very/long/path|docs> now", "a &lt;b&gt; c" * 3,
                 "ping <@U12345678> please"):
        for limit in range(5, len(text)):
            cut = bk.trim(text, limit)
            assert len(cut) <= limit
            body = cut.removesuffix("…")
            assert body.count("<") == body.count(">")
            assert body.rfind("&") <= body.rfind(";")


def test_step_outputs_read_as_words_and_ids_are_not_repeated() -> None:
    plan = Plan.model_validate({"goal": "g", "steps": [
        {"id": "build", "tool": "build", "params": {}},
        {"id": "ship", "tool": "deploy", "depends_on": ["build"],
         "params": {"artifact": "${steps.build.artifact}"}}]})
    text = _mrkdwn(bk.plan_blocks(plan, Run.for_plan(plan, NO_TARGETS), Policy()))
    assert "`build` build" not in text and "`ship` deploy" in text
    assert "artifact=artifact of `build`" in text and "${" not in text


def test_notices_never_make_mentions_from_text() -> None:
    text = bk.notice("only the requester (UALICE) may; ask <@UBOB>. You typed <!here> "
                     "UNKNOWN WARNING UPDATE12")
    assert "<@" not in text and "<!" not in text
    assert "&lt;@UBOB&gt;" in text and "(UALICE)" in text and "UNKNOWN WARNING" in text


def test_a_mention_is_made_only_of_a_slack_user_id_slack_recorded() -> None:
    assert bk.mention("U0ALICE", "slack") == "<@U0ALICE>"
    assert bk.mention("U0ALICE", "button") == "<@U0ALICE>"  # a Slack button's ``via``
    for via in ("cli", "terminal", "mcp", "schedule", "timeout", "cancel", None):
        assert bk.mention("U0ALICE", via) == "U0ALICE"  # the same id, typed elsewhere
    for name in ("bob <!channel>", "U<!here>", "W1>", "alice", "workflow"):
        assert "<" not in bk.mention(name, "slack").replace("&lt;", "")


def _everything_naming(requester: str, approver: str, pauser: str, decider: str,
                       via: str | None) -> str:
    """Every Slack text that names people, all of them recorded through ``via``."""
    plan = _plan().model_copy(update={"goal": "ship", "requested_by": requester,
                                      "requested_via": via})
    run = Run.for_plan(plan, NO_TARGETS)
    run.status, run.started_at = RunStatus.RUNNING, 1.0
    run.approvals = [Approval(user=approver, via=via, plan_version=1, plan_hash=plan.hash)]
    run.paused = Pause(by=pauser, at=2.0, via=via or "cli")
    held = Judgment(hold="notify/1", step="notify", after_batch=1, batches=2, since=1.0,
                    timeout=60.0, on_timeout=Verdict.ROLLBACK,
                    decision=Decision(verdict=Verdict.CONTINUE, actor=decider,
                                      via=via or "cli"))
    deploy = Deploy(run_id=run.id, environment="staging", version="v1",
                    outcome=RunStatus.SUCCEEDED, requested_by=requester, requested_via=via,
                    started_at=1.0, finished_at=2.0)
    home = home_view(HomeData(user="UALICE", now=3.0, pending=[run], active=[run],
                              recent=[run]), Policy())
    return "\n".join([_mrkdwn(bk.plan_blocks(plan, run, Policy())),
                      _mrkdwn(bk.status_blocks(plan, run)), _mrkdwn(bk.summary_blocks(plan, run)),
                      bk.rollback_text(run, plan), bk.history_text("staging", [deploy]),
                      _mrkdwn(judged_blocks(run.id, held)), _mrkdwn(home)])


def test_names_no_signed_slack_request_carried_are_text_in_every_slack_message() -> None:
    names = ("UNKNOWN", "UPDATE12", "WARNING", "U123ABC")
    for via in ("cli", "terminal", "mcp", "schedule", None):
        text = _everything_naming(*names, via=via)
        assert "<@" not in text, via
        assert all(name in text for name in names), via
    from_slack = _everything_naming(*names, via="slack")
    assert all(f"<@{name}>" in from_slack for name in names)


def test_a_slack_approver_is_mentioned_once_beside_the_same_name_typed_elsewhere() -> None:
    plan = _plan().model_copy(update={"requested_by": "UBOB", "requested_via": "cli"})
    run = Run.for_plan(plan, NO_TARGETS)
    run.approvals = [Approval(user="UBOB", via="slack", plan_version=1, plan_hash=plan.hash)]
    assert bk.rollback_text(run, plan).count("UBOB") == 1
    assert "<@UBOB>" in bk.rollback_text(run, plan)


def test_records_from_before_faces_were_recorded_load_and_name_people_as_text() -> None:
    plan = _plan()
    raw = {"plan_id": plan.id, "plan_version": 1, "plan_hash": plan.hash, "goal": "ship",
           "status": "succeeded", "requested_by": "UALICE",
           "approvals": [{"user": "UBOB", "plan_version": 1, "plan_hash": plan.hash}]}
    run = Run.model_validate_json(json.dumps(raw))
    old_plan = Plan.model_validate_json(plan.model_dump_json(exclude={"requested_via"}))
    assert run.requested_via is None and run.approvals[0].via is None
    text = _mrkdwn(bk.summary_blocks(old_plan, run)) + _mrkdwn(bk.plan_blocks(old_plan, run,
                                                                              Policy()))
    assert "UALICE" in text and "UBOB" in text and "<@" not in text


def test_a_new_requester_of_unknown_face_is_not_taken_for_the_old_ones() -> None:
    plan = _plan().model_copy(update={"requested_by": "UALICE", "requested_via": "slack"})
    assert plan.revised(goal="again").requested_via == "slack"  # the same requester
    assert plan.revised(requested_by="UMALLORY").requested_via is None
    assert plan.revised(requested_by="UBOB", requested_via="slack").requested_via == "slack"
