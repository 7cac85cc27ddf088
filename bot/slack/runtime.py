"""The running bot: the Bolt app, embedded workers and the HTTP server, started together."""

from __future__ import annotations

import logging
import threading
from typing import Any

from slack_sdk import WebClient

from agents.engine.shipper import shipper_for, start_in_thread
from agents.engine.worker import ListenerFactory, Worker, WorkerOptions
from agents.services import Services
from agents.settings import Settings
from bot.metrics import Metrics
from bot.slack.app import build_app
from bot.slack.http import HttpLimits, Router, serve_http
from bot.slack.observe import observe_slack
from bot.slack.redacting import RedactingWebClient
from bot.slack.relay import ThreadRelay
from tools.redact import Redactor

log = logging.getLogger("deckhand.runtime")


class BotRuntime:
    """What ``deckhand serve`` runs; tests start the same thing on loopback."""

    def __init__(self, services: Services, settings: Settings, *,
                 client: WebClient | None = None, workers: int = 1,
                 worker_options: WorkerOptions | None = None, update_interval: float = 1.0,
                 metrics: Metrics | None = None):
        self.services, self.settings = services, settings
        self.metrics = metrics or Metrics()
        self._observe_planners(services)
        self.app, self.bot = build_app(services, settings, client=client)
        observe_slack(self.bot.client, self.metrics)
        store = services.store
        self.metrics.watch_queue(store.queue)
        self.metrics.watch_plan_quality(runs=store.runs, plans=store.plans)
        configs = list(services.org.services.values())  # DORA per (service, environment)
        self.metrics.watch_org_history(
            store.history, [(c.key, env) for c in configs for env in c.inventory.environments],
            undo_window=max(c.history.undo_window_hours for c in configs) * 3600)
        work = self.bot.work
        self.metrics.watch_work(work.depth, lambda: work.refused)
        self.metrics.watch_ssh(lambda: services.runners.setup_stats)
        if services.common.audit.sink is not None:
            self.metrics.watch_audit_sink(store.feed)
        self.workers = [Worker(services, services.store, name=f"{_host()}-embedded-{i}",
                               options=worker_options,
                               listener_factories=self._listener_factories())
                        for i in range(workers)]
        self.relay = self._relay(update_interval)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._server: Any = None
        self.metrics_server: Any = None

    def adopt(self, fresh: Services) -> None:
        """Services a config reload built get what this runtime added to the first ones;
        Slack's door then redacts the new config's secrets as well as the old ones (a run
        still executing may print one the new file no longer lists)."""
        self._observe_planners(fresh)
        client = self.bot.client
        if isinstance(client, RedactingWebClient):
            before, after = client.redact, fresh.redact
            client.redact = (before.including(after) if isinstance(before, Redactor)
                             and isinstance(after, Redactor)
                             else lambda text: after(before(text)))

    def _observe_planners(self, services: Services) -> None:
        """Count every service's plans (tokens, latency): each service's planner wrapped."""
        for name in services.org.services:
            focused = services.focus(name)
            focused.planner = self.metrics.observe_planner(focused.planner)

    def _listener_factories(self) -> list[ListenerFactory]:
        """The embedded workers' own listeners: metrics. What the thread says goes through
        the run's feed and this replica's relay, as for a standalone worker's runs."""
        return [self.metrics.run_listener_factory(self.services.store.plans)]

    def _relay(self, interval: float) -> ThreadRelay:
        """Says every run's feed in its thread (any replica; one relay per run at a time).
        Each run's buttons follow its own service's policy, as in force now (a reload swaps
        the organisation); the trace link and Home are the current services'."""
        store = self.services.store
        return ThreadRelay(self.bot.client, feed=store.run_feed, runs=store.runs,
                           plans=store.plans, policy=self.bot.policy_of,
                           interval=interval,
                           trace_link=lambda: self.services.settings.trace_url,
                           changed=self.bot.changed, timeline=self.metrics.timeline_uploaded)

    def start_workers(self) -> None:
        """The relay, then the embedded workers (if any) and the audit shipper."""
        self.relay.start()
        for worker in self.workers:
            thread = threading.Thread(target=worker.serve, args=(self._stop,), daemon=True,
                                      name=worker.name)
            thread.start()
            self._threads.append(thread)
        shipper = shipper_for(self.services, owner=self.workers[0].name) if self.workers \
            else None
        if shipper is not None:  # like `deckhand worker`: one process ships at a time
            start_in_thread(shipper, self._stop)

    def start_scheduler(self) -> None:
        """Fire recurring plans from this replica (each occurrence once across replicas)."""
        from bot.scheduler import Scheduler
        from bot.slack.listeners.schedules import post_occurrence

        self.bot.scheduler = Scheduler.for_services(
            self.services, report=lambda occurrence: post_occurrence(self.bot, occurrence))
        self.bot.scheduler.start()

    def workers_alive(self) -> bool:
        return not self.workers or any(t.is_alive() for t in self._threads)

    def router(self, extra: dict[str, Any] | None = None, *, public_metrics: bool = False
               ) -> Router:
        """The public routes; ``/metrics`` only when the operator puts it here explicitly."""
        routes = {"/metrics": self.metrics.wsgi_app()} if public_metrics else {}
        return Router(self.app, ping=self.services.store.ping, ready=self.workers_alive,
                      extra={**routes, **(extra or {})})

    def start_http(self, *, host: str, port: int, limits: HttpLimits | None = None,
                   metrics: tuple[str, int] | None = None, public_metrics: bool = False) -> Any:
        """Serve HTTP in a background thread; returns the server (``.effective_port``).

        ``metrics`` (host, port) serves ``/metrics`` on a listener of its own."""
        self._server = serve_http(self.router(public_metrics=public_metrics), host=host,
                                  port=port, limits=limits)
        threading.Thread(target=self._serve_http, daemon=True, name="http").start()
        if metrics is not None:
            self.metrics_server = self.metrics.serve(host=metrics[0], port=metrics[1])
        return self._server

    def serve_socket_mode(self, app_token: str) -> None:
        """Connect to Slack over Socket Mode and handle events until stopped or interrupted."""
        handler = self.connect_socket_mode(app_token)
        try:
            self._stop.wait()
        finally:
            handler.close()

    def connect_socket_mode(self, app_token: str) -> Any:
        """Open the Socket Mode link (after checking the token); returns the handler."""
        from slack_bolt.adapter.socket_mode import SocketModeHandler

        check_app_token(self.bot.client.base_url, app_token)
        handler = SocketModeHandler(self.app, app_token)
        handler.connect()  # type: ignore[no-untyped-call]
        return handler

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
        self.bot.stopping.set()
        if self.bot.scheduler is not None:
            self.bot.scheduler.shutdown()
        if self._server is not None:
            self._server.close()
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
            self.metrics_server.server_close()
        for thread in self._threads:
            thread.join(30)
        self.relay.stop()
        self.bot.work.stop()
        self.services.close()


