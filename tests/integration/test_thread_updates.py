"""ThreadUpdater on its own: a replanned run is shown with its diff and, when it changes
hosts, with buttons again; edits are coalesced. Real WebClient against the stand-in."""

from __future__ import annotations

from slack_sdk import WebClient

from agents.plan.targets import PlanTargets
from agents.policy.rules import Policy
from agents.run.record import Event, EventKind, Run, RunStatus
from bot.slack.thread import ThreadUpdater
from tests.fixtures.builders import make_plan
from tests.fixtures.slack_standin import SlackStandin


def test_replanned_run_posts_the_diff_and_asks_again(slack_standin: SlackStandin) -> None:
    client = WebClient(token="xoxb-t", base_url=f"{slack_standin.url}/api/")
    plan = make_plan([{"id": "deploy", "tool": "deploy", "params": {"version": "v1.0.0"}}])
    revised = plan.revised(steps=[{"id": "deploy", "tool": "deploy",
                                   "params": {"version": "v1.0.1"}}])
    run = Run.for_plan(plan, PlanTargets({}), status=RunStatus.APPROVED)
    updater = ThreadUpdater(client, plan, channel="C1", thread_ts="1.1", interval=60,
                            policy=Policy())
    for event in (Event(kind=EventKind.RUN_STARTED, run_id=run.id),
                  Event(kind=EventKind.REPLANNED, run_id=run.id, status="needs_approval",
                        plan=revised.model_dump(mode="json"), plan_hash=revised.hash,
                        error="step deploy failed: exit code 1")):
        run.apply(event)
        updater(event, run)
    updater.close()
    posts = slack_standin.of("chat.postMessage")
    replanned = [c for c in posts if "Replanned after" in c.text_of_blocks()]
    assert replanned, [c.text_of_blocks() for c in posts]
    text = replanned[0].text_of_blocks()
    assert "v1.0.0 → v1.0.1" in text and '"action_id": "approve"' in text
    assert run.status is RunStatus.AWAITING_APPROVAL and run.plan_version == 2
    assert len(slack_standin.of("chat.update")) <= 1  # interval 60 s: edits coalesced
    assert slack_standin.violations == []
