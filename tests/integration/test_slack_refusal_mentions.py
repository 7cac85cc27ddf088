"""Issue 41 §5: the names the policy lists and the names Slack recorded are live mentions in
every refusal and "who can approve" line, and nothing else is.

Signed requests into the real Bolt app; the stand-in keeps the raw bodies the real WebClient
and response_url posts sent. The real ``deckhand`` command, on the same config file and
Redis, prints the same refusals with plain ids.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.config import load_config
from agents.engine.desk import RunDesk
from agents.faces import Face
from agents.run.record import RunStatus
from agents.store import Store
from bot.slack import blocks as bk
from tests.fixtures.builders import BASE, SHELL_TOOLS
from tests.fixtures.polling import wait_until
from tests.fixtures.slack_standin import SlackStandin
from tests.fixtures.slack_world import SlackWorld, button, start_world
from tests.integration.test_slack_mentions import PLAYBOOKS, RELEASE, _newest, _sent, deckhand
from tests.integration.test_slack_pause import WAIT

POLICY = """
policy:
  environments:
    staging: {approvers: {users: [UAPPROVER1, UALICE, UBOB]}}
    production: {approvers: {users: [UAPPROVER1], groups: [SOPS]}}
"""
WHO = "production: <@UAPPROVER1>, <!subteam^SOPS>"  # the policy's ids, as Slack shows them
PLAIN = "production: UAPPROVER1, SOPS"  # …and as every other face prints them
EVIL = "<@U0EVIL1>"


@pytest.fixture
def world(tmp_path: Path, store: Store, slack_standin: SlackStandin) -> Iterator[SlackWorld]:
    """The bot and the ``deckhand`` command on one config file (one policy) and one Redis."""
    script = tmp_path / "wait.sh"
    script.write_text(WAIT.replace("STARTED", str(tmp_path / "started"))
                      .replace("GO", str(tmp_path / "go")))
    base = textwrap.dedent(BASE).replace("policy:\n  promotion: [staging, production]\n",
                                         textwrap.dedent(POLICY))
    path = tmp_path / "deckhand.yml"
    path.write_text(base + textwrap.dedent(SHELL_TOOLS).replace("vars:\n", RELEASE + "vars:\n")
                    + PLAYBOOKS.replace("WAIT", f"sh {script}"))
    started = start_world(load_config(path), store, slack_standin, policy=None)
    yield started
    (tmp_path / "go").touch()
    started.runtime.stop()


def _refusals(store: Store, run_id: str, what: str, actor: str) -> list[str]:
    """The rules of ``actor``'s audited refusals of ``what`` for ``run_id``, as Redis
    holds them."""
    return [str(e.details.get("rule")) for e in store.audit.entries(run_id=run_id)
            if e.action.endswith("refused") and e.details.get("what") == what
            and e.actor == actor]


def test_refusals_mention_the_policy_ids_and_escape_a_typed_name(
        world: SlackWorld, redis_url: str) -> None:
    asked = deckhand(world, redis_url, "run", "release v1.2.3", "--yes", "--user", EVIL)
    assert "waits for an approver" in asked.stdout, asked.stdout + asked.stderr
    (run,) = world.store.runs.recent()
    assert (run.requested_by, run.requested_via) == (EVIL, "terminal")  # typed, not Slack's

    world.click("approve", bk.button_value(run), user="UMALLORY")  # a signed click
    told = world.standin.wait_for(lambda: world.told("UMALLORY"), what="the refusal")[0]
    assert told == f"🚫 Not approved: you are not allowed to approve this plan. Who can: {WHO}"
    world.click("reject", bk.button_value(run), user="UMALLORY")  # a bystander's Reject
    steer = world.standin.wait_for(lambda: world.told("UMALLORY")[1:], what="refusal 2")[0]
    assert steer == (f"🚫 only the requester (&lt;@U0EVIL1&gt;) or an approver can change "
                     f"this run. Who can approve: {WHO}")  # the typed name stays text
    sent = _sent(world)
    assert b"<@UAPPROVER1>" in sent and b"<!subteam^SOPS>" in sent
    assert EVIL.encode() not in sent and b"&lt;@U0EVIL1&gt;" in sent

    cli = deckhand(world, redis_url, "stop", run.id, "--user", "UMALLORY")  # the CLI:
    assert cli.returncode != 0
    printed = " ".join((cli.stdout + cli.stderr).split())
    steered = (f"only the requester ({EVIL}) or an approver can change this run. "
               f"Who can approve: {PLAIN}")
    assert steered in printed, printed  # the same refusal, with plain names
    assert "<@UAPPROVER1>" not in printed and "subteam" not in printed
    assert world.store.runs.get(run.id).status is RunStatus.AWAITING_APPROVAL
    assert _refusals(world.store, run.id, "approve", "UMALLORY") == [  # audited in plain words
        f"you are not allowed to approve this plan. Who can: {PLAIN}"]
    assert _refusals(world.store, run.id, "stop", "UMALLORY") == [steered]
    assert _refusals(world.store, run.id, "reject", "UMALLORY") == [steered]

def test_the_requesters_home_mentions_approvers_and_escapes_a_typed_goal(
        world: SlackWorld) -> None:
    world.deploy("ship", user="UALICE")  # a signed request: its plan message says who
    assert ("Who can approve: staging: <@UAPPROVER1>, <@UALICE>, <@UBOB>"
            in world.plan_message().text_of_blocks())
    services = world.runtime.services
    plan = services.make_plan("release v1.2.3", requested_by="UREQ1", face=Face.SLACK)
    plan = plan.model_copy(update={"goal": f"{EVIL} hotfix <!channel>"})
    run = RunDesk(services).propose(plan, user="UREQ1", face=Face.SLACK)
    world.open_home("UREQ1")
    home = _newest(world, "views.publish", "hotfix").text_of_blocks()
    assert f"needs 1 more approval from {WHO}" in home
    assert "&lt;@U0EVIL1&gt; hotfix &lt;!channel&gt;" in home and EVIL not in home
    assert world.store.runs.get(run.id).status is RunStatus.AWAITING_APPROVAL


def test_a_second_pause_names_who_paused_it_as_a_mention(
        world: SlackWorld, tmp_path: Path) -> None:
    world.deploy("ship", user="UALICE")  # staging: its approvers, the requester too
    run_id = bk.parse_button_value(button(world.plan_message(), "approve"))[0]
    world.click("approve", button(world.plan_message(), "approve"), user="UALICE")
    wait_until((tmp_path / "started").exists, what="the first step to start")
    world.click(bk.ActionId.PAUSE, run_id, user="UALICE")
    wait_until(lambda: world.store.runs.pause_requested(run_id), what="the pause")
    world.click(bk.ActionId.PAUSE, run_id, user="UBOB")
    told = world.standin.wait_for(lambda: world.told("UBOB"), what="the refusal")[0]
    assert "already paused by <@UALICE>; resume it" in told  # not a bare id
    rules = _refusals(world.store, run_id, "pause", "UBOB")
    assert rules and "already paused by UALICE;" in rules[0]  # the audit: plain
    (tmp_path / "go").touch()
    world.click(bk.ActionId.RESUME, run_id, user="UBOB")
    assert world.wait_run(run_id).status is RunStatus.SUCCEEDED

