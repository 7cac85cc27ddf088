"""Workflow Builder: the "Deploy with deckhand" custom step, driven by signed
``function_executed`` events; the step completes with the run's outcome (issue 14)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from agents.config import Config
from agents.run.record import RunStatus
from agents.store import Store
from bot.slack import blocks as bk
from tests.fixtures.slack_standin import SlackStandin
from tests.fixtures.slack_world import SlackWorld, button, start_world


def _execute(world: SlackWorld, execution: str, **inputs: str) -> Any:
    event = {"type": "function_executed", "function_execution_id": execution,
             "workflow_execution_id": f"W{execution}", "event_ts": str(time.time()),
             "bot_access_token": "xwfp-test-token",
             "function": {"id": "Fn1", "callback_id": "deploy_with_deckhand",
                          "title": "Deploy with deckhand", "type": "app"},
             "inputs": inputs}
    return world.signer.event(event, event_id=f"Ev{execution}")


def _completion(world: SlackWorld, method: str, execution: str) -> dict[str, Any]:
    calls = world.standin.wait_for(
        lambda: [c for c in world.standin.of(method)
                 if c.payload.get("function_execution_id") == execution], what=method)
    return calls[0].payload


def test_the_step_posts_the_plan_and_completes_with_the_outcome(world: SlackWorld) -> None:
    status, _, took = _execute(world, "Fx1", request="v2.3.1 to staging", channel="CDEPLOY",
                               requested_by="UALICE")
    assert status == 200 and took < 1.0
    value = button(world.plan_message(), "approve")
    world.click("approve", value, user="UBOB")
    run = world.wait_run(bk.parse_button_value(value)[0])
    assert run.status is RunStatus.SUCCEEDED and run.requested_by == "UALICE"
    done = _completion(world, "functions.completeSuccess", "Fx1")
    outputs = done["outputs"]
    outputs = json.loads(outputs) if isinstance(outputs, str) else outputs
    assert outputs == {"run_id": run.id, "outcome": "succeeded"}


def test_a_rejected_plan_fails_the_step_and_bad_inputs_fail_at_once(world: SlackWorld) -> None:
    _execute(world, "Fx2", request="v2.3.1 to staging", channel="CDEPLOY",
             requested_by="UALICE")
    run_id = bk.parse_button_value(button(world.plan_message(), "approve"))[0]
    meta = json.dumps({"run": run_id, "v": 1, "channel": "CDEPLOY"})
    world.submit("reject_submit", meta, {"reason": "not today"}, user="UBOB")
    assert "rejected" in _completion(world, "functions.completeError", "Fx2")["error"]
    _execute(world, "Fx3", request="", channel="CDEPLOY")
    assert "request" in _completion(world, "functions.completeError", "Fx3")["error"]


def test_the_step_watcher_ends_with_the_bot(sample_config: Config, store: Store,
                                           slack_standin: SlackStandin) -> None:
    """Each bot's watcher of waiting steps is its own thread; stopping the bot ends it (it
    used to poll the store every 2 s for the life of the process)."""
    before = {t for t in threading.enumerate() if t.name == "workflow-steps"}
    world = start_world(sample_config, store, slack_standin)
    mine = [t for t in threading.enumerate() if t.name == "workflow-steps" and t not in before]
    assert len(mine) == 1 and mine[0].is_alive()
    world.runtime.stop()
    mine[0].join(10)
    assert not mine[0].is_alive()
