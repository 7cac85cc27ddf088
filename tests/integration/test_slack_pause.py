"""Pause and Resume on a run's live status message (issue 32), clicked as signed Bolt
requests carrying the buttons the bot built: open to the requester and the run's approvers
only, the paused run starts nothing new on its host, the status message and the App Home
say who paused it and since when, and Resume lets it finish — audited with ``via: button``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.config import Config
from agents.run.record import RunStatus
from agents.store import Store
from bot.slack import blocks as bk
from tests.fixtures.builders import make_config
from tests.fixtures.polling import wait_until
from tests.fixtures.slack_standin import SlackStandin
from tests.fixtures.slack_world import SlackWorld, button, start_world

WAIT = "touch STARTED; for i in $(seq 1 600); do [ -e GO ] && exit 0; sleep 0.05; done; exit 1"
PLAYBOOK = """
playbooks:
  - name: ship
    match: ['^deploy ship$']
    goal: ship to staging in two steps
    steps:
      - {id: first, tool: change, params: {environment: staging, label: first,
         script: "WAIT"}}
      - {id: second, tool: change, depends_on: [first],
         params: {environment: staging, label: second}}
    rollback:
      - {id: undo, tool: undo, params: {environment: staging}}
"""


@pytest.fixture
def two_steps(tmp_path: Path, store: Store, slack_standin: SlackStandin
              ) -> Iterator[SlackWorld]:
    script = tmp_path / "wait.sh"  # a playbook's parameter holds 200 characters
    script.write_text(WAIT.replace("STARTED", str(tmp_path / "started"))
                      .replace("GO", str(tmp_path / "go")))
    config: Config = make_config(tmp_path, extra=PLAYBOOK.replace("WAIT", f"sh {script}"))
    world = start_world(config, store, slack_standin)
    yield world
    (tmp_path / "go").touch()
    world.runtime.stop()


def _status_with(world: SlackWorld, action_id: str) -> Any:
    """The newest status message (posted or edited) carrying ``action_id``, as the bot built
    it."""
    def found() -> Any:
        for call in reversed(world.standin.of("chat.postMessage")
                             + world.standin.of("chat.update")):
            if any(e["action_id"] == action_id for b in call.blocks
                   if b.get("type") == "actions" for e in b["elements"]):
                return call
        return None
    return world.standin.wait_for(found, what=f"a status message with {action_id}")


def _said(world: SlackWorld, text: str) -> list[dict[str, Any]]:
    return [r for r in world.standin.responses if text in r.get("text", "")]


def test_pause_and_resume_from_the_thread(two_steps: SlackWorld, tmp_path: Path,
                                          caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="deckhand.pause")
    world, changes = two_steps, tmp_path / "web-1" / "changes"
    world.deploy("ship", user="UALICE")
    world.click("approve", button(world.plan_message(0), "approve"), user="UBOB")
    wait_until((tmp_path / "started").exists, what="the first step to start")
    run_id = button(_status_with(world, bk.ActionId.PAUSE), bk.ActionId.PAUSE)

    world.click(bk.ActionId.PAUSE, run_id, user="UMALLORY")  # neither requester nor approver
    world.standin.wait_for(lambda: _said(world, "only the requester"), what="the refusal")
    assert world.store.runs.pause_requested(run_id) is None

    world.click(bk.ActionId.PAUSE, run_id, user="UALICE")  # the requester may
    wait_until(lambda: any("paused by UALICE" in r.getMessage() for r in caplog.records),
               what="the worker to see the pause")
    (tmp_path / "go").touch()  # the first step finishes; the second must not start
    held = _status_with(world, bk.ActionId.RESUME)
    shown = held.text_of_blocks()
    assert "Paused by <@UALICE> since <!date^" in shown and "step second waits" in shown
    assert "rolls back at <!date^" in shown and "unless resumed" in shown
    assert changes.read_text().splitlines() == ["first"]  # nothing new on the host
    run = world.store.runs.get(run_id)
    assert run.status is RunStatus.RUNNING and run.paused and run.paused.by == "UALICE"

    world.open_home("UALICE")
    home = world.standin.wait_for(
        lambda: [c for c in world.standin.of("views.publish")
                 if "Paused by" in c.text_of_blocks()], what="the Home showing the pause")
    assert "<@UALICE>" in home[-1].text_of_blocks()

    world.click(bk.ActionId.RESUME, button(held, bk.ActionId.RESUME), user="UBOB")  # approver
    final = world.wait_run(run_id)
    assert final.status is RunStatus.SUCCEEDED and final.paused is None
    assert changes.read_text().splitlines() == ["first", "second"]
    entries = [(e.action, e.actor, e.details.get("via"))
               for e in world.store.audit.entries(run_id=run_id)]
    assert ("pause_refused", "UMALLORY", "button") in entries
    assert ("pause_requested", "UALICE", "button") in entries
    assert ("resume_requested", "UBOB", "button") in entries
    said = " ".join(c.payload.get("text", "") for c in world.standin.of("chat.postMessage"))
    assert "paused run" in said and "resumed run" in said
    assert world.standin.violations == []


def test_a_late_pause_click_on_a_finished_run_pauses_nothing(
        two_steps: SlackWorld, tmp_path: Path) -> None:
    world = two_steps
    world.deploy("ship", user="UALICE")
    world.click("approve", button(world.plan_message(0), "approve"), user="UBOB")
    wait_until((tmp_path / "started").exists, what="the first step to start")
    run_id = button(_status_with(world, bk.ActionId.PAUSE), bk.ActionId.PAUSE)
    (tmp_path / "go").touch()
    assert world.wait_run(run_id).status is RunStatus.SUCCEEDED
    world.click(bk.ActionId.PAUSE, run_id, user="UALICE")  # a stale button, clicked late
    told = world.standin.wait_for(lambda: _said(world, "there is nothing to pause"),
                                  what="the late click's answer")
    assert "already ended (succeeded)" in told[0]["text"]
    assert world.store.runs.pause_requested(run_id) is None


def _say(world: SlackWorld, text: str, *, user: str, thread: str | None = None) -> None:
    event = {"type": "app_mention", "user": user, "channel": "CDEPLOY",
             "text": f"<@UBOT> {text}", "ts": f"{time.time_ns()}"}
    if thread:
        event["thread_ts"] = thread
    assert world.signer.event(event, event_id=f"Ev{time.time_ns()}")[0] == 200


def test_pause_and_resume_said_in_words(two_steps: SlackWorld, tmp_path: Path) -> None:
    """Issue 43.2: "@deckhand pause the deploy" in the run's thread acts on that run under
    the buttons' rules; "resume" outside any thread acts on the asker's one open run."""
    world, changes = two_steps, tmp_path / "web-1" / "changes"
    _say(world, "cancel", user="UALICE")  # nothing of hers is running yet
    world.standin.wait_for(lambda: [t for t in world.told("UALICE") if "no run" in t],
                           what="'nothing to cancel'")
    world.deploy("ship", user="UALICE")
    world.click("approve", button(world.plan_message(0), "approve"), user="UBOB")
    wait_until((tmp_path / "started").exists, what="the first step to start")
    run_id = button(_status_with(world, bk.ActionId.PAUSE), bk.ActionId.PAUSE)
    thread = world.store.runs.get(run_id).meta["slack"]["thread_ts"]

    _say(world, "pause", user="UMALLORY", thread=thread)  # neither requester nor approver
    world.standin.wait_for(lambda: [t for t in world.told("UMALLORY")
                                    if "only the requester" in t], what="the refusal")
    assert world.store.runs.pause_requested(run_id) is None
    _say(world, "please pause the deploy 🙏", user="UALICE", thread=thread)
    wait_until(lambda: world.store.runs.pause_requested(run_id) is not None,
               what="the pause said in the thread")
    (tmp_path / "go").touch()  # the first step finishes; the second must not start
    _status_with(world, bk.ActionId.RESUME)
    assert changes.read_text().splitlines() == ["first"]

    _say(world, "resume", user="UALICE")  # outside the thread: her one open run
    assert world.wait_run(run_id).status is RunStatus.SUCCEEDED
    assert changes.read_text().splitlines() == ["first", "second"]
    entries = [(e.action, e.actor) for e in world.store.audit.entries(run_id=run_id)]
    assert ("pause_refused", "UMALLORY") in entries
    assert ("pause_requested", "UALICE") in entries and ("resume_requested", "UALICE") in entries
