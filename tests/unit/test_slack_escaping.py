"""Every text shown in Slack is escaped: user, config, model and command text never mentions
or links (DESIGN invariant; issue 14.3)."""

from __future__ import annotations

from agents.plan.model import Plan
from agents.policy.rules import Policy
from agents.run.record import Run, RunStatus, StepStatus
from bot.slack import blocks as bk
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


def test_notices_mention_people_but_never_let_user_text_mention() -> None:
    text = bk.notice("only the requester (UALICE) may; ask <@UBOB>. You typed <!here>")
    assert "(<@UALICE>)" in text and "<@UBOB>" in text and "&lt;!here&gt;" in text
