"""``deckhand audit verify | export | ship | checkpoint``: proving what the stream says.

``verify`` walks the hash chain (``agents.store.chain``) and its signed checkpoints
(``agents.store.checkpoints``) and names the first broken link, exit 1; with ``--copy FILE``
it checks a copy kept elsewhere (the sink's JSON lines, an export) with the same link checks,
a line at a time. ``export`` writes the entries from ``--since`` on as JSON lines, each with
its stream id, ``prev`` and ``hash``, a page at a time. ``ship`` sends the stream to
``audit.sink`` as it grows (``agents.engine.shipper``), or, with ``--once``, what is there.
``checkpoint`` signs the chain's head with the key ``DECKHAND_AUDIT_KEY_FILE`` names.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console

from agents.engine.shipper import shipper_for
from agents.services import Services
from agents.store import AuditLog
from agents.store.chain import CopyReport, verify_copy
from agents.store.checkpoints import AuditKey, Seals, signing_key
from bot.cli.common import age_seconds
from bot.cli.reload import reload_on_sighup
from bot.logs import announce
from tools.errors import DeckhandError


def verify(audit: AuditLog, console: Console, *, key: AuditKey | None, grace: float,
           full: bool = False) -> int:
    """0 when the chain is whole and signed; 1 with the first broken link named. With a key,
    only what came after the last verified checkpoint is walked, unless ``full``."""
    report, seals = audit.verify_signed(key=key, grace=grace, full=full)
    trimmed = f", after the trimmed head {report.trimmed}" if report.trimmed else ""
    copies = (f"{report.copies} run copies" if report.resumed is None else
              "run copies not checked (--full checks them)")
    since = (f" after the checkpoint verified before ({report.resumed})" if report.resumed
             else "")
    counts = (f"{report.entries} linked entries{since}{trimmed}, {copies}, "
              f"{report.legacy} from before the chain")
    return _verdict(console, "audit chain", report.broken, counts, f"; {seals.summary()}")


def checkpoint(audit: AuditLog, console: Console, key: AuditKey | None, actor: str) -> int:
    """Sign the chain's head now (one ``audit_checkpoint`` entry)."""
    if key is None:
        raise DeckhandError("no audit key: set DECKHAND_AUDIT_KEY_FILE to a file holding a "
                            "secret kept outside Redis (`openssl rand -hex 32 > FILE`)")
    audit.checkpoint(key, actor=actor)
    announce(console, f"signed the audit chain's head with key {key.id}")
    return 0


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


def verify_file(path: str, console: Console, key: AuditKey | None) -> int:
    """0 when the copy's links and checkpoints hold; 1 with the first broken one named.
    Reads a line at a time: memory stays bounded however long the copy."""
    seals = Seals(key)
    with _opened(path) as stream:
        report = verify_copy(_copy_lines(path, stream), seals=seals)
    counts = (f"{report.entries} linked entries ({report.masked} masked by the sink), "
              f"{report.duplicates} sent twice, {report.legacy} from before the chain")
    return _verdict(console, "copy", report.broken, counts,
                    f"; {_ends(report)}; {seals.summary()}")


def _ends(report: CopyReport) -> str:
    if report.anchor is None:
        return "no linked entry"
    return (f"starts after {report.anchor[:16]}…, ends at {(report.head or '')[:16]}… "
            f"(compare with the chain in Redis)")


@contextlib.contextmanager
def _opened(path: str) -> Iterator[TextIO]:
    if path == "-":
        yield sys.stdin
        return
    try:
        stream = Path(path).open(encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise DeckhandError(f"--copy {path}: cannot read it ({exc.strerror or exc})") from exc
    with stream:
        yield stream


def _copy_lines(path: str, stream: TextIO) -> Iterator[dict[str, Any]]:
    try:
        for number, raw in enumerate(stream, 1):
            if raw.strip():
                yield _object(path, number, raw)
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else exc
        raise DeckhandError(f"--copy {path}: cannot read it ({reason})") from exc


def _object(path: str, number: int, raw: str) -> dict[str, Any]:
    try:
        found = json.loads(raw)
    except ValueError:
        found = None
    if not isinstance(found, dict):
        raise DeckhandError(f"--copy {path}: line {number} is not a JSON object; give "
                            f"the sink's or `audit export`'s JSON lines")
    return found


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
    key = signing_key(services.settings.audit_key)
    if args.what == "verify":
        grace = 2 * services.config.audit.checkpoint_every
        return (verify_file(args.copy, console, key) if args.copy
                else verify(services.store.audit, console, key=key, grace=grace,
                            full=args.full))
    if args.what == "checkpoint":
        actor = f"{getpass.getuser()}@{socket.gethostname()}"
        return checkpoint(services.store.audit, console, key, actor)
    if args.what == "ship":
        return ship(args, services, console)
    return export(services.store.audit, args.since, args.format)
