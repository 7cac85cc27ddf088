"""Go/no-go in the run's thread (issue 32): after production's first batch the rollout holds
and posts the batch's results with Continue / Roll back, built by the bot and clicked here as
signed Bolt requests. The requester is refused privately (self-approval is off there), an
approver decides; asserted on the hosts, the record and the audit log."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.config import load_config
from agents.run.record import RunStatus
from agents.store import Store
from bot.slack import blocks as bk
from bot.slack.judgment_blocks import parse_judgment_value
from tests.fixtures.builders import BASE, SHELL_TOOLS
from tests.fixtures.polling import wait_until
from tests.fixtures.prometheus import Metrics, Prometheus, expose
from tests.fixtures.slack_standin import SlackStandin
from tests.fixtures.slack_world import SlackWorld, button, start_world

PLAYBOOK = """
playbooks:
  - name: ship
    match: ['^deploy ship it$']
    goal: ship to staging, then production one host at a time
    steps:
      - {id: stage, tool: change, params: {environment: staging, label: shipped}}
      - {id: prod, tool: change, params: {environment: production, label: shipped},
         depends_on: [stage]}
    rollback:
      - {id: undo_prod, tool: undo, params: {environment: production}}
      - {id: undo_stage, tool: undo, params: {environment: staging}}
"""
JUDGMENT = "rollout: {batch_size: 1, judgment: {after_batches: [1], timeout: 30m}}}"


@pytest.fixture
def held(tmp_path: Path, store: Store, slack_standin: SlackStandin) -> Iterator[SlackWorld]:
    base = textwrap.dedent(BASE).replace("rollout: {batch_size: 1}}", JUDGMENT)
    path = tmp_path / "deckhand.yml"
    path.write_text(base + textwrap.dedent(SHELL_TOOLS) + textwrap.dedent(PLAYBOOK))
    world = start_world(load_config(path), store, slack_standin)
    yield world
    for run in store.runs.recent(statuses=[RunStatus.RUNNING]):  # a failed test's hold
        store.runs.request_cancel(run.id, user="test")
    world.runtime.stop()


def _hold(world: SlackWorld) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Deploy, approve fully, and wait for the go/no-go message: (run id, its Continue and
    Roll back buttons as the bot built them)."""
    world.deploy("ship it", user="UALICE")
    approve = button(world.plan_message(0), "approve")
    world.click("approve", approve, user="UBOB")
    world.standin.wait_for(lambda: any("1 more approval" in str(c.payload.get("text"))
                                       for c in world.standin.of("chat.postMessage")))
    world.click("approve", approve, user="UCAROL")

    def buttons() -> dict[str, dict[str, Any]] | None:
        for call in world.standin.of("chat.postMessage"):
            found = {e["action_id"]: e for b in call.blocks if b.get("type") == "actions"
                     for e in b["elements"]}
            if bk.ActionId.JUDGE_CONTINUE in found:
                return found
        return None

    found = world.standin.wait_for(buttons, what="the go/no-go message")
    go, back = found[bk.ActionId.JUDGE_CONTINUE], found[bk.ActionId.JUDGE_ROLLBACK]
    assert go["confirm"]["confirm"]["text"] == "Continue"  # Slack asks first
    run_id, hold = parse_judgment_value(go["value"])
    assert hold == "prod/1"
    return run_id, go, back


def _changes(tmp_path: Path, host: str) -> list[str]:
    path = tmp_path / host / "changes"
    return path.read_text().splitlines() if path.exists() else []


