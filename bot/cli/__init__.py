"""``deckhand`` command line: demo, run, plan, check (and more, registered by other modules).

Errors deckhand raises on purpose are printed as one clear message (exit 2); anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console

from agents.config import load_config
from agents.plan_yaml import plan_to_yaml
from agents.runs import Run, RunStatus
from agents.settings import Settings
from bot.cli.common import Commands, Handler, add_config_arg, services_for
from bot.cli.health import report_redis
from bot.telemetry import configure_tracing
from bot.telemetry import shutdown as shutdown_tracing
from bot.terminal.console import ConsoleFlow
from bot.terminal.render import plan_table
from tools.errors import ConfigError, DeckhandError


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    console = Console()
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    configure_tracing()
    try:
        return handler(args, console)
    except ConfigError as exc:
        _error(console, str(exc))
        return 2
    except DeckhandError as exc:
        _error(console, f"error: {exc}")
        return 2
    except KeyboardInterrupt:  # at a prompt: nothing was started, nothing to undo
        _error(console, "interrupted")
        return 130
    finally:
        shutdown_tracing()


def _error(console: Console, message: str) -> None:
    console.print(message, style="red", markup=False, highlight=False, soft_wrap=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="deckhand", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(title="commands")
    _add_demo(commands)
    _add_run(commands)
    _add_plan(commands)
    _add_check(commands)
    for register in _extra_commands():
        register(commands)
    return parser


def _extra_commands() -> list[Callable[[Commands], None]]:
    """Subcommands that live next to what they drive (hosts, store, Slack, schedules)."""
    from bot.cli import history, hosts, mcp, runs, schedules, serve

    return [runs.register, history.register, hosts.register, serve.register, schedules.register,
            mcp.register]


def _add_demo(commands: Commands) -> None:
    parser = commands.add_parser("demo", help="deploy the sample app twice (no servers needed)")
    parser.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace, console: Console) -> int:
    from bot.cli.demo import run_demo

    return run_demo(console)


def _add_run(commands: Commands) -> None:
    parser = commands.add_parser("run", help="plan a request, approve it here, and run it")
    parser.add_argument("request", help='what to do, e.g. "deploy v2.3.1"')
    parser.add_argument("--yes", "-y", action="store_true", help="approve without asking")
    parser.add_argument("--user", default=getpass.getuser(), help="who is asking")
    parser.add_argument("--dry-run", action="store_true",
                        help="run each step's check only: no approval, nothing changes")
    parser.add_argument("--break-glass", metavar="REASON",
                        help="go ahead during a freeze; needs one more approval "
                             "(policy.break_glass)")
    add_config_arg(parser)
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace, console: Console) -> int:
    services = services_for(args)
    flow = ConsoleFlow(services, console, user=args.user)
    run: Run | None
    try:
        if args.dry_run:
            run = flow.dry_run(args.request)
        else:
            run = flow.handle(args.request, yes=args.yes, break_glass=args.break_glass)
    finally:
        services.close()
    return 0 if run is None or run.status is RunStatus.SUCCEEDED else 1


def _add_plan(commands: Commands) -> None:
    parser = commands.add_parser("plan", help="show the plan for a request without running it")
    parser.add_argument("request")
    parser.add_argument("--format", choices=["table", "yaml", "json"], default="table")
    add_config_arg(parser)
    parser.set_defaults(handler=_plan)


def _plan(args: argparse.Namespace, console: Console) -> int:
    services = services_for(args)
    plan = services.make_plan(args.request, requested_by=getpass.getuser())
    if args.format == "json":
        sys.stdout.write(json.dumps(plan.model_dump(mode="json"), indent=2) + "\n")
    elif args.format == "yaml":
        sys.stdout.write(plan_to_yaml(plan))
    else:
        console.print(plan_table(plan))
    return 0


def _add_check(commands: Commands) -> None:
    parser = commands.add_parser("check", help="validate a config file and list every problem; "
                                 "with REDIS_URL, check that Redis keeps records; --store: "
                                 "verify the live store's invariants")
    parser.add_argument("config", type=Path, nargs="?")
    parser.add_argument("--store", action="store_true",
                        help="check the store's invariants instead, naming each bad key")
    parser.add_argument("--repair", action="store_true",
                        help="with --store: fix what is safe to fix (never deletes a record)")
    parser.set_defaults(handler=_check)


def _check(args: argparse.Namespace, console: Console) -> int:
    if args.store:
        from bot.cli.store_check import check_store

        return check_store(args, console)
    if args.config is None:
        _error(console, "usage: deckhand check CONFIG | deckhand check --store [--repair]")
        return 2
    config = load_config(args.config)
    console.print(f"[green]{args.config} is valid:[/] {len(config.catalog.tools)} tools, "
                  f"{len(config.inventory.hosts)} hosts, "
                  f"{len(config.inventory.environments)} environments, "
                  f"{len(config.playbooks)} playbooks")
    return report_redis(console, Settings())

