"""One HTTP GET bounded by a total deadline: connect, TLS, headers and body together.

A socket timeout bounds each read, not the request: a server trickling one byte every two
seconds never trips a 10 s read timeout, and holds a gate for as long as it likes. Here a
timer shuts the socket down at the deadline, whatever the request is doing, and the caller
gets ``DeadlineExceeded`` ("deadline exceeded"), never a partial answer.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time
import urllib.parse

BODY_LIMIT = 1_000_000


class HttpProblem(Exception):
    """The request could not be made or answered (the message says why, for a person)."""


class DeadlineExceeded(HttpProblem):
    """The deadline passed before the whole answer was read."""


def get(url: str, *, deadline: float, headers: dict[str, str] | None = None
        ) -> tuple[int, str]:
    """GET ``url``; (status, body) read before ``deadline`` (a ``time.monotonic`` value)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpProblem(f"not an http(s) URL: {url}")
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise DeadlineExceeded("deadline exceeded before the request was sent")
    conn = _connection(parts, remaining)
    watchdog = _Watchdog(conn, remaining)
    try:
        path = parts.path or "/"
        conn.request("GET", f"{path}?{parts.query}" if parts.query else path,
                     headers=headers or {})
        reply = conn.getresponse()
        body = reply.read(BODY_LIMIT).decode("utf-8", "replace")
        if watchdog.fired:  # the read ended because the socket was shut, not at EOF
            raise DeadlineExceeded(f"deadline exceeded while reading {parts.netloc}")
        return reply.status, body
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if watchdog.fired or time.monotonic() >= deadline:
            raise DeadlineExceeded(f"deadline exceeded talking to {parts.netloc}") from exc
        raise HttpProblem(f"cannot reach {parts.netloc}: {exc}") from exc
    finally:
        watchdog.cancel()
        conn.close()


def _connection(parts: urllib.parse.SplitResult, timeout: float) -> http.client.HTTPConnection:
    host, port = parts.hostname or "", parts.port
    if parts.scheme == "https":
        return http.client.HTTPSConnection(host, port, timeout=timeout,
                                           context=ssl.create_default_context())
    return http.client.HTTPConnection(host, port, timeout=timeout)


class _Watchdog:
    """Shuts the connection's socket down when the deadline comes (reads then end)."""

    def __init__(self, conn: http.client.HTTPConnection, seconds: float):
        self.conn, self.fired = conn, False
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        sock = self.conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed
                sock.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        self._timer.cancel()
