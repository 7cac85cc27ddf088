"""``deckhand lock ENV --reason … [--for 2h | --until TIME]`` and ``deckhand unlock ENV``:
an environment held by a person (agents.engine.manual_locking); refused plans and approvals
there name the holder, the reason and since when."""

from __future__ import annotations

import argparse
import getpass

from rich.console import Console

from agents.engine.manual_locking import LockAsked, lock, parse_expiry, unlock
from bot.cli.common import Commands, add_config_arg, embedded_store_note, services_for


def register(commands: Commands) -> None:
    taken = commands.add_parser("lock", help="lock an environment by hand: new plans and "
                                             "approvals there are refused until unlocked")
    taken.add_argument("environment")
    taken.add_argument("--reason", required=True, help="why: every refusal shows it")
    taken.add_argument("--for", dest="for_", metavar="DURATION",
                       help="lapse after this long (30m, 2h, 1h30m, 1d)")
    taken.add_argument("--until", metavar="TIME",
                       help="lapse at this time (ISO 8601, UTC unless it says: 2026-12-01T18:00Z)")
    _add_user(taken, who="who holds the lock")
    add_config_arg(taken)
    taken.set_defaults(handler=_lock)

    lifted = commands.add_parser("unlock", help="lift a lock taken by hand (its holder, or "
                                                "anyone who may approve there)")
    lifted.add_argument("environment")
    _add_user(lifted, who="who lifts the lock")
    add_config_arg(lifted)
    lifted.set_defaults(handler=_unlock)


def _add_user(parser: argparse.ArgumentParser, *, who: str) -> None:
    parser.add_argument("--user", default=getpass.getuser(),
                        help=f"{who} (default: your login name; trusted, see docs/start.md)")


def _lock(args: argparse.Namespace, console: Console) -> int:
    embedded_store_note()
    services = services_for(args)
    until = parse_expiry(for_=args.for_, until=args.until, now=services.clock())
    said = lock(services, LockAsked(args.environment, args.reason, until), user=args.user,
                face="cli")
    console.print(said, markup=False, highlight=False)
    return 0


def _unlock(args: argparse.Namespace, console: Console) -> int:
    embedded_store_note()
    services = services_for(args)
    said = unlock(services, args.environment, user=args.user, face="cli")
    console.print(said, markup=False, highlight=False)
    return 0
