"""``deckhand hosts check [ENV]`` and ``deckhand hosts trust HOST``.

check: connect to every host (of ENV) and show reachability, host key and auth in a table.
trust: show the key a host offers and add it to known_hosts after a yes (or ``--yes``).
"""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.markup import escape
from rich.prompt import Confirm
from rich.table import Table

from bot.cli.common import Commands, add_config_arg, add_service_arg, service_config
from bot.cli.history import add_json_arg
from bot.cli.json_views import host_checks_json, hosts_json
from bot.cli.run_views import print_json
from tools.hostcheck import HostCheck, check_hosts, scan_host, trust_host
from tools.inventory import Inventory
from tools.runners.known_hosts import KeyStatus, KnownHosts


def register(commands: Commands) -> None:
    """Add the ``hosts`` command and its ``check`` and ``trust`` subcommands."""
    hosts = commands.add_parser("hosts", help="check hosts, trust host keys")
    sub = hosts.add_subparsers(title="hosts commands")
    check = sub.add_parser("check", help="reachability, host key and auth of every host")
    check.add_argument("environment", nargs="?", help="only this environment's hosts")
    check.add_argument("--timeout", type=float, default=10.0, help="seconds per host")
    add_json_arg(check)
    add_config_arg(check)
    add_service_arg(check)
    check.set_defaults(handler=_check)
    trust = sub.add_parser("trust", help="add a host's key to known_hosts after confirmation")
    trust.add_argument("host", help="host name from the inventory")
    trust.add_argument("--yes", "-y", action="store_true", help="trust without asking")
    trust.add_argument("--timeout", type=float, default=10.0)
    add_config_arg(trust)
    add_service_arg(trust)
    trust.set_defaults(handler=_trust)
    add_json_arg(hosts)
    add_config_arg(hosts)
    add_service_arg(hosts)
    hosts.set_defaults(handler=lambda args, console: _list(args) if args.json else _usage(hosts))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _inventory(args: argparse.Namespace) -> Inventory:
    return service_config(args).inventory  # one service's: their environments share names


def _list(args: argparse.Namespace) -> int:
    print_json(hosts_json(_inventory(args)))
    return 0


def _check(args: argparse.Namespace, console: Console) -> int:
    inventory = _inventory(args)
    rows = check_hosts(inventory, args.environment, timeout=args.timeout)
    if args.json:
        print_json(host_checks_json(rows))
        return 0 if all(r.ok for r in rows) else 1
    console.print(hosts_table(rows, KnownHosts(inventory.known_hosts).path))
    for row in rows:
        if row.detail:
            console.print(f"[bold]{row.host}[/]: {escape(row.detail)}", soft_wrap=True,
                          highlight=False)
    bad = [r.host for r in rows if not r.ok]
    if bad:
        console.print(f"[red]{len(bad)} of {len(rows)} host(s) not ready:[/] {', '.join(bad)}")
        return 1
    console.print(f"[green]all {len(rows)} host(s) ready[/]")
    return 0


def hosts_table(rows: list[HostCheck], known_hosts: object) -> Table:
    """One row per host: reachable, host key, auth, connect time, round trip of ``true``."""
    table = Table(title=f"hosts (known_hosts: {known_hosts})")
    for column in ("host", "target", "reachable", "host key", "auth", "connect", "rtt"):
        table.add_column(column, no_wrap=column != "target", overflow="fold")
    for row in rows:
        table.add_row(row.host, row.target, _mark(row.reachable, "yes", "no"),
                      _colour(row.host_key, ("trusted", "-")), _colour(row.auth, ("ok", "-")),
                      _ms(row.connect_ms), _ms(row.latency_ms))
    return table


def _ms(value: float | None) -> str:
    return f"{value:.0f} ms" if value is not None else ""


def _mark(ok: bool, yes: str, no: str) -> str:
    return f"[green]{yes}[/]" if ok else f"[red]{no}[/]"


def _colour(value: str, good: tuple[str, ...]) -> str:
    return f"[green]{value}[/]" if value in good else f"[red]{value}[/]"


def _trust(args: argparse.Namespace, console: Console) -> int:
    inventory = _inventory(args)
    host, key, status = scan_host(inventory, args.host, timeout=args.timeout)
    path = KnownHosts(inventory.known_hosts).path
    console.print(f"{host.label} offers [bold]{key.key_type} {key.fingerprint}[/]",
                  highlight=False, soft_wrap=True)
    if status is KeyStatus.TRUSTED:
        console.print(f"already trusted in {path}")
        return 0
    if status is KeyStatus.UNKNOWN and not _confirmed(args, console, path):
        console.print("not trusted; known_hosts unchanged")
        return 1
    trust_host(inventory, host, key)  # a changed key raises: never replaced silently
    console.print(f"[green]added[/] {escape(KnownHosts.entry_name(host))} to {path}",
                  highlight=False, soft_wrap=True)
    return 0


def _confirmed(args: argparse.Namespace, console: Console, path: object) -> bool:
    if args.yes:
        return True
    if not sys.stdin.isatty():
        console.print("[red]stdin is not a terminal: compare the fingerprint with the host's "
                      "(ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub on it), then rerun "
                      "with --yes[/]")
        return False
    return Confirm.ask(f"Compare it with the host's own (ssh-keygen -lf on the host). "
                       f"Trust it and add it to {path}?", console=console, default=False)
