"""``deckhand audit verify | export | ship``: proving what the audit stream says.

``verify`` walks the hash chain (``agents.store.chain``) and names the first broken link,
exit 1; with ``--copy FILE`` it checks a copy kept elsewhere (the sink's JSON lines, an
export) with the same link checks. ``export`` writes the entries from ``--since`` on as JSON
lines, each with its stream id, ``prev`` and ``hash``. ``ship`` sends the stream to
``audit.sink`` as it grows (``agents.engine.shipper``), or, with ``--once``, what is there.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from agents.engine.shipper import shipper_for
from agents.services import Services
from agents.store import AuditLog
from agents.store.chain import CopyReport, verify_copy
from bot.cli.common import age_seconds
from bot.cli.reload import reload_on_sighup
from bot.logs import announce
from tools.errors import DeckhandError


def verify(audit: AuditLog, console: Console) -> int:
    """0 when the chain is whole; 1 with the first broken link named."""
    report = audit.verify()
    trimmed = f", after the trimmed head {report.trimmed}" if report.trimmed else ""
    counts = (f"{report.entries} linked entries{trimmed}, {report.copies} run copies, "
              f"{report.legacy} from before the chain")
    return _verdict(console, "audit chain", report.broken, counts)


def _verdict(console: Console, what: str, broken: object | None, counts: str,
             intact: str = "") -> int:
    """Say whether ``what`` holds (0) or where it first breaks (1), with what was checked."""
    if broken is not None:
        console.print(f"{what} BROKEN at {broken} ({counts} checked before it)",
                      style="red", markup=False, highlight=False, soft_wrap=True)
        return 1
    console.print(f"{what} intact: {counts}{intact}", markup=False, highlight=False,
                  soft_wrap=True)
    return 0


def export(audit: AuditLog, since: str | None, fmt: str) -> int:
    """Every entry from ``since`` on, oldest first, as JSON lines on stdout."""
    if fmt != "jsonl":
        raise DeckhandError(f"--format {fmt}: only jsonl is supported; use --format jsonl")
    for stream_id, entry in audit.since(parse_since(since) if since else 0.0):
        sys.stdout.write(json.dumps({"stream_id": stream_id, **entry.__dict__},
                                    sort_keys=True) + "\n")
    return 0


def parse_since(text: str, *, now: float | None = None) -> float:
    """A time: ``2026-11-01``, ``2026-11-01T12:00:00+00:00`` or an age (``24h``, ``7d``)."""
    ago = age_seconds(text)
    if ago is not None:
        return (now if now is not None else time.time()) - ago
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise DeckhandError(f"--since {text!r}: give a date (2026-11-01), a time "
                          f"(2026-11-01T12:00:00Z) or an age (24h, 7d)") from None
    return moment.timestamp()


def verify_file(path: str, console: Console) -> int:
    """0 when the copy's links hold; 1 with the first broken one named."""
    report = verify_copy(_copy_lines(path))
    counts = (f"{report.entries} linked entries ({report.masked} masked by the sink), "
              f"{report.duplicates} sent twice, {report.legacy} from before the chain")
    return _verdict(console, "copy", report.broken, counts, f"; {_ends(report)}")


def _ends(report: CopyReport) -> str:
    if report.anchor is None:
        return "no linked entry"
    return (f"starts after {report.anchor[:16]}…, ends at {(report.head or '')[:16]}… "
            f"(compare with the chain in Redis)")


def _copy_lines(path: str) -> list[dict[str, Any]]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise DeckhandError(f"--copy {path}: cannot read it ({exc.strerror or exc})") from exc
    lines = []
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            lines.append(dict(json.loads(raw)))
        except (ValueError, TypeError):
            raise DeckhandError(f"--copy {path}: line {number} is not a JSON object; give "
                                f"the sink's or `audit export`'s JSON lines") from None
    return lines


def ship(args: argparse.Namespace, services: Services, console: Console) -> int:
    """Ship the audit stream to ``audit.sink``: until SIGTERM/Ctrl-C, or once (``--once``)."""
    name = args.name or f"{socket.gethostname()}:ship"
    shipper = shipper_for(services, owner=name)
    if shipper is None:
        raise DeckhandError("no audit sink is configured: add `audit: {sink: {webhook: "
                            "{url: ...}}}` (or `syslog:`) to the config")
    stop = threading.Event()
    if args.once:
        count = shipper.drain(stop)
        announce(console, f"shipped {count} audit entries to {shipper.sink.describe()}; "
                          f"{services.store.feed.lag()} waiting")
        return 0
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    reload_on_sighup(services, actor=name, stop=stop)  # as every long-running process
    announce(console, f"shipping the audit stream to {shipper.sink.describe()} as {name}; "
                      f"Ctrl-C (or SIGTERM) stops")
    shipper.serve(stop)
    return 0


def handle(args: argparse.Namespace, services: Services, console: Console) -> int:
    if args.what == "verify":
        return (verify_file(args.copy, console) if args.copy
                else verify(services.store.audit, console))
    if args.what == "ship":
        return ship(args, services, console)
    return export(services.store.audit, args.since, args.format)
