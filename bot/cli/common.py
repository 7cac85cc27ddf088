"""Pieces every ``deckhand`` subcommand module shares."""

from __future__ import annotations

import argparse
import getpass
from collections.abc import Callable
from typing import TypeAlias

from rich.console import Console

from agents.config import load_config
from agents.services import Services, build_services
from agents.settings import Settings
from bot.terminal.console import Confirm

Handler = Callable[[argparse.Namespace, Console], int]
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""The subcommand registry (generic only to type checkers, hence the string)."""


def add_config_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", default=None,
                        help="config file (default: $DECKHAND_CONFIG or examples/deckhand.yml)")


def add_user_args(parser: argparse.ArgumentParser, *, who: str) -> None:
    """``--user`` and ``--confirm``: the terminal trusts its operator (see the README)."""
    parser.add_argument("--user", default=getpass.getuser(),
                        help=f"{who} (default: your login name; trusted, see README)")
    parser.add_argument("--confirm", action="append", default=[], metavar="NAME",
                        help="type NAME (an environment, or `local`) for a policy `confirm` "
                             "without a prompt; repeat for several")


def confirmer(args: argparse.Namespace) -> Confirm | None:
    """Answers from ``--confirm`` (a name not given is not confirmed), else None: ask."""
    given = list(args.confirm)
    if not given:
        return None
    return lambda word: word if word in given else ""


def services_for(args: argparse.Namespace) -> Services:
    """Services for the config named on the command line (or by the environment)."""
    settings = Settings()
    return build_services(load_config(args.config or settings.config_path), settings)
