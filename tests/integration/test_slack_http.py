"""Issue 24: the public HTTP endpoint under hostile traffic, with real sockets on loopback."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from urllib.parse import urlparse

import pytest

from agents.config import Config
from agents.store import Store
from bot.slack.http import HttpLimits
from tests.fixtures.slack_standin import SlackStandin
from tests.fixtures.slack_world import SlackWorld, start_world

PARTIAL = b"POST /slack/events HTTP/1.1\r\nHost: deckhand\r\nContent-Type: text/plain\r\n"


@contextmanager
def held_connections(world: SlackWorld, count: int, opening: bytes = PARTIAL
                     ) -> Iterator[list[socket.socket]]:
    """``count`` connections that send ``opening`` and then never finish their request."""
    url = urlparse(world.http)
    with ExitStack() as stack:
        held = []
        for _ in range(count):
            conn = stack.enter_context(socket.create_connection((url.hostname, url.port), 5))
            conn.sendall(opening)
            held.append(conn)
        yield held


def test_a_signed_deploy_is_answered_while_300_slow_clients_hold_connections(
        world: SlackWorld) -> None:
    with held_connections(world, 300):
        status, text, took = world.deploy("v2.3.1 to staging")
        assert status == 200 and "Planning" in text and took < 1.0
        world.plan_message()


@pytest.fixture
def quick_world(sample_config: Config, store: Store, slack_standin: SlackStandin
                ) -> Iterator[SlackWorld]:
    started = start_world(sample_config, store, slack_standin,
                          limits=HttpLimits(read_timeout=1.0, max_body=64 << 10))
    yield started
    started.runtime.stop()


def test_incomplete_requests_are_closed_after_the_read_timeout(quick_world: SlackWorld
                                                               ) -> None:
    with held_connections(quick_world, 5) as held:
        began = time.monotonic()
        for conn in held:
            conn.settimeout(10)
            assert conn.recv(1024) == b""  # closed by the server, no answer
        assert time.monotonic() - began < 8


def test_a_large_body_is_refused_413_before_it_is_read(quick_world: SlackWorld) -> None:
    url = urlparse(quick_world.http)
    with socket.create_connection((url.hostname, url.port), 5) as conn:
        conn.sendall(PARTIAL + b"Content-Length: 104857600\r\nX-Slack-Signature: v0=bad\r\n"
                     b"X-Slack-Request-Timestamp: 1\r\n\r\n" + b"x" * 1024)
        conn.settimeout(5)
        reply = conn.recv(4096)
    assert reply.startswith(b"HTTP/1.1 413")
    assert quick_world.deploy("v2.3.1 to staging")[0] == 200  # and the bot still answers


def test_metrics_are_not_on_the_public_port(world: SlackWorld) -> None:
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(world.http + "/metrics", timeout=5)
    assert refused.value.code == 404
    status, text = world.get("/metrics")
    assert status == 200 and "deckhand_slack_work_depth" in text
    assert world.get("/healthz")[0] == 200
