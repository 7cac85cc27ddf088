"""``deckhand audit verify | export``: proving what the audit stream says.

``verify`` walks the hash chain (``agents.store.chain``) and names the first broken link,
exit 1; ``export`` writes the entries from ``--since`` on as JSON lines, each with its stream
id, ``prev`` and ``hash``, so a copy kept elsewhere can be compared with the chain.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from datetime import datetime

from rich.console import Console

from agents.store import Store
from tools.errors import DeckhandError

AGO = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def verify(store: Store, console: Console) -> int:
    """0 when the chain is whole; 1 with the first broken link named."""
    report = store.audit.verify()
    trimmed = f", after the trimmed head {report.trimmed}" if report.trimmed else ""
    counts = (f"{report.entries} linked entries{trimmed}, {report.copies} run copies, "
              f"{report.legacy} from before the chain")
    if report.broken is not None:
        console.print(f"audit chain BROKEN at {report.broken} ({counts} checked before it)",
                      style="red", markup=False, highlight=False, soft_wrap=True)
        return 1
    console.print(f"audit chain intact: {counts}", markup=False, highlight=False,
                  soft_wrap=True)
    return 0


def export(store: Store, since: str | None, fmt: str) -> int:
    """Every entry from ``since`` on, oldest first, as JSON lines on stdout."""
    if fmt != "jsonl":
        raise DeckhandError(f"--format {fmt}: only jsonl is supported; use --format jsonl")
    for stream_id, entry in store.audit.since(parse_since(since) if since else 0.0):
        sys.stdout.write(json.dumps({"stream_id": stream_id, **entry.__dict__},
                                    sort_keys=True) + "\n")
    return 0


def parse_since(text: str, *, now: float | None = None) -> float:
    """A time: ``2026-11-01``, ``2026-11-01T12:00:00+00:00`` or an age (``24h``, ``7d``)."""
    found = AGO.match(text.strip())
    if found:
        return (now if now is not None else time.time()) - float(found[1]) * SECONDS[found[2]]
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise DeckhandError(f"--since {text!r}: give a date (2026-11-01), a time "
                          f"(2026-11-01T12:00:00Z) or an age (24h, 7d)") from None
    return moment.timestamp()


def handle(args: argparse.Namespace, store: Store, console: Console) -> int:
    if args.what == "verify":
        return verify(store, console)
    return export(store, args.since, args.format)
