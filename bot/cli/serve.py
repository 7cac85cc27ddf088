"""``deckhand serve``: the Slack bot (Socket Mode by default, or HTTP) with embedded workers."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import threading
from typing import TYPE_CHECKING

from rich.console import Console

from agents.org import load_org
from agents.services import build_services
from agents.settings import Settings
from bot.cli.common import Commands, add_config_arg, find_config
from bot.cli.drain import DRAIN_STORE_WAIT, TAKEN_OVER, leave_now, watch_store
from bot.cli.health import warn_about_redis
from bot.cli.reload import reload_on_sighup
from bot.healthcheck import advertise, withdraw
from bot.logs import add_log_format_arg, announce
from tools.errors import ConfigError, Problem

SINGLE_PROCESS = ("`serve --http` needs REDIS_URL: behind a load balancer each replica would "
                  "keep its own in-process store. Set REDIS_URL, or opt into one process "
                  "with --single-process (DECKHAND_SINGLE_PROCESS=1)")

if TYPE_CHECKING:  # the Slack stack loads only when `serve` runs, not for every command
    from bot.slack.runtime import BotRuntime


def register(commands: Commands) -> None:
    parser = commands.add_parser("serve", help="run the Slack bot (Socket Mode, or --http)")
    parser.add_argument("--http", action="store_true",
                        help="serve /slack/events over HTTP instead of Socket Mode")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=None, help="HTTP port (default $PORT or 3000)")
    parser.add_argument("--metrics-port", type=int, default=9102,
                        help="serve /metrics on this port of its own (default 9102; 0: off)")
    parser.add_argument("--metrics-host", default=None,
                        help="address for --metrics-port (default $DECKHAND_METRICS_HOST, "
                             "else loopback only)")
    parser.add_argument("--public-metrics", action="store_true",
                        help="also serve /metrics on the public HTTP port")
    parser.add_argument("--max-body", type=int, default=1 << 20,
                        help="refuse request bodies above this many bytes with 413 (1 MiB)")
    parser.add_argument("--read-timeout", type=float, default=5.0,
                        help="close a request not fully received within this many seconds")
    parser.add_argument("--connection-limit", type=int, default=4096,
                        help="open HTTP connections at once (capped below the fd limit)")
    parser.add_argument("--workers", type=int, default=1,
                        help="executor workers in this process (0: use `deckhand worker`)")
    parser.add_argument("--drain-store-wait", type=float, default=DRAIN_STORE_WAIT,
                        help="when stopping with a run in hand, exit once the store has not "
                             "answered for this many seconds; the run is taken over "
                             "(default 10)")
    parser.add_argument("--single-process", action="store_true",
                        help="allow --http without REDIS_URL: an in-process store that only "
                             "this process sees (also DECKHAND_SINGLE_PROCESS=1)")
    add_config_arg(parser)
    add_log_format_arg(parser)
    parser.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace, console: Console) -> int:
    settings = Settings()
    if args.http and settings.redis_url is None and not (args.single_process
                                                         or settings.single_process):
        raise ConfigError([Problem("environment", SINGLE_PROCESS)])
    if not args.http:  # a bad app token is one line, before workers or a scheduler log any
        _check_socket_token(settings)
    # every service of the organisation: a request names its own (docs/services.md 2.7)
    services = build_services(load_org(find_config(getattr(args, "config", None))), settings)
    warn_about_redis(services.store.health)
    _warn_about_pictures(console)
    from bot.slack.runtime import BotRuntime

    runtime = BotRuntime(services, settings, workers=args.workers)
    runtime.start_workers()
    runtime.start_scheduler()
    reloads = threading.Event()
    reload_on_sighup(services, actor=f"serve {os.uname().nodename}-{os.getpid()}",
                     stop=reloads, adopt=[runtime.adopt])
    try:
        if args.http:
            _serve_http(runtime, args, settings, console)
        else:
            _serve_socket_mode(runtime, settings, console)
    finally:
        reloads.set()
        _stop(runtime, console, wait=args.drain_store_wait)
    return 0


def _stop(runtime: BotRuntime, console: Console, *, wait: float) -> None:
    """Stop serving. An embedded worker's run in hand gets what ``runtime.stop`` gives it
    (30 s), less once the store has not answered for ``wait`` seconds (``bot.cli.drain``,
    as `deckhand worker` drains), and never more: the interpreter's exit would otherwise
    wait for the run's step commands to end, however long they take."""
    if runtime.workers:
        watch_store(console, runtime.services.store.ping_primary, wait=wait, doing="stopping")
    runtime.stop()
    if runtime.workers and runtime.workers_alive():
        leave_now(console, f"stopping: the run in hand did not finish in time; exiting now "
                           f"— {TAKEN_OVER}", level=logging.WARNING)


def _warn_about_pictures(console: Console) -> None:
    """Said once at start: run timelines will not be posted (bot.charts)."""
    from bot import charts

    if (reason := charts.missing()) is not None:
        announce(console, f"no run timelines in Slack threads: {reason}", level=logging.WARNING)


def _serve_http(runtime: BotRuntime, args: argparse.Namespace, settings: Settings,
                console: Console) -> None:
    from bot.slack.http import HttpLimits

    port = args.port or settings.http_port
    limits = HttpLimits(max_body=args.max_body, read_timeout=args.read_timeout,
                        connection_limit=args.connection_limit)
    metrics_host = args.metrics_host or settings.metrics_host
    metrics = (metrics_host, args.metrics_port) if args.metrics_port else None
    server = runtime.start_http(host=args.host, port=port, limits=limits, metrics=metrics,
                                public_metrics=args.public_metrics)
    announce(console, f"deckhand listening on http://{args.host}:{port}/slack/events "
                      f"(/healthz, /readyz); store: {runtime.services.store.where}")
    if metrics:
        announce(console, f"metrics on http://{metrics_host}:{args.metrics_port}/metrics")
    problem = advertise(args.host, port, settings.health_file)  # the HEALTHCHECK's target
    if problem:
        announce(console, problem, level=logging.WARNING)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    finally:
        withdraw(settings.health_file)
    server.close()


def _check_socket_token(settings: Settings) -> None:
    """SLACK_APP_TOKEN is set and Slack accepts it (ConfigError, one line, otherwise)."""
    from bot.slack.runtime import check_app_token

    if settings.slack_app_token is None:
        raise ConfigError([Problem("environment", "set SLACK_APP_TOKEN (xapp-…) for Socket "
                                   "Mode, or run `deckhand serve --http`")])
    check_app_token(settings.slack_api_url, settings.slack_app_token.get_secret_value())


def _serve_socket_mode(runtime: BotRuntime, settings: Settings, console: Console) -> None:
    if settings.slack_app_token is None:  # checked at start; kept for other callers
        raise ConfigError([Problem("environment", "set SLACK_APP_TOKEN (xapp-…)")])
    announce(console, f"deckhand connecting over Socket Mode; store: "
                      f"{runtime.services.store.where}")
    runtime.serve_socket_mode(settings.slack_app_token.get_secret_value())
