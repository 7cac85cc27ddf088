"""``deckhand serve``: the Slack bot (Socket Mode by default, or HTTP) with embedded workers."""

from __future__ import annotations

import argparse
import contextlib
import signal
import threading
from typing import TYPE_CHECKING

from rich.console import Console

from agents.config import load_config
from agents.services import build_services
from agents.settings import Settings
from bot.cli.common import Commands, add_config_arg
from bot.cli.health import warn_about_redis
from bot.logs import add_log_format_arg, configure_logging
from tools.errors import ConfigError, Problem

if TYPE_CHECKING:  # the Slack stack loads only when `serve` runs, not for every command
    from bot.slack.runtime import BotRuntime


def register(commands: Commands) -> None:
    parser = commands.add_parser("serve", help="run the Slack bot (Socket Mode, or --http)")
    parser.add_argument("--http", action="store_true",
                        help="serve /slack/events over HTTP instead of Socket Mode")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=None, help="HTTP port (default $PORT or 3000)")
    parser.add_argument("--workers", type=int, default=1,
                        help="executor workers in this process (0: use `deckhand worker`)")
    add_config_arg(parser)
    add_log_format_arg(parser)
    parser.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace, console: Console) -> int:
    settings = Settings()
    configure_logging(args.log_format or settings.log_format)
    services = build_services(load_config(args.config or settings.config_path), settings)
    warn_about_redis(services.store)
    from bot.slack.runtime import BotRuntime

    runtime = BotRuntime(services, settings, workers=args.workers)
    runtime.start_workers()
    runtime.start_scheduler()
    try:
        if args.http:
            _serve_http(runtime, args, settings, console)
        else:
            _serve_socket_mode(runtime, settings, console)
    finally:
        runtime.stop()
    return 0


def _serve_http(runtime: BotRuntime, args: argparse.Namespace, settings: Settings,
                console: Console) -> None:
    port = args.port or settings.http_port
    server = runtime.start_http(host=args.host, port=port)
    console.print(f"deckhand listening on http://{args.host}:{port}/slack/events "
                  f"(/healthz, /readyz); store: {runtime.services.store.where}")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    server.close()


def _serve_socket_mode(runtime: BotRuntime, settings: Settings, console: Console) -> None:
    if settings.slack_app_token is None:
        raise ConfigError([Problem("environment", "set SLACK_APP_TOKEN (xapp-…) for Socket "
                                   "Mode, or run `deckhand serve --http`")])
    console.print(f"deckhand connecting over Socket Mode; store: {runtime.services.store.where}")
    runtime.serve_socket_mode(settings.slack_app_token.get_secret_value())
