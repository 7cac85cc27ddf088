"""Terminal output that can never stop a run: a closed pipe (`deckhand run … | tee log`
whose tee died with the Ctrl-C), a terminal that went away, or a SIGHUP from a dropped SSH
session. What deckhand prints is for the operator; what it does (a rollback under way) must
finish whether or not anyone can read it.

One door: ``guard_output()`` at the CLI's start wraps stdout and stderr. The first write
that fails (EPIPE, EIO, a closed file) points that file descriptor at /dev/null — so later
writes, the interpreter's last flush and child processes sharing it all succeed — and is
logged once. SIGHUP does the same to both, and the process carries on.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import IO, Any, TextIO

log = logging.getLogger("deckhand.terminal")

_silenced: set[int] = set()
_lock = threading.Lock()


class GuardedStream:
    """A text stream whose write and flush failures silence it instead of raising."""

    def __init__(self, stream: TextIO, name: str):
        self._stream, self._name = stream, name

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except (OSError, ValueError) as exc:
            self._silence(exc)
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except (OSError, ValueError) as exc:
            self._silence(exc)

    def isatty(self) -> bool:
        try:
            return self._stream.isatty()
        except (OSError, ValueError):
            return False

    def __getattr__(self, name: str) -> Any:  # fileno, encoding, errors, …
        return getattr(self._stream, name)

    def _silence(self, exc: BaseException) -> None:
        silence(self._stream, f"{self._name} failed ({exc.__class__.__name__}: {exc})")


def silence(stream: IO[str], why: str) -> None:
    """Point ``stream``'s file descriptor at /dev/null (once), and log why."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError):
        return
    with _lock:
        if fd in _silenced:
            return
        _silenced.add(fd)
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)
    # to the log, which may still reach a file or the other stream; never raises
    log.warning("%s: output there is dropped from now on; the run carries on", why)


def guard_output() -> None:
    """Wrap stdout and stderr, ignore SIGPIPE (a write then fails with EPIPE, handled
    above), and make SIGHUP silence the terminal instead of ending the process."""
    if not isinstance(sys.stdout, GuardedStream) and sys.stdout is not None:
        sys.stdout = GuardedStream(sys.stdout, "stdout")
    if not isinstance(sys.stderr, GuardedStream) and sys.stderr is not None:
        sys.stderr = GuardedStream(sys.stderr, "stderr")
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, _hung_up)


def _hung_up(signum: int, frame: object) -> None:
    for stream in (sys.__stdout__, sys.__stderr__):
        if stream is not None:
            silence(stream, "the terminal hung up (SIGHUP)")
