"""The HTTP front door (``deckhand serve --http``): Slack at /slack/events, plus health checks.

A small WSGI router around Bolt's WSGI adapter, served by waitress (a well-kept, pure
Python production WSGI server): ``/slack/events`` for commands, interactivity and events;
``/healthz`` (process up) and ``/readyz`` (Redis answers, within 1.5 s: a hung Redis gets a
503 with the reason, never a hung probe) for load balancers and Docker.
``/metrics`` is served on a port of its own unless the operator asks for it here.

Why waitress, tuned, rather than another server: Bolt is a sync WSGI app whose handler holds
a thread only for the milliseconds until ``ack()``; waitress reads requests on one poll loop
and hands a thread only complete ones, so idle or trickling connections cost a descriptor,
never a thread. Its two weak spots under a slowloris (a low connection limit, a 120 s idle
timeout, no deadline for an incomplete request) are fixed below; gunicorn's sync workers
would give one process per slow client, and an async server would mean running a sync
Bolt app in a thread pool anyway.
"""

from __future__ import annotations

import json
import resource
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from slack_bolt import App
from slack_bolt.adapter.wsgi import SlackRequestHandler
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher

from agents.readiness import StoreProbe

StartResponse = Callable[..., Any]
Extra = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class Router:
    """Routes a WSGI request to Slack, a health check, or an extra handler (e.g. metrics)."""

    def __init__(self, app: App, *, ping: Callable[[], bool],
                 ready: Callable[[], bool] | None = None, extra: dict[str, Extra] | None = None):
        self.slack = SlackRequestHandler(app)
        self.probe = StoreProbe(ping)  # the store's ping: no noun, only whether Redis answers
        self.ready = ready or (lambda: True)
        self.extra = extra or {}

    def __call__(self, environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/slack/events":
            return self.slack(environ, start)
        if path == "/healthz":
            return _json(start, "200 OK", {"ok": True})
        if path == "/readyz":
            return self._readyz(start)
        if path in self.extra:
            return self.extra[path](environ, start)
        return _json(start, "404 Not Found", {"ok": False, "error": "not found"})

    def _readyz(self, start: StartResponse) -> Iterable[bytes]:
        problem = self.probe.problem()
        if problem is not None:
            return _json(start, "503 Service Unavailable", {"ok": False, "redis": problem})
        if not self.ready():
            return _json(start, "503 Service Unavailable", {"ok": False, "worker": "not alive"})
        return _json(start, "200 OK", {"ok": True})


def _json(start: StartResponse, status: str, body: dict[str, Any]) -> list[bytes]:
    data = json.dumps(body).encode()
    start(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]


@dataclass(frozen=True)
class HttpLimits:
    """How the public port holds under hostile traffic (issue 24); the defaults suit Slack.

    Idle and slow connections cost a file descriptor and a few kilobytes each and no thread
    (waitress reads requests on its poll loop; only complete requests reach a worker thread),
    so the connection limit is set far above what an attacker needs to hold to starve
    waitress's default of 100, and a request that is not complete within ``read_timeout``
    seconds is closed. Bodies above ``max_body`` are answered 413 from the Content-Length
    header, before they are read and before any signature or JSON work.
    """

    connection_limit: int = 4096
    """Open connections at once; capped below the process's file-descriptor limit."""
    read_timeout: float = 5.0
    """Seconds a request may take to arrive in full (headers and body): slowloris guard."""
    idle_timeout: int = 15
    """Seconds an idle keep-alive connection stays open."""
    max_body: int = 1 << 20
    """Bytes; Slack's payloads are far below 1 MiB."""
    max_header: int = 64 << 10
    threads: int = 8
    """Threads running complete requests: each holds one only while Bolt acks (ms)."""

    def connections(self) -> int:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return self.connection_limit
        return max(16, min(self.connection_limit, soft - 64))


class _DeadlineChannel(HTTPChannel):  # type: ignore[misc]
    """A waitress channel that remembers when its current, incomplete request began."""

    started: float | None = None

    def received(self, data: bytes) -> bool:
        fresh = self.request is None
        result: bool = super().received(data)
        if self.request is None:
            self.started = None
        elif fresh or self.started is None:
            self.started = time.monotonic()
        return result


class _GuardedServer(TcpWSGIServer):  # type: ignore[misc]
    """waitress's TCP server, also closing requests that take too long to arrive."""

    channel_class = _DeadlineChannel
    read_timeout = HttpLimits.read_timeout

    def maintenance(self, now: float) -> None:
        super().maintenance(now)
        cutoff = time.monotonic() - self.read_timeout
        for channel in list(self.active_channels.values()):
            started = getattr(channel, "started", None)
            if started is not None and started < cutoff and not channel.requests:
                channel.will_close = True


def serve_http(app: Callable[..., Iterable[bytes]], *, host: str, port: int,
               limits: HttpLimits | None = None) -> Any:
    """A hardened waitress server for ``app`` (call ``.run()``; ``.close()`` to stop)."""
    limits = limits or HttpLimits()
    adj = Adjustments(host=host, port=port, threads=limits.threads, ident="deckhand",
                      connection_limit=limits.connections(), channel_timeout=limits.idle_timeout,
                      cleanup_interval=1, asyncore_use_poll=True,
                      max_request_body_size=limits.max_body,
                      max_request_header_size=limits.max_header)
    dispatcher = ThreadedTaskDispatcher()
    dispatcher.set_thread_count(adj.threads)
    server = _GuardedServer(app, {}, True, None, dispatcher=dispatcher, adj=adj,
                            sockinfo=adj.listen[0])
    server.read_timeout = limits.read_timeout
    return server
