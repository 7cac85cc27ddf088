"""``deckhand judge RUN continue|rollback``: the go/no-go a rollout holds for between batches."""

from __future__ import annotations

import argparse
import getpass

from rich.console import Console
from rich.markup import escape

from agents.engine.desk import RunDesk
from agents.ids import short_id
from agents.run.record import Verdict
from bot.cli.common import (
    Commands,
    add_config_arg,
    add_service_arg,
    embedded_store_note,
    service_of_run,
    services_for,
)


def register(commands: Commands) -> None:
    judge = commands.add_parser(
        "judge", help="decide the go/no-go a run waits at between rollout batches (as --user)")
    judge.add_argument("run_id")
    judge.add_argument("decision", choices=[v.value for v in Verdict],
                       help="continue: start the next batch; rollback: undo the hosts changed")
    judge.add_argument("--user", default=getpass.getuser(),
                       help="who decides (default: your login name; trusted, see docs/start.md)")
    add_config_arg(judge)
    add_service_arg(judge)
    judge.set_defaults(handler=_judge)


def _judge(args: argparse.Namespace, console: Console) -> int:
    """ApprovalRefused (one line, audited) when the user may not decide it."""
    embedded_store_note()
    services = services_for(args)
    store = services.store
    user = args.user
    found = store.runs.find(args.run_id)
    services = service_of_run(services, found)  # the run's own rules
    run, held = RunDesk(services).judge(found.id, Verdict(args.decision), user=user, via="cli")
    what = "continues with the next batch" if args.decision == Verdict.CONTINUE else \
        "rolls back the hosts it changed"
    console.print(f"run {short_id(run.id)}: go/no-go {escape(held.where())} decided by "
                  f"{escape(user)} — it {what}")
    return 0

