"""SIGHUP reloads the config of every long-running deckhand process — ``serve``,
``worker``, ``schedules serve``, ``mcp`` (stdio and ``--http``) and ``audit ship`` — through
one path (``agents.engine.reload``): checked first, refused if invalid (the running config
stays), audited either way. A process that does not install it would die of SIGHUP, or, with
SIGHUP ignored, go on from a config the others no longer run."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterable

from agents.engine.reload import Adopt, After, ConfigReload
from agents.services import Services

_early = threading.Event()


def hold_sighup() -> None:
    """From a long-running process's first moment (``bot.cli.main``): a SIGHUP that comes
    before its reload is set up — while the config loads, Redis or Sentinel is reached — is
    remembered and acted on once it is (``reload_on_sighup``). Without it, that SIGHUP
    would be taken for a terminal hanging up (``bot.terminal.output``), pointing the
    process's stdout and stderr — a container's log — at /dev/null for good."""
    signal.signal(signal.SIGHUP, lambda *_: _early.set())


def reload_on_sighup(services: Services, *, actor: str, stop: threading.Event,
                     adopt: Iterable[Adopt] = (), after: Iterable[After] = ()) -> ConfigReload:
    """Install the SIGHUP handler (call from the main thread); reloads run on their own
    thread until ``stop`` is set, so the signal never interrupts work half done. ``after``
    runs once each SIGHUP was handled, whether the file was applied or refused."""
    reload = ConfigReload(services, actor=actor, adopt=adopt, after=after)
    reload.start(stop)
    signal.signal(signal.SIGHUP, lambda *_: reload.request())
    if _early.is_set():  # a SIGHUP during start-up: read the file again now
        _early.clear()
        reload.request()
    return reload
