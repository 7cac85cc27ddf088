"""The running bot: the Bolt app, embedded workers and the HTTP server, started together."""

from __future__ import annotations

import logging
import threading
from typing import Any

from slack_sdk import WebClient

from agents.services import Services
from agents.settings import Settings
from agents.worker import ListenerFactory, Worker, WorkerOptions
from bot.metrics import Metrics
from bot.slack.app import build_app
from bot.slack.home import change_listener_factory
from bot.slack.http import Router, serve_http
from bot.slack.observe import observe_slack
from bot.slack.thread import thread_listener_factory
from bot.slack.timeline_upload import timeline_listener_factory

log = logging.getLogger("deckhand.runtime")


class BotRuntime:
    """What ``deckhand serve`` runs; tests start the same thing on loopback."""

    def __init__(self, services: Services, settings: Settings, *,
                 client: WebClient | None = None, workers: int = 1,
                 worker_options: WorkerOptions | None = None, update_interval: float = 1.0,
                 metrics: Metrics | None = None):
        self.services, self.settings = services, settings
        self.metrics = metrics or Metrics()
        services.planner = self.metrics.observe_planner(services.planner)
        self.app, self.bot = build_app(services, settings, client=client)
        observe_slack(self.bot.client, self.metrics)
        self.metrics.watch_queue(services.store)
        self.metrics.watch_history(services.store, list(services.config.inventory.environments),
                                   undo_window=services.config.history.undo_window_hours * 3600)
        self.workers = [Worker(services, services.store, name=f"{_host()}-embedded-{i}",
                               options=worker_options,
                               listener_factories=self._listener_factories(update_interval))
                        for i in range(workers)]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._server: Any = None

    def _listener_factories(self, update_interval: float) -> list[ListenerFactory]:
        """Thread updates, then the timeline (workers close them in this order), Home, metrics."""
        client, store = self.bot.client, self.services.store
        return [thread_listener_factory(client, store, interval=update_interval,
                                        policy=self.services.config.policy),
                timeline_listener_factory(client, store, outcome=self.metrics.timeline_uploaded),
                change_listener_factory(self.bot.changed),
                self.metrics.run_listener_factory(store)]

    def start_workers(self) -> None:
        for worker in self.workers:
            thread = threading.Thread(target=worker.serve, args=(self._stop,), daemon=True,
                                      name=worker.name)
            thread.start()
            self._threads.append(thread)

    def start_scheduler(self) -> None:
        """Fire recurring plans from this replica (each occurrence once across replicas)."""
        from bot.scheduler import Scheduler
        from bot.slack.listeners.schedules import post_occurrence

        self.bot.scheduler = Scheduler.for_services(
            self.services, report=lambda occurrence: post_occurrence(self.bot, occurrence))
        self.bot.scheduler.start()

    def workers_alive(self) -> bool:
        return not self.workers or any(t.is_alive() for t in self._threads)

    def router(self, extra: dict[str, Any] | None = None) -> Router:
        routes = {"/metrics": self.metrics.wsgi_app(), **(extra or {})}
        return Router(self.app, self.services.store, ready=self.workers_alive, extra=routes)

    def start_http(self, *, host: str, port: int) -> Any:
        """Serve HTTP in a background thread; returns the server (``.effective_port``)."""
        self._server = serve_http(self.router(), host=host, port=port)
        thread = threading.Thread(target=self._serve_http, daemon=True, name="http")
        thread.start()
        return self._server

    def serve_socket_mode(self, app_token: str) -> None:
        """Connect to Slack over Socket Mode and handle events until interrupted."""
        from slack_bolt.adapter.socket_mode import SocketModeHandler

        SocketModeHandler(self.app, app_token).start()  # type: ignore[no-untyped-call]

    def _serve_http(self) -> None:
        try:
            self._server.run()
        except (OSError, ValueError):
            # stop() closes the sockets under waitress's select loop, which then fails on a
            # closed descriptor; that is the shutdown we asked for, not an error.
            if not self._stop.is_set():
                raise

    def stop(self) -> None:
        self._stop.set()
        if self.bot.scheduler is not None:
            self.bot.scheduler.shutdown()
        if self._server is not None:
            self._server.close()
        for thread in self._threads:
            thread.join(30)
        self.services.close()


def _host() -> str:
    import socket

    return socket.gethostname()
