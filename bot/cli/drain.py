"""Stopping a process that holds a run: ``deckhand worker`` (SIGTERM drains) and
``deckhand serve`` with embedded workers.

Both wait for the run in hand only while the store can carry it: once it has not answered
— Redis down or hung, Sentinel with no primary, or no sentinel left to name one — for
``wait`` seconds, the process leaves at once, saying what it waited for, and another worker
takes the run over after this one's lease (``agents.readiness.watch_drain``). Leaving is
``os._exit``: unwinding would wait for the run's step threads until their commands end and
for its last writes to a store with no primary (minutes, or compose's 30 min stop grace
period). What is left is what a takeover already handles: the lease lapses, another worker
stops leftover commands and resumes or rolls back.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

from rich.console import Console

from agents.readiness import StoreProbe, watch_drain
from bot.logs import announce

DRAIN_STORE_WAIT = 10.0
TAKEN_OVER = "another worker takes the run in hand over after this one's lease"
"""What becomes of the run a process leaves (nothing, when it held none)."""


def leave_now(console: Console, message: str, *, level: int = logging.INFO) -> NoReturn:
    """Exit at once, as a crash would, but saying why (see the module's docstring)."""
    announce(console, message, level=level)
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def watch_store(console: Console, ping: Callable[[], object], *, wait: float,
                doing: str) -> None:
    """On a thread of its own: leave once the store has not answered ``ping`` for ``wait``
    seconds while ``doing`` (e.g. "draining"). Give it ``Store.ping_primary``, which asks
    Sentinel to name the primary too: the connections a process holds may still answer a
    plain ping with every sentinel down, yet no new one opens and no failover is followed."""
    def troubled(reason: str) -> None:
        announce(console, f"{doing}: the store does not answer ({reason}); waiting up to "
                          f"{wait:g} s for it, then exiting — {TAKEN_OVER}",
                 level=logging.WARNING)

    def recovered() -> None:
        announce(console, f"{doing}: the store answers again; finishing the run in hand")

    def give_up(reason: str) -> None:
        leave_now(console, f"{doing}: stopped waiting for the store ({reason}); exiting now "
                           f"— {TAKEN_OVER}", level=logging.WARNING)

    threading.Thread(target=watch_drain, args=(StoreProbe(ping),), daemon=True,
                     name="drain-watch", kwargs={"wait": wait, "give_up": give_up,
                                                 "troubled": troubled,
                                                 "recovered": recovered}).start()
