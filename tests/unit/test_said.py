"""``agents.said``: only mention parts become Slack mentions; every other face reads ids."""

from __future__ import annotations

import json

from agents.policy.rules import Approvers
from agents.said import Mention, Said, recorded
from bot.slack import blocks as bk

EVIL = "<@U0EVIL1>"


def test_only_said_parts_become_mentions() -> None:
    """The Slack rendering: mention parts live, every literal part escaped; a plain str,
    whatever it says, escaped whole; concatenation keeps the parts, an f-string drops them."""
    said = Said("ask ", Mention("UAPPROVER1"), ", ", Mention("SOPS", group=True), f" {EVIL}")
    assert said == f"ask UAPPROVER1, SOPS {EVIL}"
    assert bk.notice(said) == "ask <@UAPPROVER1>, <!subteam^SOPS> &lt;@U0EVIL1&gt;"
    assert bk.notice("🚫 " + said).startswith("🚫 ask <@UAPPROVER1>")
    assert bk.notice(f"{said}") == "ask UAPPROVER1, SOPS &lt;@U0EVIL1&gt;"
    assert json.dumps({"rule": said}) == json.dumps({"rule": str(said)})


def test_the_policy_and_slack_records_make_mentions_nothing_else_does() -> None:
    who = Approvers(users=["UAPPROVER1", "alice", EVIL], groups=["SOPS", "sre"]).describe()
    assert who == f"UAPPROVER1, alice, {EVIL}, SOPS, sre"  # the CLI's, MCP's and audit's
    assert bk.notice(who) == "<@UAPPROVER1>, alice, &lt;@U0EVIL1&gt;, <!subteam^SOPS>, sre"
    assert recorded("UALICE", "button") == Mention("UALICE")  # a signed click's user
    assert recorded("UALICE", "cli") == "UALICE"  # a --user: text
    assert recorded("UALICE", None) == "UALICE"  # a record from before faces were kept
    assert bk.notice(Said("by ", recorded(EVIL, "slack"))) == "by &lt;@U0EVIL1&gt;"
