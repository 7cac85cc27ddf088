"""``deckhand pause | resume | stop (cancel) RUN``: steer a running run from the terminal.

The same door as Slack's buttons and MCP's tools (``agents.engine.control``): the requester
and the run's approvers may; anyone else is refused in one line (exit 3), audited with
``via: cli``. ``--user`` is trusted, as for ``deckhand approve`` (see docs/start.md).
"""

from __future__ import annotations

import argparse
import getpass

from rich.console import Console

from agents.engine.control import Control
from agents.engine.desk import RunDesk
from agents.errors import AlreadyStopping
from agents.ids import short_id
from agents.run.record import Run
from bot.cli.common import (
    Commands,
    Handler,
    add_config_arg,
    add_service_arg,
    embedded_store_note,
    service_of_run,
    services_for,
)
from bot.terminal.console import ExitCode

HELP = {Control.PAUSE: "hold a running run before its next step or batch",
        Control.RESUME: "let a paused run carry on",
        Control.STOP: "stop a run: kill what runs, roll back what changed"}


def register(commands: Commands) -> None:
    for control, text in HELP.items():
        # ``cancel`` is the name a stop always had: the same door, the same check
        aliases = ["cancel"] if control is Control.STOP else []
        parser = commands.add_parser(control.value, aliases=aliases, help=text)
        parser.add_argument("run_id")
        parser.add_argument("--user", default=getpass.getuser(),
                            help="who asks (default: your login name; trusted, see docs/start.md)")
        add_config_arg(parser)
        add_service_arg(parser)
        parser.set_defaults(handler=_handler(control))


def _handler(control: Control) -> Handler:
    def handle(args: argparse.Namespace, console: Console) -> int:
        embedded_store_note()
        services = services_for(args)
        store = services.store
        found = store.runs.find(args.run_id)
        services, run_id = service_of_run(services, found), found.id  # its own rules
        try:
            run = RunDesk(services).control(control, run_id, user=args.user, via="cli")
        except AlreadyStopping as exc:  # the first Stop won: said (exit 3), not as a refusal
            console.print(f"run {short_id(run_id)}: already stopping (stopped by "
                          f"{exc.by}) — its worker kills what runs and rolls back; this "
                          f"stop changed nothing", highlight=False, markup=False)
            return ExitCode.REFUSED
        console.print(_said(control, run), highlight=False)
        return 0
    return handle


def _said(control: Control, run: Run) -> str:
    name = f"run {short_id(run.id)}"
    if control is Control.PAUSE:
        return (f"{name}: pausing — running commands finish, nothing new starts until "
                f"`deckhand resume {short_id(run.id)}`")
    if control is Control.RESUME:
        return f"{name}: resumed — its worker carries on within a second"
    if run.status.terminal:
        return f"{name}: {run.status.value}"
    return f"{name}: stopping — its worker kills what runs and rolls back"
