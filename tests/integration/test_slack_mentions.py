"""Issue 29.7: replies never turn text back into mentions.

Signed slash commands into the real Bolt app; the real WebClient and response_url posts
reach the loopback stand-in, whose raw request bodies are checked byte for byte. A mention
is made only from an id deckhand resolved (the plan's requester), never by pattern.
"""

from __future__ import annotations

import json
import urllib.parse

from tests.fixtures.slack_world import SlackWorld


def _replies(world: SlackWorld, count: int) -> list[bytes]:
    world.standin.wait_for(lambda: len(world.standin.responses) >= count or None,
                           what=f"{count} replies")
    return [urllib.parse.unquote_plus(b.decode()).encode() for b in world.standin.bodies]


def test_a_typed_mention_stays_escaped_in_the_reply(world: SlackWorld) -> None:
    world.deploy("<@U0EVIL1> <!channel> v9")
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
