"""Issue 29.7: replies never turn text back into mentions.

Signed slash commands into the real Bolt app; the real WebClient and response_url posts
reach the loopback stand-in, whose raw request bodies are checked byte for byte. A mention
is made only from an id deckhand resolved (the plan's requester), never by pattern — and
only from an id Slack recorded: names the real ``deckhand`` command recorded (``--user``,
into the same Redis) are text in every message, whatever they look like.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.config import load_config
from agents.run.record import RunStatus
from agents.store import Store
from bot.slack import blocks as bk
from tests.fixtures.builders import BASE, SHELL_TOOLS
from tests.fixtures.polling import wait_until
from tests.fixtures.slack_standin import SlackStandin
from tests.fixtures.slack_world import SlackWorld, button, start_world
from tests.integration.test_slack_pause import PLAYBOOK as SHIP
from tests.integration.test_slack_pause import WAIT


def _replies(world: SlackWorld, count: int) -> list[bytes]:
    world.standin.wait_for(lambda: len(world.standin.responses) >= count or None,
                           what=f"{count} replies")
    return [urllib.parse.unquote_plus(b.decode()).encode() for b in world.standin.bodies]


def test_a_typed_mention_stays_escaped_in_the_reply(world: SlackWorld) -> None:
    world.deploy("<@U0EVIL1> <!channel> to the moon and back")  # matches no playbook: echoed
    sent = b"\n".join(_replies(world, 1))
    assert b"U0EVIL1" in sent  # the reply does echo what was typed…
    assert b"<@U0EVIL1>" not in sent and b"<!channel>" not in sent  # …but never live
    assert b"&lt;@U0EVIL1&gt;" in sent


def test_capitalised_words_never_become_mentions(world: SlackWorld) -> None:
    world.deploy("UNKNOWN WARNING UPDATE12 release")
    sent = b"\n".join(_replies(world, 1))
    assert b"UNKNOWN" in sent and b"UPDATE12" in sent
    assert b"<@" not in sent


def test_the_requester_resolved_by_deckhand_is_still_mentioned(world: SlackWorld) -> None:
    world.deploy("v2.3.1 to staging")
    plan = world.plan_message()
    shown = json.dumps(plan.blocks)
    assert "<@UALICE>" in shown  # made by mention() from the signed request's user id


# -- names recorded by other faces (issue 29.7: mentions only from ids Slack resolved) --------

ROOT = Path(__file__).resolve().parents[2]
POLICY = """
policy:
  environments:
    staging: {approvers: {anyone: true}}
    production: {approvers: {users: [UBOB]}}
"""
RELEASE = """  release:
    description: put a version on every host of an environment
    command: "mkdir -p {host.dir} && echo {version} >> {host.dir}/changes"
    target: environment
    params: {version: {type: string, pattern: '^v\\d+\\.\\d+\\.\\d+$'}}
    mutates: true
    rollback: undo
"""
PLAYBOOKS = textwrap.dedent(SHIP) + """  - name: release
    match: ['^release (?P<version>v\\S+)$']
    goal: release {version} to production
    steps:
      - {id: release, tool: release, params: {environment: production, version: "{version}"}}
    rollback:
      - {id: undo, tool: undo, params: {environment: production}}
