"""Pacing SSH connection setup: how many at once, and retrying the ones a server dropped.

sshd serves only so many connections that have not logged in yet (MaxStartups, 10:30:100 by
default: from 10 on it drops 30 % of new ones, from 100 on all of them). A rollout that
opens hundreds of connections at once behind one sshd or bastion loses hosts to "Error
reading SSH protocol banner". So a setup (dial, handshake, host key, login) runs in a slot:
at most ``max_handshakes`` in all — which also bounds this process's handshake CPU — and
``max_handshakes_per_server`` to one sshd. A setup the server dropped before login
(``SSHSetupDropped``) is retried with exponential backoff and jitter, outside the slot.
Nothing else is retried here: not a refused login, not a host key, never a command.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from tools.errors import SSHSetupDropped
from tools.inventory import SSHSettings

log = logging.getLogger("deckhand.ssh")

T = TypeVar("T")


@dataclass
class SetupStats:
    """Connection setups since the pool was made (read by metrics and the bench)."""

    connections: int = 0
    """Setups that succeeded."""
    attempts: int = 0
    retries: int = 0
    """Attempts the server dropped and that were tried again."""
    failures: int = 0
    """Hosts given up on: every attempt was dropped."""


class HandshakePacer:
    """Slots for connection setups, shared by every runner of a pool. Thread-safe.

    A setup that needs another one first (a jump host that must reconnect, from inside a
    slot) runs in the slot its thread already holds, so slots can never deadlock.
    """

    def __init__(self, settings: SSHSettings | None = None, *,
                 sleep: Callable[[float], None] = time.sleep,
                 rng: random.Random | None = None):
        self.settings = settings or SSHSettings()
        self.stats = SetupStats()
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._total = threading.BoundedSemaphore(self.settings.max_handshakes)
        self._servers: dict[str, threading.BoundedSemaphore] = {}
        self._lock = threading.Lock()
        self._held = threading.local()

    def open(self, server: str, setup: Callable[[], T]) -> T:
        """Run ``setup`` in a slot for ``server``; retry it while the server drops it.

        Raises what ``setup`` raised; once every attempt was dropped, SSHSetupDropped
        saying how many attempts were made.
        """
        attempts = self.settings.connect_attempts
        for attempt in range(1, attempts + 1):
            try:
                with self._slot(server):
                    self._count("attempts")
                    result = setup()
            except SSHSetupDropped as exc:
                if attempt == attempts:
                    self._count("failures")
                    raise SSHSetupDropped(f"{exc} (gave up after {attempts} attempts)") \
                        from exc
                self._count("retries")
                delay = self.backoff(attempt)
                log.info("%s dropped the connection during setup (attempt %d of %d); "
                         "retrying in %.2fs: %s", server, attempt, attempts, delay, exc)
                self._sleep(delay)
                continue
            self._count("connections")
            return result
        raise AssertionError("unreachable: the last attempt returns or raises")

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after failed ``attempt``: doubling from ``retry_backoff``, half of
        it random, so hosts dropped together do not come back together."""
        step = self.settings.retry_backoff * 2.0 ** (attempt - 1)
        return step / 2 + self._rng.uniform(0, step / 2)

    @contextmanager
    def _slot(self, server: str) -> Iterator[None]:
        if getattr(self._held, "depth", 0):
            yield  # a setup inside a setup (a jump host reconnecting): same slot
            return
        # Per server first: a thread waiting for a busy server holds no slot of the total.
        with self._server(server), self._total:
            self._held.depth = 1
            try:
                yield
            finally:
                self._held.depth = 0

    def _server(self, server: str) -> threading.BoundedSemaphore:
        with self._lock:
            slots = self._servers.get(server)
            if slots is None:
                limit = self.settings.max_handshakes_per_server
                slots = self._servers[server] = threading.BoundedSemaphore(limit)
            return slots

    def _count(self, name: str) -> None:
        with self._lock:
            setattr(self.stats, name, getattr(self.stats, name) + 1)
