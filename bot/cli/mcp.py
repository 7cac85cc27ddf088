"""``deckhand mcp``: deckhand's MCP server over stdio (default) or streamable HTTP (``--http``).

stdout belongs to the protocol on stdio, so everything said to the operator goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from rich.console import Console

from agents.engine.reload import Adopt
from agents.org import load_org
from agents.plan.model import Plan
from agents.run.record import Run
from agents.services import Services, build_services
from agents.settings import Settings
from bot.cli.common import Commands, add_config_arg, find_config
from bot.cli.reload import reload_on_sighup
from bot.logs import add_log_format_arg
from bot.mcp.desk import DEFAULT_PLAN_TTL, Desk, PlanPoster
from bot.terminal.border import TerminalConsole

if TYPE_CHECKING:  # the SDK loads only when `deckhand mcp` runs
    from bot.mcp.server import HttpAuth
    from bot.slack.bot import Bot


def register(commands: Commands) -> None:
    parser = commands.add_parser("mcp", help="serve deckhand's MCP tools (stdio, or --http)")
    parser.add_argument("--http", action="store_true",
                        help="streamable HTTP at /mcp; bearer tokens from DECKHAND_MCP_TOKENS")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP address (default loopback)")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--plan-ttl", type=_positive, default=DEFAULT_PLAN_TTL,
                        help="seconds a plan's hash may be requested after `plan`")
    add_config_arg(parser)
    add_log_format_arg(parser)  # stdio keeps stdout for the protocol: logs go to stderr
    parser.set_defaults(handler=_mcp)


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return value


def _mcp(args: argparse.Namespace, console: Console) -> int:
    from bot.mcp.server import build_server, serve

    settings = Settings()
    err = TerminalConsole(stderr=True)
    auth = _http_auth(settings) if args.http else None
    services = build_services(load_org(find_config(getattr(args, "config", None))), settings)
    poster, adopt = _slack_poster(services, settings)
    desk = Desk(services, poster=poster, plan_ttl=args.plan_ttl)
    server = build_server(desk, auth=auth)
    reloads = threading.Event()  # SIGHUP: the config reloaded (or refused), as serve does
    reload_on_sighup(services, actor=f"mcp {os.uname().nodename}-{os.getpid()}", stop=reloads,
                     adopt=adopt, after=[server.add_request_tool, server.refresh_services])
    _announce(err, args, desk)
    try:
        serve(server, http=(args.host, args.port) if args.http else None)
    finally:
        reloads.set()
        services.close()
    return 0


def _http_auth(settings: Settings) -> HttpAuth:
    """Fails fast (ConfigError naming DECKHAND_MCP_TOKENS) before anything starts."""
    from bot.mcp.auth import StaticTokens, parse_tokens
    from bot.mcp.server import HttpAuth

    raw = settings.mcp_tokens.get_secret_value() if settings.mcp_tokens else None
    return HttpAuth(StaticTokens(parse_tokens(raw)))


def _slack_poster(services: Services, settings: Settings
                  ) -> tuple[PlanPoster | None, list[Adopt]]:
    """The Slack bot's own plan poster when SLACK_BOT_TOKEN is set (same blocks, same meta),
    its Web API door redacting the config's secrets as the bot's does; and what a config
    reload must do to it: redact the new config's secrets as well as the old ones."""
    if settings.slack_bot_token is None:
        return None, []
    from bot.slack.app import make_client
    from bot.slack.bot import Bot, Directory
    from bot.slack.redacting import RedactingWebClient

    client = make_client(settings, services.redact)
    adopt = [lambda fresh: client.learn(fresh.redact)] \
        if isinstance(client, RedactingWebClient) else []
    return ServicePoster(Bot(services, client, Directory(client))), adopt


@dataclass(frozen=True)
class ServicePoster:
    """The Slack bot's ``post_plan`` under the plan's own service: its rules and changelog
    on the post, never another service's (the bot serves the whole organisation)."""

    bot: Bot

    def post_plan(self, plan: Plan, run: Run, *, channel: str) -> Run:
        own = self.bot.services.for_record(plan.service, what=f"plan {plan.id}")
        return replace(self.bot, services=own).post_plan(plan, run, channel=channel)


def _announce(err: Console, args: argparse.Namespace, desk: Desk) -> None:
    where = f"http://{args.host}:{args.port}/mcp" if args.http else "stdio"
    approval = "Slack" if desk.poster is not None else "`deckhand approve`"
    err.print(f"deckhand mcp on {where}; approvals in {approval}; "
              f"store: {desk.services.store.where}", markup=False, highlight=False)
    if desk.services.store.where.startswith("in-process"):
        err.print("warning: REDIS_URL is unset, so requested deploys live only in this "
                  "process and no worker or `deckhand approve` can see them",
                  style="yellow", markup=False)
