"""The Stop button on a run's live status message (issue 32): behind Slack's confirm dialog,
open to the requester and the run's approvers only, it kills what runs, rolls back what
changed and says who stopped it — asserted on the host, the record and the audit log."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.config import Config
from agents.run.record import RunStatus
from agents.store import Store
from bot.slack import blocks as bk
from tests.fixtures.builders import make_config
from tests.fixtures.polling import wait_until
from tests.fixtures.slack_standin import SlackStandin
from tests.fixtures.slack_world import SlackWorld, button, start_world

CLICKS = 20
PLAYBOOK = """
playbooks:
  - name: ship
    match: ['^deploy ship$']
    goal: ship to staging, slowly
    steps:
      - {id: change, tool: change, params: {environment: staging, label: shipped,
         script: "echo started >> LOG; sleep 60; echo finished >> LOG"}}
    rollback:
      - {id: undo, tool: undo, params: {environment: staging}}
"""


@pytest.fixture
def slow(tmp_path: Path, store: Store, slack_standin: SlackStandin) -> Iterator[SlackWorld]:
    config: Config = make_config(tmp_path, extra=PLAYBOOK.replace("LOG", str(tmp_path / "log.txt")))
    world = start_world(config, store, slack_standin)
    yield world
    world.runtime.stop()


def _stop_value(world: SlackWorld) -> str:
    """The Stop button of the live status message, as the bot built it (confirm included)."""
    def status() -> object:
        for call in reversed(world.standin.of("chat.postMessage") + world.standin.of("chat.update")):
            elements = [e for b in call.blocks if b.get("type") == "actions"
                        for e in b["elements"] if e["action_id"] == bk.ActionId.STOP]
            if elements:
                return elements[0]
        return None

    element = world.standin.wait_for(status, what="a status message with Stop")
    assert element["confirm"]["confirm"]["text"] == "Stop and roll back"  # Slack asks first
    return str(element["value"])


def test_stop_from_the_thread_kills_rolls_back_and_says_who(
        slow: SlackWorld, tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    slow.deploy("ship", user="UALICE")
    slow.click("approve", button(slow.plan_message(0), "approve"), user="UBOB")
    wait_until(lambda: log.exists() and "started" in log.read_text(), what="the step to start")
    run_id = _stop_value(slow)

    slow.click(bk.ActionId.STOP, run_id, user="UMALLORY")  # neither requester nor approver
    refusal = slow.standin.wait_for(
        lambda: [r for r in slow.standin.responses if "only the requester" in r.get("text", "")],
        what="the refusal")
    assert refusal and slow.store.runs.get(run_id).status is RunStatus.RUNNING

    slow.click(bk.ActionId.STOP, run_id, user="UALICE")  # the requester may
    run = slow.wait_run(run_id)
    assert run.status is RunStatus.CANCELLED and "cancelled by UALICE" in (run.reason or "")
    lines = log.read_text().splitlines()
    assert lines == ["started", "undo web-1"]  # killed mid-step: never finished, then undone
    assert (tmp_path / "web-1" / "changes").read_text().splitlines() == ["shipped", "undo"]
    # the click's own entry, and only it (the worker picking the request up adds none)
    stops = [e for e in slow.store.audit.entries(run_id=run_id)
             if e.action == "cancel_requested"]
    assert [(e.actor, e.details.get("via")) for e in stops] == [("UALICE", "stop_button")]
    said = json.dumps([c.payload for c in slow.standin.of("chat.postMessage")])
    assert "stopped run" in said and "UALICE" in said


def test_a_finished_run_has_no_stop_and_a_late_click_stops_nothing(
        slow: SlackWorld, tmp_path: Path) -> None:
    slow.deploy("ship", user="UALICE")
    slow.click("approve", button(slow.plan_message(0), "approve"), user="UBOB")
    log = tmp_path / "log.txt"
    wait_until(lambda: log.exists() and "started" in log.read_text(), what="the step to start")
    run_id = _stop_value(slow)
    slow.click(bk.ActionId.STOP, run_id, user="UBOB")  # an approver may stop it too
    slow.wait_run(run_id)
    last = slow.standin.wait_for(
        lambda: [c for c in slow.standin.of("chat.update")
                 if "cancelled" in json.dumps(c.blocks)], what="the final status")[-1]
    assert not [e for b in last.blocks if b.get("type") == "actions" for e in b["elements"]
                if e["action_id"] == bk.ActionId.STOP]
    slow.click(bk.ActionId.STOP, run_id, user="UALICE")  # a stale button, clicked late
    told = slow.standin.wait_for(
        lambda: [r for r in slow.standin.responses if "nothing to stop" in r.get("text", "")],
        what="the late click's answer")
    assert told
    stops = [e for e in slow.store.audit.entries(run_id=run_id)
             if e.action == "cancel_requested" and e.details.get("via") == "stop_button"]
    assert [e.actor for e in stops] == ["UBOB"]  # the late click stopped nothing


def test_twenty_stop_clicks_at_once_stop_once_and_tell_the_others_privately(
        slow: SlackWorld, tmp_path: Path) -> None:
    """Issue 39.4: the first Stop wins — one audit entry, one post in the thread — and every
    later click hears, on its own response_url, that the run is already stopping and who
    stopped it."""
    log = tmp_path / "log.txt"
    slow.deploy("ship", user="UALICE")
    slow.click("approve", button(slow.plan_message(0), "approve"), user="UBOB")
    wait_until(lambda: log.exists() and "started" in log.read_text(), what="the step to start")
    run_id = _stop_value(slow)
    barrier = threading.Barrier(CLICKS)

    def click(user: str) -> None:
        barrier.wait()
        slow.click(bk.ActionId.STOP, run_id, user=user)

    clickers = [threading.Thread(target=click, args=(("UALICE", "UBOB", "UCAROL")[i % 3],))
                for i in range(CLICKS)]
    for clicker in clickers:
        clicker.start()
    for clicker in clickers:
        clicker.join(30)
    run = slow.wait_run(run_id)
    (stop,) = [e for e in slow.store.audit.entries(run_id=run_id)
               if e.action == "cancel_requested"]
    assert run.status is RunStatus.CANCELLED and f"cancelled by {stop.actor}" in (run.reason or "")
    told = slow.standin.wait_for(
        lambda: (found := [r for r in slow.standin.responses
                           if "already stopping" in r.get("text", "")])
        and len(found) >= CLICKS - 1 and found, what="every later click's answer")
    assert len(told) == CLICKS - 1
    assert all(f"stopped by {stop.actor}" in r["text"] for r in told)
    assert all(r.get("response_type") == "ephemeral" for r in told)
    said = [e for e in slow.store.run_feed.read(run_id, after="0-0", count=1000)
            if e.kind == "say" and "stopped run" in e.data["text"]]  # the thread's feed
    assert len(said) == 1 and stop.actor in said[0].data["text"]
    post = slow.standin.wait_for(lambda: [c for c in slow.standin.of("chat.postMessage")
                                          if "stopped run" in json.dumps(c.payload)],
                                 what="the stop's post in the thread")
    assert len(post) == 1
    refused = [e for e in slow.store.audit.entries(run_id=run_id) if e.action == "stop_refused"]
    assert len(refused) == CLICKS - 1
