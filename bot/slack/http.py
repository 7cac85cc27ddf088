"""The HTTP front door (``deckhand serve --http``): Slack at /slack/events, plus health checks.

A small WSGI router around Bolt's WSGI adapter, served by waitress (a well-kept, pure
Python production WSGI server): ``/slack/events`` for commands, interactivity and events;
``/healthz`` (process up) and ``/readyz`` (Redis reachable) for load balancers and Docker.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from slack_bolt import App
from slack_bolt.adapter.wsgi import SlackRequestHandler

from agents.store import Store
from tools.errors import DeckhandError

StartResponse = Callable[..., Any]
Extra = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class Router:
    """Routes a WSGI request to Slack, a health check, or an extra handler (e.g. metrics)."""

    def __init__(self, app: App, store: Store, *, ready: Callable[[], bool] | None = None,
                 extra: dict[str, Extra] | None = None):
        self.slack = SlackRequestHandler(app)
        self.store = store
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
        try:
            self.store.ping()
        except DeckhandError as exc:
            return _json(start, "503 Service Unavailable", {"ok": False, "redis": str(exc)})
        if not self.ready():
            return _json(start, "503 Service Unavailable", {"ok": False, "worker": "not alive"})
        return _json(start, "200 OK", {"ok": True})


def _json(start: StartResponse, status: str, body: dict[str, Any]) -> list[bytes]:
    data = json.dumps(body).encode()
    start(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]


def serve_http(router: Router, *, host: str, port: int, threads: int = 8) -> Any:
    """A waitress server for ``router`` (call ``.run()``; ``.close()`` to stop)."""
    from waitress import create_server

    return create_server(router, host=host, port=port, threads=threads, ident="deckhand")
