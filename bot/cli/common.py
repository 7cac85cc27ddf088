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
from agents.errors import ServiceNotChosen, WhichService
from agents.ids import short_id
from agents.org import Org, load_org
from agents.requests.services import Picked
from agents.run.record import Run
from agents.services import Services, build_services
from agents.settings import Settings
from agents.store.local_server import find_binary, no_server_reason
from bot.logs import json_logging
from bot.terminal.border import TerminalConsole
from bot.terminal.console import Confirm, ask_service
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


def started_org(args: argparse.Namespace) -> Org:
    """The organisation of the command line's ``--config`` (or the discovered one), as a
    start loads it: without the playbook checks (``check`` and a reload run them) and with
    the config cache in the state directory (docs/services.md section 4)."""
    return load_org(find_config(getattr(args, "config", None)), playbooks=False, cache=True)


def config_for(args: argparse.Namespace) -> Config:
    """The loaded config for the command line's ``--config`` (or the discovered one): its
    one service (ManyServices, one line, for a config of several: Slack and MCP serve one
    until their multi-service support lands)."""
    return started_org(args).only()


def service_config(args: argparse.Namespace) -> Config:
    """The config of the service ``--service`` (or $DECKHAND_SERVICE) names, else of the
    only one: ServiceNotChosen or WhichService, listing them, when neither says which."""
    org = started_org(args)
    name, given_by = given_service(args)
    known = sorted(org.services)
    if name is None and len(known) > 1:
        raise WhichService(known)
    config = org.services.get(name) if name is not None else org.only()
    if config is None:
        raise ServiceNotChosen(f"{given_by} names unknown service {name!r}; known services: "
                               f"{', '.join(known)}")
    return config


def add_service_arg(parser: argparse.ArgumentParser) -> None:
    """``--service NAME``: which service of the organisation (default $DECKHAND_SERVICE;
    a request that names one needs neither). Absent unless given, like ``--config``."""
    parser.add_argument("--service", default=argparse.SUPPRESS, metavar="NAME",
                        help="the service to act on when the config has several (default: "
                             "$DECKHAND_SERVICE; a request may name it: `deploy api v1`)")


def given_service(args: argparse.Namespace) -> tuple[str | None, str]:
    """The service named by ``--service``, else $DECKHAND_SERVICE (or None), and by which
    (lowercased: service names are)."""
    flag = getattr(args, "service", None)
    if flag:
        return flag.strip().lower(), "--service"
    return (Settings().service or "").strip().lower() or None, "DECKHAND_SERVICE"


def run_services(args: argparse.Namespace) -> tuple[Services, Org]:
    """For a command about a stored run, which names its own service: the organisation's
    store and clock (over its legacy, else first, service), and the org, whose
    ``service_of(run.service)`` gives the rules the run is judged by, never another's."""
    org = started_org(args)
    base = org.services.get(org.legacy or "") or next(iter(org.services.values()))
    return build_services(base, Settings()), org


def split_scope(org: Org, words: list[str | None]) -> tuple[list[str], str | None]:
    """A read command's ``[SERVICE] [ENV]``: (the services meant, in config order, and the
    environment or None). The first word is a service if it names one (service and
    environment names never collide under ``services:``); with two words, the first must.
    DeckhandError, naming the services, otherwise."""
    given = [w for w in words if w]
    named = org.index.names.get(given[0].lower()) if given else None
    if named is not None and (org.split or len(given) == 2
                              or given[0] not in org.services[named].inventory.environments):
        return [named], (given[1] if len(given) == 2 else None)
    if len(given) == 2:
        raise DeckhandError(f"{given[0]!r} is not a service of {org.path.name} (known: "
                            f"{', '.join(org.services)}); give SERVICE ENVIRONMENT, or "
                            f"one environment")
    return list(org.services), (given[0] if given else None)



def read_scope(args: argparse.Namespace, org: Org) -> tuple[list[str], str | None]:
    """``split_scope`` of ``args.first``/``args.second``, narrowed to ``--service`` or
    $DECKHAND_SERVICE when given (ServiceNotChosen when it is unknown, or another service
    than the one named)."""
    names, environment = split_scope(org, [args.first, getattr(args, "second", None)])
    flag, given_by = given_service(args)
    if flag is None:
        return names, environment
    if flag not in org.services:
        raise ServiceNotChosen(f"{given_by} names unknown service {flag!r}; known services: "
                               f"{', '.join(org.services)}")
    if len(names) == 1 and names[0] != flag and org.split:
        raise ServiceNotChosen(f"{given_by} says {flag}, the command line {names[0]}: "
                               f"name one")
    return [flag], environment

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
    """Services for every service of the config named on the command line (or by the
    environment), focused on ``--service``/$DECKHAND_SERVICE if given: a command that
    needs one service and has none to choose fails listing them (WhichService)."""
    org = started_org(args)
    name, given_by = given_service(args)
    if name is not None and name not in org.services:
        known = ", ".join(sorted(org.services))
        raise ServiceNotChosen(f"{given_by} names unknown service {name!r}; known services: "
                               f"{known}")
    services = build_services(org, Settings())
    return services.focus(name) if name is not None else services


def service_for_request(services: Services, request: str, args: argparse.Namespace,
                        console: Console, *, ask: bool) -> tuple[Services, Picked]:
    """``services`` focused on the service ``request`` names, else ``--service`` or
    $DECKHAND_SERVICE, else the only one; with several and none named, the terminal asks
    (``ask``) with the list. Raised before anything is planned: ServiceNotChosen, and
    WhichService when nobody answers."""
    name, given_by = given_service(args)
    try:
        return services.for_request(request, given=name, given_by=given_by)
    except WhichService as which:
        chosen = ask_service(console, which.names) if ask else None
        if chosen is None:
            raise
        return services.for_request(request, given=chosen, given_by="your answer")


def service_of_run(services: Services, run: Run) -> Services:
    """``services`` focused on ``run``'s own service; refused when ``--service`` (or
    $DECKHAND_SERVICE) named another: an approval meant for one service never lands on
    another's run."""
    own = services.for_run(run)
    if services.current is not None and own.current != services.current:
        raise ServiceNotChosen(f"run {short_id(run.id)} is service {own.current}'s, not "
                               f"{services.current}'s (as --service or DECKHAND_SERVICE "
                               f"says): check the run id")
    return own


def embedded_store_note() -> None:
    """Say so (on stderr) when this command's store will be in-process (no REDIS_URL, and
    no server can run), judged from the settings alone (``in_process_note`` once the store
    says why)."""
    settings = Settings()
    if settings.redis_url is None:
        in_process_note(no_server_reason(find_binary(settings.redis_server),
                                         mode=settings.embedded_store))


def in_process_note(reason: str | None) -> None:
    """The store is in-process for ``reason`` (None: it is not): it dies with this process."""
    if reason is None:
        return
    text = (f"this command's store is in-process, so it lives only for this one process: "
            f"{reason}. It sees no earlier command's runs or history, nor runs from `serve` or "
            "`worker`; of `deckhand run`'s only what it kept in its state directory (`runs "
            "show RUN`). Or start Redis and set REDIS_URL (e.g. export "
            "REDIS_URL=redis://localhost:6379/0) for every deckhand process.")
    if json_logging():  # `audit ship --log-format json`: a log line like every other
        logging.getLogger("deckhand").warning(text)
        return
    TerminalConsole(stderr=True).print("[yellow]note:[/] " + escape(text), soft_wrap=True,
                                       highlight=False)