"""


@pytest.fixture
def shared(tmp_path: Path, store: Store, slack_standin: SlackStandin) -> Iterator[SlackWorld]:
    """The bot and the ``deckhand`` command on one config file (one policy) and one Redis."""
    script = tmp_path / "wait.sh"  # a playbook's parameter holds 200 characters
    script.write_text(WAIT.replace("STARTED", str(tmp_path / "started"))
                      .replace("GO", str(tmp_path / "go")))
    base = textwrap.dedent(BASE).replace("policy:\n  promotion: [staging, production]\n",
                                         textwrap.dedent(POLICY))
    path = tmp_path / "deckhand.yml"
    path.write_text(base + textwrap.dedent(SHELL_TOOLS).replace("vars:\n", RELEASE + "vars:\n")
                    + PLAYBOOKS.replace("WAIT", f"sh {script}"))
    world = start_world(load_config(path), store, slack_standin, policy=None)
    yield world
    (tmp_path / "go").touch()
    world.runtime.stop()


def deckhand(world: SlackWorld, redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The real ``deckhand`` command on the world's config and Redis (no Slack token)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLACK_")}
    env.update(REDIS_URL=redis_url, PYTHONPATH=str(ROOT), COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "bot.cli", *args, "--config",
                           str(world.config.path)], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)


def _sent(world: SlackWorld) -> bytes:
    """Every byte the bot sent to Slack so far (Web API and response_url), decoded."""
    return b"\n".join(urllib.parse.unquote_plus(b.decode()).encode()
                      for b in world.standin.bodies)


def _answer(world: SlackWorld, command: str, *, user: str) -> dict[str, Any]:
    """What ``/deckhand COMMAND`` answers ``user`` (through the response_url)."""
    before = len(world.standin.responses)
    world.signer.command("/deckhand", command, user=user,
                         response_url=f"{world.standin.url}/response/{before}")
    found: dict[str, Any] = world.standin.wait_for(
        lambda: world.standin.responses[before:] and world.standin.responses[before],
        what=f"/deckhand {command}")
    return found


def _newest(world: SlackWorld, method: str, needle: str) -> Any:
    return world.standin.wait_for(
        lambda: next((c for c in reversed(world.standin.of(method))
                      if needle in c.text_of_blocks()), None), what=f"{method} with {needle}")


def test_cli_names_stay_text_in_the_thread_and_home_a_slack_click_is_mentioned(
        shared: SlackWorld, redis_url: str, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="deckhand.pause")
    world = shared
    world.deploy("ship", user="U123ABC")  # a signed request: Slack resolved this id
    plan = world.plan_message(0)
    assert "*Requested by* <@U123ABC>" in plan.text_of_blocks()
    run_id = bk.parse_button_value(button(plan, "approve"))[0]
    approved = deckhand(world, redis_url, "approve", run_id, "--user", "UPDATE12")
    assert approved.returncode == 0, approved.stdout + approved.stderr
    wait_until((tmp_path / "started").exists, what="the first step to start")
    paused = deckhand(world, redis_url, "pause", run_id, "--user", "UNKNOWN")
    assert paused.returncode == 0, paused.stdout + paused.stderr
    wait_until(lambda: any("paused by UNKNOWN" in r.getMessage() for r in caplog.records),
               what="the worker to see the pause")
    (tmp_path / "go").touch()  # the first step ends; the pause holds the second
    held = _newest(world, "chat.update", "Paused by")
    assert "Paused by UNKNOWN since" in held.text_of_blocks()
    world.open_home("U123ABC")
    home = _newest(world, "views.publish", "Paused by").text_of_blocks()
    assert "Paused by UNKNOWN since" in home and "<@UNKNOWN>" not in home

    world.click(bk.ActionId.RESUME, run_id, user="U123ABC")
    assert world.wait_run(run_id).status is RunStatus.SUCCEEDED
    summary = _newest(world, "chat.postMessage", "approved by").text_of_blocks()
    assert "requested by <@U123ABC> · approved by UPDATE12" in summary
    sent = _sent(world)
    assert b"<@U123ABC> resumed run" in sent  # the click's own user, in its thread reply
    assert b"<@UPDATE12>" not in sent and b"<@UNKNOWN>" not in sent
    run = world.store.runs.get(run_id)  # what the faces recorded, as stored
    assert (run.requested_by, run.requested_via) == ("U123ABC", "slack")
    assert [(a.user, a.via) for a in run.approvals] == [("UPDATE12", "cli")]
    assert world.standin.violations == []


def test_a_run_requested_from_the_cli_names_its_requester_as_text_in_slack(
        shared: SlackWorld, redis_url: str) -> None:
    world = shared  # production needs UBOB: the terminal's --user may not approve it
    asked = deckhand(world, redis_url, "run", "release v1.2.3", "--yes", "--user", "UNKNOWN")
    assert "waits for an approver" in asked.stdout, asked.stdout + asked.stderr
    (run,) = world.store.runs.recent()
    assert (run.requested_by, run.requested_via) == ("UNKNOWN", "terminal")
    world.open_home("UBOB")  # an approver's Home lists it, with an Approve button
    home = _newest(world, "views.publish", "release v1.2.3")
    assert "requested by UNKNOWN" in home.text_of_blocks()
    world.click_in_home("approve", button(home, "approve"), user="UBOB")
    assert world.wait_run(run.id).status is RunStatus.SUCCEEDED
    wait_until(lambda: world.store.history.recent(None, "production"), what="the deploy recorded")
    for command in ("runs", "history production"):  # each names the requester, as text
        assert "UNKNOWN" in json.dumps(_answer(world, command, user="UBOB"))
    assert b"UNKNOWN" in _sent(world) and b"<@UNKNOWN>" not in _sent(world)

    shown = deckhand(world, redis_url, "runs", "show", run.id, "--json")  # the CLI faces:
    listed = deckhand(world, redis_url, "runs")  # names as text, as before
    assert json.loads(shown.stdout)["requested_by"] == "UNKNOWN"
    assert [a["user"] for a in json.loads(shown.stdout)["approvals"]] == ["UBOB"]
    assert "UNKNOWN" in listed.stdout and "<@" not in listed.stdout + shown.stdout
