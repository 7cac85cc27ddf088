"""ThreadWriter on its own: a replanned run is shown with its diff and, when it changes
hosts, with buttons again; a gate posts its figures. Real WebClient against the stand-in."""

from __future__ import annotations

from slack_sdk import WebClient

from agents.plan.targets import PlanTargets
from agents.policy.rules import Policy
from agents.run.record import Event, EventKind, Run, RunStatus
from agents.store import Store
from tests.fixtures.builders import make_plan, say_events, thread_writer
from tests.fixtures.slack_standin import SlackStandin


def test_replanned_run_posts_the_diff_and_asks_again(slack_standin: SlackStandin,
                                                     store: Store) -> None:
    client = WebClient(token="xoxb-t", base_url=f"{slack_standin.url}/api/")
    plan = make_plan([{"id": "deploy", "tool": "deploy", "params": {"version": "v1.0.0"}}])
    revised = plan.revised(steps=[{"id": "deploy", "tool": "deploy",
                                   "params": {"version": "v1.0.1"}}])
    run = Run.for_plan(plan, PlanTargets({}), status=RunStatus.APPROVED)
    writer = thread_writer(client, store, [plan, revised], policy=Policy())
    say_events(writer, run, [
        Event(kind=EventKind.RUN_STARTED, run_id=run.id),
        Event(kind=EventKind.REPLANNED, run_id=run.id, status="needs_approval",
              plan=revised.model_dump(mode="json"), plan_hash=revised.hash,
              error="step deploy failed: exit code 1")])
    posts = slack_standin.of("chat.postMessage")
    replanned = [c for c in posts if "Replanned after" in c.text_of_blocks()]
    assert replanned, [c.text_of_blocks() for c in posts]
    text = replanned[0].text_of_blocks()
    assert "v1.0.0 → v1.0.1" in text and '"action_id": "approve"' in text
    assert run.status is RunStatus.AWAITING_APPROVAL and run.plan_version == 2
    assert slack_standin.of("chat.update") == []  # the status message: posted, not edited
    assert slack_standin.violations == []


def test_a_gate_posts_every_sample_against_its_bound(slack_standin: SlackStandin,
                                                    store: Store) -> None:
    from agents.run.record import GateCheck
    from tools.gates import GateSample

    client = WebClient(token="xoxb-t", base_url=f"{slack_standin.url}/api/")
    plan = make_plan([{"id": "deploy", "tool": "deploy", "params": {"version": "v1.0.0"}}])
    run = Run.for_plan(plan, PlanTargets({}), status=RunStatus.APPROVED)
    sample = GateSample(query="ratio", series='{series="b"}', value="0.5", at=1.0, round=1,
                        bound="must be ≥ 0.99", ok=False, problem="below 0.99")
    check = GateCheck(name="success", step="deploy", after_batch=3, batches=3, ok=False,
                      reason="1 failed round(s), limit 0; worst: " + sample.line(1),
                      samples=[sample], lines=["query ratio (must be ≥ 0.99)", sample.line(1)])
    writer = thread_writer(client, store, [plan])
    say_events(writer, run, [
        Event(kind=EventKind.RUN_STARTED, run_id=run.id),
        Event(kind=EventKind.GATE_JUDGED, run_id=run.id, step_id="deploy", status="failed",
              error=check.reason, gate=check.model_dump(mode="json"))])
    texts = [c.text_of_blocks() for c in slack_standin.of("chat.postMessage")]
    gate = [t for t in texts if "gate success after batch 3 of 3 (the last) failed" in t]
    assert gate and 'series=\\"b\\"} = 0.5 (must be ≥ 0.99)' in gate[0], texts
    assert run.gates == [check] and slack_standin.violations == []


def test_a_hold_that_ends_undecided_loses_its_buttons(slack_standin: SlackStandin,
                                                      store: Store) -> None:
    """A go/no-go message whose run ended without a decision (a stop, a takeover's
    rollback) is edited to say so: no button outlives its hold. A relay that carries the
    thread on edits the message posted before (its ts is in the thread's state), never
    posts it twice."""
    from agents.run.record import Judgment, Verdict

    client = WebClient(token="xoxb-t", base_url=f"{slack_standin.url}/api/")
    plan = make_plan([{"id": "deploy", "tool": "deploy", "params": {"version": "v1.0.0"}}])
    run = Run.for_plan(plan, PlanTargets({}), status=RunStatus.APPROVED)
    held = Judgment(hold="deploy/1", step="deploy", after_batch=1, batches=3, since=1.0,
                    timeout=1800, on_timeout=Verdict.ROLLBACK, hosts_done=["web-1"])
    awaited = Event(kind=EventKind.JUDGMENT_AWAITED, run_id=run.id, step_id="deploy",
                    judgment=held.model_dump(mode="json"))
    fields: dict[str, str] = {}
    say_events(thread_writer(client, store, [plan], fields=fields), run,
               [Event(kind=EventKind.RUN_STARTED, run_id=run.id), awaited])
    posted = [c for c in slack_standin.of("chat.postMessage") if "Go/no-go" in c.text_of_blocks()]
    assert len(posted) == 1 and '"judge_continue"' in posted[0].text_of_blocks()
    # another relay takes the thread over (same remembered state); the run's new worker
    # holds it again, then a stop ends the run before anyone decides
    say_events(thread_writer(client, store, [], fields=fields), run,
               [awaited, Event(kind=EventKind.ROLLBACK_STARTED, run_id=run.id,
                               error="stopped by UBOB"),
                Event(kind=EventKind.RUN_FINISHED, run_id=run.id, status="rolled_back",
                      error="stopped by UBOB")])
    messages = [c for c in slack_standin.calls if c.method in ("chat.postMessage", "chat.update")
                and c.reply.get("ts") == posted[0].reply["ts"]]
    assert len([c for c in slack_standin.of("chat.postMessage")
                if "Go/no-go" in c.text_of_blocks()]) == 1  # edited, never posted twice
    last = messages[-1].text_of_blocks()
    assert "before anyone decided" in last and "judge_" not in last
