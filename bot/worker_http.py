"""``deckhand worker``'s one HTTP port: ``/metrics``, ``/healthz`` and ``/readyz``.

``/healthz`` is liveness: 200 while the worker's loop or its run's heartbeat made progress
recently, 503 with the reason once it is stuck (a container runtime restarts it).
``/readyz`` adds Redis: 503 with the reason within 1.5 s when Redis does not answer. An
idle worker is healthy: its loop wakes every couple of seconds even with nothing to do.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from agents.readiness import Liveness, StoreProbe

StartResponse = Callable[..., Any]
App = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib's name)
        """Probes every few seconds would drown the worker's own log lines."""


def worker_app(metrics: App, liveness: Liveness, probe: StoreProbe) -> App:
    """Routes the worker's port: health, readiness, else the metrics exposition."""
    def app(environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/healthz":
            return _answer(start, {"worker": liveness.problem()})
        if path == "/readyz":
            return _answer(start, {"worker": liveness.problem(), "redis": probe.problem()})
        return metrics(environ, start)
    return app


def serve_worker_http(app: App, *, host: str, port: int) -> Any:
    """Serve ``app`` on a thread of its own; returns the server (``shutdown()`` to stop)."""
    server = make_server(host, port, app, server_class=_Server, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, daemon=True, name="worker-http").start()
    return server


def _answer(start: StartResponse, problems: dict[str, str | None]) -> list[bytes]:
    found = {name: problem for name, problem in problems.items() if problem}
    status = "503 Service Unavailable" if found else "200 OK"
    data = json.dumps({"ok": not found, **found}).encode()
    start(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]