def test_continue_from_the_thread_after_the_requester_is_refused(
        held: SlackWorld, tmp_path: Path) -> None:
    run_id, go, _ = _hold(held)
    said = held.standin.wait_for(
        lambda: [c for c in held.standin.of("chat.postMessage")
                 if "Go/no-go after batch 1 of 2 of prod" in c.text_of_blocks()],
        what="the batch's results")[0].text_of_blocks()
    assert "1 host(s) done (web-2), 0 error(s)" in said
    held.standin.wait_for(  # the live status says it waits, and since when
        lambda: [c for c in held.standin.of("chat.update")
                 if "awaiting go/no-go after batch 1 of 2 of prod since" in c.text_of_blocks()],
        what="the status message to say it waits")
    assert _changes(tmp_path, "web-2") == ["shipped"] and _changes(tmp_path, "web-3") == []

    held.click(bk.ActionId.JUDGE_CONTINUE, go["value"], user="UALICE")  # the requester
    refusal = held.standin.wait_for(
        lambda: [r for r in held.standin.responses if "someone else's" in r.get("text", "")],
        what="the private refusal")
    assert refusal[0]["response_type"] == "ephemeral"
    assert held.store.runs.get(run_id).awaiting is not None
    assert _changes(tmp_path, "web-3") == []

    held.click(bk.ActionId.JUDGE_CONTINUE, go["value"], user="UCAROL")  # allowed by both rules
    run = held.wait_run(run_id)
    assert run.status is RunStatus.SUCCEEDED
    assert _changes(tmp_path, "web-3") == ["shipped"]
    entries = held.store.audit.entries(run_id=run_id)
    assert [(e.actor, e.details["decision"], e.details["batch"], e.details["via"])
            for e in entries if e.action == "judged"] == [("UCAROL", "continue", 1, "slack")]
    assert [(e.actor, e.details["via"]) for e in entries
            if e.action == "judgment_refused"] == [("UALICE", "slack")]
    edited = held.standin.wait_for(
        lambda: [c for c in held.standin.of("chat.update") if "decided by" in c.text_of_blocks()],
        what="the go/no-go message to say who decided")
    assert "<@UCAROL>" in edited[0].text_of_blocks()
    assert not [b for b in edited[0].blocks if b.get("type") == "actions"]  # buttons gone
    assert held.standin.violations == []


def test_roll_back_from_the_thread_undoes_only_what_changed(
        held: SlackWorld, tmp_path: Path) -> None:
    run_id, go, back = _hold(held)
    held.click(bk.ActionId.JUDGE_ROLLBACK, back["value"], user="UBOB")
    run = held.wait_run(run_id)
    assert run.status is RunStatus.ROLLED_BACK
    assert "no-go after batch 1 of 2 of prod" in (run.reason or "")
    assert _changes(tmp_path, "web-2") == ["shipped", "undo"]
    assert _changes(tmp_path, "web-3") == []  # never started, never undone
    assert _changes(tmp_path, "web-1") == ["shipped", "undo"]  # staging changed too
    held.click(bk.ActionId.JUDGE_CONTINUE, go["value"], user="UALICE")  # a late click
    wait_until(lambda: [r for r in held.standin.responses
                        if "already decided" in r.get("text", "")], what="the late answer")
    said = json.dumps([c.payload for c in held.standin.of("chat.update")])
    assert "Roll back" in said and "UBOB" in said


def test_the_app_home_offers_the_go_no_go_and_a_click_there_decides(
        held: SlackWorld, tmp_path: Path) -> None:
    run_id, go, _ = _hold(held)
    held.open_home("UCAROL")

    def home_buttons() -> dict[str, dict[str, Any]] | None:
        for call in held.standin.of("views.publish"):
            found = {e["action_id"]: e for b in call.payload["view"]["blocks"]
                     if b.get("type") == "actions" for e in b["elements"]}
            if bk.ActionId.JUDGE_CONTINUE in found:
                return found
        return None

    found = held.standin.wait_for(home_buttons, what="the go/no-go on the App Home")
    assert found[bk.ActionId.JUDGE_CONTINUE]["value"] == go["value"]  # the same hold
    home = json.dumps(held.standin.of("views.publish")[-1].payload["view"])
    assert "Waiting for a go/no-go" in home and "1 host(s) done (web-2)" in home
    held.open_home("UALICE")  # she asked for it: the hold shows, without buttons (issue 41)
    alices = held.standin.wait_for(lambda: [
        c.payload["view"] for c in held.standin.of("views.publish")
        if c.payload.get("user_id") == "UALICE"
        and "Waiting for a go/no-go" in json.dumps(c.payload["view"])], what="UALICE's Home")
    assert not [b for b in alices[-1]["blocks"] if b.get("type") == "actions"
                and any(e["action_id"] == bk.ActionId.JUDGE_CONTINUE for e in b["elements"])]

    held.click_in_home(bk.ActionId.JUDGE_CONTINUE, go["value"], user="UALICE")  # refused
    held.standin.wait_for(  # no response_url on the Home: told by DM
        lambda: [c for c in held.standin.of("chat.postMessage")
                 if c.payload.get("channel") == "UALICE" and "someone else" in c.text_of_blocks()],
        what="the private refusal by DM")
    assert _changes(tmp_path, "web-3") == []

    held.click_in_home(bk.ActionId.JUDGE_CONTINUE, go["value"], user="UCAROL")
    run = held.wait_run(run_id)
    assert run.status is RunStatus.SUCCEEDED
    assert _changes(tmp_path, "web-3") == ["shipped"]
    assert [(e.actor, e.details["via"]) for e in held.store.audit.entries(run_id=run_id)
            if e.action == "judged"] == [("UCAROL", "slack")]
    assert held.standin.violations == []


