"""Pieces every ``deckhand`` subcommand module shares."""

from __future__ import annotations

import argparse
import getpass
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeAlias

from rich.console import Console
from rich.markup import escape

from agents.config import Config
from agents.org import Org, load_org
from agents.services import Services, build_services
from agents.settings import Settings
from bot.logs import json_logging
from bot.terminal.border import TerminalConsole
from bot.terminal.console import Confirm
from tools.errors import ConfigNotFound, DeckhandError

Handler = Callable[[argparse.Namespace, Console], int]
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""The subcommand registry (generic only to type checkers, hence the string)."""

AGE = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def age_seconds(text: str) -> float | None:
    """The seconds in an age such as ``30d``, ``12h``, ``2w`` (s, m, h, d, w); None if
    ``text`` is not one."""
    found = AGE.match(text.strip())
    return float(found[1]) * AGE_UNITS[found[2]] if found else None


DEFAULT_NAME = "deckhand.yml"


def add_config_arg(parser: argparse.ArgumentParser) -> None:
    """``--config``/``-c``. Absent unless given (SUPPRESS), so a subcommand's own option
    never blanks one given before it (``deckhand hosts --config X check``)."""
    parser.add_argument("--config", "-c", default=argparse.SUPPRESS,
                        help="config file (default: $DECKHAND_CONFIG, else ./deckhand.yml)")


def add_param_arg(parser: argparse.ArgumentParser) -> None:
    """``-e KEY=VALUE``: set a parameter explicitly instead of relying on a phrasing."""
    parser.add_argument("-e", "--set", action="append", default=[], metavar="KEY=VALUE",
                        help="set a parameter explicitly (repeat for several), e.g. "
                             "-e version=v1.0.3; a request that is a playbook's name picks it")


def add_limit_arg(parser: argparse.ArgumentParser) -> None:
    """``--limit HOST|GROUP[,…]``: narrow the run to some hosts, within policy."""
    parser.add_argument("--limit", "-l", metavar="HOST|GROUP", default="",
                        help="run only on these hosts, groups or environments (comma-"
                             "separated); never skips a step, policy unchanged")


def find_config(explicit: str | None) -> Path:
    """The config file to use: ``--config``, then ``$DECKHAND_CONFIG``, then ./deckhand.yml.

    Never a path relative to where deckhand is installed: running from another directory
    must not silently pick up (or fail on) a checkout's sample. When nothing is found the
    error lists every place looked at and how to create one.
    """
    if explicit:
        return Path(explicit)
    from_env = Settings().config_path
    if from_env:
        return Path(from_env)
    local = Path.cwd() / DEFAULT_NAME
    if local.is_file():
        return local
    raise ConfigNotFound("no config file found. Looked at:\n"
                         "  --config            not given\n"
                         "  $DECKHAND_CONFIG    not set\n"
                         f"  {local}    no such file\n"
                         "Create one here with `deckhand init`, or pass --config PATH.")


def given_config(positional: Path | None, flag: str | Path | None) -> Path:
    """The config a command takes positionally or with ``--config`` (either, or both when
    they agree), else the discovered one; a DeckhandError when they name two files."""
    if positional is not None and flag is not None and Path(positional) != Path(flag):
        raise DeckhandError(f"two configs given ({positional} and --config {flag}); give one")
    given = positional if positional is not None else flag
    return find_config(str(given) if given is not None else None)


def config_for(args: argparse.Namespace) -> Config:
    """The loaded config for the command line's ``--config`` (or the discovered one): its
    one service (ManyServices, one line, for a config of several: the faces serve one
    until multi-service support lands)."""
    return load_org(find_config(getattr(args, "config", None)), playbooks=False,
                    cache=True).only()


def run_services(args: argparse.Namespace) -> tuple[Services, Org]:
    """For a command about a stored run, which names its own service: the organisation's
    store and clock (over its legacy, else first, service), and the org, whose
    ``service_of(run.service)`` gives the rules the run is judged by, never another's."""
    org = load_org(find_config(getattr(args, "config", None)), playbooks=False, cache=True)
    base = org.services.get(org.legacy or "") or next(iter(org.services.values()))
    return build_services(base, Settings()), org


def add_user_args(parser: argparse.ArgumentParser, *, who: str) -> None:
    """``--user`` and ``--confirm``: the terminal trusts its operator (see docs/start.md)."""
    parser.add_argument("--user", default=getpass.getuser(),
                        help=f"{who} (default: your login name; trusted, see docs/start.md)")
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
    return build_services(config_for(args), Settings())


def embedded_store_note() -> None:
    """Say so (on stderr) when the store is the in-process one: it dies with this process."""
    if Settings().redis_url is not None:
        return
    text = ("REDIS_URL is not set, so this command uses an embedded store that lives only for "
            "this one process — it cannot see runs from `serve` or `worker`, and of `deckhand "
            "run`'s only what it kept in its state directory (`runs show RUN`). "
            "To share one store, start Redis and set REDIS_URL (e.g. export "
            "REDIS_URL=redis://localhost:6379/0) for every deckhand process.")
    if json_logging():  # `audit ship --log-format json`: a log line like every other
        logging.getLogger("deckhand").warning(text)
        return
    TerminalConsole(stderr=True).print("[yellow]note:[/] " + escape(text), soft_wrap=True,
                                       highlight=False)
