"""Pieces every ``deckhand`` subcommand module shares."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeAlias

from rich.console import Console

from agents.config import load_config
from agents.services import Services, build_services
from agents.settings import Settings

Handler = Callable[[argparse.Namespace, Console], int]
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""The subcommand registry (generic only to type checkers, hence the string)."""


def add_config_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", default=None,
                        help="config file (default: $DECKHAND_CONFIG or examples/deckhand.yml)")


def services_for(args: argparse.Namespace) -> Services:
    """Services for the config named on the command line (or by the environment)."""
    settings = Settings()
    return build_services(load_config(args.config or settings.config_path), settings)
