"""The store's retry closes a connection whenever it gives up on a command: a connection
whose reply was never read must not go back to the pool, or the next command on it reads
the old reply (seen in the documented topology: after an outage a GET answered with an
XREAD's list, an XAUTOCLAIM with a GET's nil)."""

from __future__ import annotations

import contextlib

import redis
from redis.backoff import NoBackoff

from agents.store.connect import ClosingSentinelConnection, TransientRetry


def _timing_out() -> None:
    raise redis.TimeoutError("Timeout reading from socket")


def test_a_retry_refused_by_the_deadline_still_closes_the_connection() -> None:
    closed: list[Exception] = []
    retry = TransientRetry(NoBackoff(), retries=5, budget=0.0)  # no time for a second try
    try:
        retry.call_with_retry(_timing_out, closed.append)
    except redis.TimeoutError:
        pass
    else:
        raise AssertionError("the timeout was swallowed")
    assert len(closed) == 1  # redis-py's own refusal path would have left it open


def test_refused_credentials_close_the_connection_too() -> None:
    closed: list[object] = []

    def refused() -> None:
        raise redis.AuthenticationError("invalid username-password pair")

    retry = TransientRetry(NoBackoff(), retries=5)
    with contextlib.suppress(redis.AuthenticationError):
        retry.call_with_retry(refused, lambda error, count: closed.append((error, count)),
                              with_failure_count=True)
    assert len(closed) == 1


def test_a_sentinel_connection_is_closed_when_its_reply_cannot_be_read() -> None:
    """A real socket pair: the peer never answers, the read times out, and the connection
    is closed (redis-py's Sentinel connection would stay open with the reply unread)."""
    import socket

    ours, peer = socket.socketpair()
    pool = redis.sentinel.SentinelConnectionPool(
        "svc", redis.sentinel.Sentinel([]), connection_class=ClosingSentinelConnection)
    connection = pool.make_connection()
    ours.settimeout(0.05)
    connection._sock = ours  # connected; the peer stays silent
    connection.socket_timeout = 0.05
    connection._parser.on_connect(connection)
    try:
        connection.send_command("GET", "k")
        try:
            connection.read_response()
        except redis.TimeoutError:
            pass
        else:
            raise AssertionError("the silent peer answered")
        assert connection._sock is None  # closed: nothing unread goes back to the pool
    finally:
        peer.close()
