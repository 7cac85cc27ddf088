"""SIGHUP reloads the config of ``deckhand serve`` and ``deckhand worker``
(``agents.engine.reload``): checked first, refused if invalid, audited either way."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterable

from agents.engine.reload import Adopt, ConfigReload
from agents.services import Services


def reload_on_sighup(services: Services, *, actor: str, stop: threading.Event,
                     adopt: Iterable[Adopt] = ()) -> ConfigReload:
    """Install the SIGHUP handler (call from the main thread); reloads run on their own
    thread until ``stop`` is set, so the signal never interrupts work half done."""
    reload = ConfigReload(services, actor=actor, adopt=adopt)
    reload.start(stop)
    signal.signal(signal.SIGHUP, lambda *_: reload.request())
    return reload
