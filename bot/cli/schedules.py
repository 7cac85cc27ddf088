"""``deckhand schedules add | list | pause | resume | remove | run | serve`` from the terminal.

The same commands as Slack's ``/deckhand schedule``: each one goes through
``bot.schedule_commands.handle_schedule_command``. ``serve`` runs the scheduler loop here.
"""

from __future__ import annotations

import argparse
import getpass
import logging
import signal
import threading
from datetime import timedelta
from typing import Any

from rich.console import Console
from rich.prompt import Confirm

from agents.engine.occurrences import Occurrence
from agents.errors import StoreError
from agents.schedules.model import utc_now
from agents.services import Services
from bot.cli.common import Commands, add_config_arg, add_service_arg, services_for
from bot.cli.history import add_json_arg
from bot.cli.json_views import schedules_json
from bot.cli.reload import reload_on_sighup
from bot.cli.run_views import print_json
from bot.logs import add_log_format_arg
from bot.schedule_commands import ScheduleReply, handle_schedule_command
from bot.scheduler import Scheduler
from bot.terminal.render import plan_table

log = logging.getLogger("deckhand.scheduler")


def register(commands: Commands) -> None:
    parser = commands.add_parser("schedules", help="recurring plans: add, list, pause, run...")
    actions = parser.add_subparsers(title="actions")
    add = _action(actions, "add", "schedule a request (each occurrence is posted for approval)")
    add.add_argument("when", help='cron ("0 2 * * mon-fri", 0 and 7 = Sunday) or readable '
                                  '("every weekday at 02:00", "every 6h")')
    add.add_argument("request", nargs="+", help='what to do, e.g. "deploy main to staging"')
    add.add_argument("--tz", help="time zone, e.g. Europe/Berlin (default $DECKHAND_TZ or UTC)")
    add.add_argument("--channel", help="Slack channel the occurrences are posted to")
    add.add_argument("--auto", action="store_true",
                     help="run without a click while the plan stays as approved now")
    add.add_argument("--yes", "-y", action="store_true", help="approve the --auto plan unasked")
    add_service_arg(add)  # the schedule's service: its occurrences plan under it
    add_json_arg(_action(actions, "list", "schedules and their next fire times"))
    for name, text in (("pause", "stop firing until resumed"), ("resume", "fire again"),
                       ("remove", "delete a schedule"), ("run", "fire an occurrence now")):
        _action(actions, name, text).add_argument("schedule_id")
    serve = _action(actions, "serve", "run the scheduler here until Ctrl-C")
    serve.add_argument("--grace", type=float, default=None,
                       help="seconds a missed occurrence may still fire "
                            "(default $DECKHAND_SCHEDULE_GRACE or 1800)")
    add_log_format_arg(serve)  # it runs for good: its log is set up by bot.cli.main
    add_config_arg(parser)  # `deckhand schedules --config X list`, as with every group
    parser.set_defaults(handler=lambda args, console: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _action(actions: Commands, name: str, text: str) -> argparse.ArgumentParser:
    parser = actions.add_parser(name, help=text)
    parser.add_argument("--user", default=getpass.getuser(), help="who is asking")
    parser.add_argument("--groups", default="", help="comma-separated groups of --user")
    add_config_arg(parser)
    parser.set_defaults(handler=_serve if name == "serve" else _command, action=name)
    return parser


def command_words(args: argparse.Namespace) -> list[str]:
    """The words ``handle_schedule_command`` takes, from parsed terminal arguments."""
    if args.action == "add":
        words = ["add", args.when, *args.request]
        for option in ("tz", "channel"):
            if getattr(args, option):
                words += [f"--{option}", getattr(args, option)]
        return words + (["--auto"] if args.auto else [])
    return [args.action, *([args.schedule_id] if hasattr(args, "schedule_id") else [])]


def _command(args: argparse.Namespace, console: Console) -> int:
    services = services_for(args)
    try:
        reply = _ask(services, args, command_words(args))
        if getattr(args, "json", False):
            print_json(schedules_json(reply.schedules or []))
            return 0 if reply.ok else 2
        if reply.confirm is not None and reply.ok:
            reply = _confirm(services, args, console, reply)
        _show(services, console, reply)
        return 0 if reply.ok else 2
    finally:
        services.close()


def _ask(services: Services, args: argparse.Namespace, words: list[str]) -> ScheduleReply:
    groups = [g for g in args.groups.split(",") if g]
    return handle_schedule_command(words, user=args.user, user_groups=groups, channel=None,
                                   services=services, now=utc_now())


def _confirm(services: Services, args: argparse.Namespace, console: Console,
             reply: ScheduleReply) -> ScheduleReply:
    """Show the --auto plan and create the schedule only once it is approved here."""
    assert reply.plan is not None and reply.confirm is not None  # noqa: S101 - set with confirm
    console.print(plan_table(reply.plan, services.targets(reply.plan)))
    console.print(reply.text, markup=False, highlight=False)
    if not args.yes and not Confirm.ask("Approve this plan for unattended runs?",
                                        console=console, default=False):
        return ScheduleReply(False, "Not approved — nothing was scheduled.")
    return _ask(services, args, reply.confirm)


def _show(services: Services, console: Console, reply: ScheduleReply) -> None:
    style = None if reply.ok else "red"
    if reply.occurrence is not None and reply.plan is not None:
        console.print(plan_table(reply.plan, services.targets(reply.plan)))
    console.print(reply.text, style=style, markup=False, highlight=False, soft_wrap=True)


def _serve(args: argparse.Namespace, console: Console) -> int:
    services = services_for(args)
    options: dict[str, Any] = {}
    if args.grace is not None:
        options["grace"] = timedelta(seconds=args.grace)
    scheduler = Scheduler.for_services(services, report=lambda o: _report(console, o),
                                       **options)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    scheduler.start()
    # occurrences plan with services.planner and services.config, which a reload swaps;
    # the schedules themselves are re-read at once too, as the 10 s sync would
    reload_on_sighup(services, actor=scheduler.name, stop=stop,
                     after=[lambda: _resync(scheduler)])
    console.print(f"scheduler {scheduler.name} on {services.store.where} with "
                  f"{len(scheduler.jobs())} schedule(s); Ctrl-C (or SIGTERM) stops; SIGHUP "
                  f"reloads the config")
    try:
        while not stop.wait(1.0):  # wake up now and then so Ctrl-C is noticed
            pass
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        scheduler.shutdown()
        services.close()
    return 0


def _resync(scheduler: Scheduler) -> None:
    """Re-read the schedules and fire what is due now, under the config now in force."""
    try:
        scheduler.tick(scheduler.clock())
    except StoreError as exc:  # Redis down: the 10 s sync catches up once it answers
        log.error("scheduler %s: %s", scheduler.name, exc)


def _report(console: Console, occurrence: Occurrence) -> None:
    console.print(occurrence.message, markup=False, highlight=False, soft_wrap=True)
