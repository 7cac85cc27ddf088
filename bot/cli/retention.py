"""``deckhand retention``: export old finished runs and audit entries (and, when configured,
old deploys) to the archive, then trim them from Redis; ``--dry-run`` only counts."""

from __future__ import annotations

import argparse
import getpass
import os
import socket
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from agents.config import Config
from agents.engine.retention import (
    BATCH,
    LEASE,
    Retention,
    RetentionReport,
    holder_text,
    run_exclusively,
)
from agents.errors import RetentionError, StoreError
from agents.history.retention import parse_age
from agents.settings import Settings
from agents.store import Store
from bot.cli.common import Commands, add_config_arg, config_for
from tools.errors import ConfigNotFound


def register(commands: Commands) -> None:
    parser = commands.add_parser(
        "retention", help="export finished runs and audit entries older than N days to a "
                          "JSONL file, then trim them from Redis")
    parser.add_argument("--dry-run", action="store_true",
                        help="count what would be exported and trimmed; change nothing")
    parser.add_argument("--older-than", metavar="AGE",
                        help="90d, 36h or 2w (default: the config's retention.days)")
    parser.add_argument("--export", type=Path, metavar="PATH",
                        help="JSONL file to append to (default: the config's retention.export)")
    parser.add_argument("--batch", type=int, default=BATCH,
                        help=f"runs exported and deleted per transaction (default {BATCH})")
    add_config_arg(parser)
    parser.set_defaults(handler=_retention)


def _retention(args: argparse.Namespace, console: Console) -> int:
    url = Settings().redis_url
    if url is None:
        raise StoreError("set REDIS_URL to the Redis to trim (an in-process store keeps "
                         "no history)")
    if args.batch < 1:
        raise RetentionError("--batch must be at least 1")
    config = _config(args)
    store = Store.connect(url.get_secret_value())
    retention = Retention.configured(
        store, config.retention if config else None,
        history_days=config.history.retention_days if config else None,
        sink=config is None or config.audit.sink is not None,  # no config: fail closed
        older_than=parse_age(args.older_than) if args.older_than else None,
        export=args.export, batch=args.batch, dry_run=args.dry_run)
    if args.dry_run:
        report: RetentionReport | None = retention.run(dry_run=True)
    else:
        owner = f"{getpass.getuser()}@{socket.gethostname()}-{os.getpid()}"
        report = run_exclusively(retention, locks=store.locks, audit=store.audit, owner=owner)
    if report is None:
        raise RetentionError(f"retention is already running ({holder_text(store.locks)}); try "
                             f"again when it ends (a process that died holds it for at most "
                             f"{LEASE:g} s)")
    console.print(report_table(report))
    return 0


def _config(args: argparse.Namespace) -> Config | None:
    """The config, for its defaults; optional when --older-than and --export say it all."""
    try:
        return config_for(args)
    except ConfigNotFound:
        if getattr(args, "config", None) or args.older_than is None or (args.export is None
                                                                        and not args.dry_run):
            raise
        return None


def report_table(report: RetentionReport) -> Table:
    verb = "would be exported and trimmed" if report.dry_run else "exported, then trimmed"
    table = Table("record", verb, title=_title(report), title_justify="left")
    statuses = ", ".join(f"{status} {count:,}" for status, count in sorted(report.runs.items()))
    table.add_row("finished runs", f"{sum(report.runs.values()):,}"
                  + (f" ({statuses})" if statuses else ""))
    table.add_row("  their plan versions", f"{report.plans:,}")
    table.add_row("audit entries", f"{report.audit:,}" + (
        " (older ones the audit sink has not shipped yet are kept)" if report.held_for_sink
        else ""))
    table.add_row("deploys", f"{report.deploys:,}" if report.history_cutoff is not None
                  else "kept (history.retention_days is not set)")
    table.add_row("old runs not finished", f"{len(report.unfinished):,} kept")
    if not report.dry_run:
        table.add_row("lines written", f"{report.lines:,}")
    return table


def _title(report: RetentionReport) -> str:
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(report.cutoff))
    mode = "dry run, nothing changed" if report.dry_run else (
        "complete" if report.complete else "stopped early; run again")
    export = report.export or "none (a dry run writes nothing)"
    return f"Retention ({mode}): older than {when}; export: {export}"