GATED = ("rollout: {batch_size: 1, after_each_batch: [ratio], judgment: {after_batches: [1], "
         "timeout: 30m, recheck: 0.3s}}}")


@pytest.fixture
def gated(tmp_path: Path, store: Store, slack_standin: SlackStandin,
          scraped: tuple[Metrics, Prometheus]) -> Iterator[SlackWorld]:
    """``held``'s world with a real Prometheus gate after each production batch, judged
    again every 0.3 s while the go/no-go holds."""
    base = textwrap.dedent(BASE).replace("rollout: {batch_size: 1}}", GATED)
    gate = textwrap.dedent(f"""\
          ratio:
            description: every series of the success ratio is at least 0.99
            gate: {{kind: prometheus, url: "{scraped[1].url}", query: ratio, min: 0.99, interval: 0}}
            timeout: 10
        """)
    path = tmp_path / "deckhand.yml"
    tools = textwrap.dedent(SHELL_TOOLS).replace("tools:\n", "tools:\n" + textwrap.indent(
        gate, "  "), 1)
    path.write_text(base + tools + textwrap.dedent(PLAYBOOK))
    world = start_world(load_config(path), store, slack_standin)
    yield world
    for run in store.runs.recent(statuses=[RunStatus.RUNNING]):  # a failed test's hold
        store.runs.request_cancel(run.id, user="test")
    world.runtime.stop()


def test_the_go_no_go_message_shows_the_newest_figures_and_a_failing_gate_ends_it(
        gated: SlackWorld, tmp_path: Path, scraped: tuple[Metrics, Prometheus]) -> None:
    expose(scraped[0], scraped[1], a="1", b="0.995")
    run_id, _, _ = _hold(gated)
    expose(scraped[0], scraped[1], a="1", b="0.5")  # turns bad while it holds

    def edited(text: str) -> list[Any]:
        return [c for c in gated.standin.of("chat.update") if text in c.text_of_blocks()]

    # the relay edits the go/no-go message with the figures measured while holding ...
    showing = gated.standin.wait_for(lambda: edited("= 0.5 ✗"),  # (quotes JSON-escaped)
                                     what="the go/no-go message with the new figure")[0]
    assert [b for b in showing.blocks if b.get("type") == "actions"]  # still undecided
    assert "judged again every 0.3s while holding" in showing.text_of_blocks()
    # ... and the failing gate ends the hold: the message says why, its buttons gone
    ended = gated.standin.wait_for(lambda: edited("judged again while holding"),
                                   what="the go/no-go message to say the gate ended it")[0]
    assert not [b for b in ended.blocks if b.get("type") == "actions"]
    run = gated.wait_run(run_id)
    assert run.status is RunStatus.ROLLED_BACK
    assert _changes(tmp_path, "web-3") == []  # batch 2 never started
    assert _changes(tmp_path, "web-2") == ["shipped", "undo"]
    assert gated.standin.violations == []