def check_app_token(base_url: str, app_token: str) -> str:
    """The WebSocket URL Slack offers this app token; a ConfigError in one line otherwise
    (a bad token, no network, an answer with no URL), never a traceback or a retry loop."""
    from slack_sdk.errors import SlackApiError

    from tools.errors import ConfigError, Problem

    if not app_token.startswith("xapp-"):
        raise ConfigError([Problem("environment", "SLACK_APP_TOKEN must be the app-level "
                                   "token (xapp-…, Basic Information → App-Level Tokens)")])
    client = WebClient(base_url=base_url)
    try:
        url = client.apps_connections_open(app_token=app_token).get("url")
    except SlackApiError as exc:
        raise ConfigError([Problem("environment", f"Slack refused SLACK_APP_TOKEN "
                                   f"({exc.response.get('error')}); it needs the "
                                   f"connections:write scope and Socket Mode enabled")]) from exc
    except OSError as exc:
        raise ConfigError([Problem("network", f"cannot reach Slack at {base_url} "
                                   f"({getattr(exc, 'reason', exc)})")]) from exc
    if not url:
        raise ConfigError([Problem("slack", "Slack opened no Socket Mode connection (no URL "
                                   "in apps.connections.open); is Socket Mode enabled?")])
    return str(url)


def _host() -> str:
    import socket

    return socket.gethostname()
