"""Single keys that steer a run while ``deckhand run``'s live table shows it: ``p`` pause,
``r`` resume, ``s`` stop (after a y/N), each through ``agents.engine.control.steer`` — the
door every face uses, with its permission check and audit (``via: terminal``).

Only when stdin and the console are both a terminal: the terminal is in cbreak mode (keys
arrive one at a time, unechoed; Ctrl-C still interrupts) only while the table runs, and
its mode is put back however the table ends. One thread reads the keys, waiting in
``select`` on stdin and on a pipe that wakes it to stop.

A go/no-go hold asks its question with a line prompt (``GoNoGoPrompt``): the reader stands
aside for it (``TerminalKeys.aside``: reader stopped, terminal mode restored), so only
one reader ever owns stdin, and ``r`` never means both "resume" and "roll back".

Ctrl-Z (SIGTSTP) stands aside the same way before the process stops, so the shell gets its
terminal back as it was; ``fg`` (SIGCONT) puts the keys back. The run goes on meanwhile in
the worker thread: a stopped deckhand process stops its run too, as with any job.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import termios
import threading
import tty
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

from rich.console import Console

from agents.engine.control import Control
from agents.engine.desk import RunDesk
from agents.ids import short_id
from agents.services import Services
from tools.errors import DeckhandError

HINT = "p pause · r resume · s stop · Ctrl-C cancel"
"""The live table's line saying which keys do what."""

KEYS = {"p": Control.PAUSE, "r": Control.RESUME, "s": Control.STOP}


class _Reader:
    """One reading thread over ``fd`` in cbreak mode; ``stop`` ends it and restores the mode."""

    def __init__(self, fd: int, on_key: Callable[[str], None]):
        self.fd, self.on_key = fd, on_key
        self.saved = termios.tcgetattr(fd)
        tty.setcbreak(fd, termios.TCSANOW)
        self.wake_r, self.wake_w = os.pipe()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="terminal-keys", daemon=True)
        self.thread.start()

    def next_key(self) -> str | None:
        """The next key typed, or None once stopping (or at end of input)."""
        ready, _, _ = select.select([self.fd, self.wake_r], [], [])
        if self.wake_r in ready or self.stopping.is_set():
            return None
        data = os.read(self.fd, 1)
        return data.decode("latin-1") if data else None

    def _loop(self) -> None:
        while (key := self.next_key()) is not None:
            self.on_key(key)

    def stop(self) -> None:
        self.stopping.set()
        os.write(self.wake_w, b"x")
        if threading.current_thread() is not self.thread:
            self.thread.join()
        os.close(self.wake_r)
        os.close(self.wake_w)
        with contextlib.suppress(termios.error, OSError):  # the terminal hung up: none left
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)


class TerminalKeys:
    """Keys from the terminal ``fd`` go to ``on_key`` while entered (see the module)."""

    def __init__(self, fd: int, on_key: Callable[[str], None]):
        self.fd, self.on_key = fd, on_key
        self._lock = threading.RLock()  # re-entered by the SIGTSTP handler on this thread
        self._reader: _Reader | None = None
        self._entered = False
        self._aside = 0
        self._previous_tstp: Any = None

    def __enter__(self) -> TerminalKeys:
        # the handler first: once the keys are read (and their hint shown), a Ctrl-Z must
        # find it, or the stop would leave the terminal in cbreak mode
        if threading.current_thread() is threading.main_thread():  # where signals land
            self._previous_tstp = signal.signal(signal.SIGTSTP, self._suspend)
        with self._lock:
            self._entered = True
            self._start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Stop reading and put the terminal's mode back (idempotent)."""
        with self._lock:
            self._entered = False
            self._stop()
        if self._previous_tstp is not None:
            signal.signal(signal.SIGTSTP, self._previous_tstp)
            self._previous_tstp = None

    def _suspend(self, signum: int, frame: Any) -> None:
        """Ctrl-Z: the terminal's own mode back, then stop as the default would; on SIGCONT
        (``fg``) the keys are read again."""
        with self.aside():
            signal.signal(signal.SIGTSTP, signal.SIG_DFL)
            try:
                os.kill(os.getpid(), signal.SIGTSTP)  # stops here until continued
            finally:
                signal.signal(signal.SIGTSTP, self._suspend)

    @contextlib.contextmanager
    def aside(self) -> Iterator[None]:
        """Stand aside for a line prompt: no reader, the terminal in its own mode."""
        with self._lock:
            self._aside += 1
            self._stop()
        try:
            yield
        finally:
            with self._lock:
                self._aside -= 1
                self._start()

    def next_key(self) -> str | None:
        """For ``on_key`` (on the reader's thread): the next key, None once stopping."""
        reader = self._reader
        return reader.next_key() if reader is not None else None

    def _start(self) -> None:
        if self._entered and not self._aside and self._reader is None:
            self._reader = _Reader(self.fd, self.on_key)

    def _stop(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.stop()


class KeySteering:
    """What each key does to ``run_id``: ``steer`` as ``user`` via the terminal, and one line
    saying what came of it (a refusal included)."""

    def __init__(self, services: Services, console: Console, run_id: str, *, user: str):
        self.services, self.console, self.run_id, self.user = services, console, run_id, user
        self.keys: TerminalKeys | None = None

    def __call__(self, key: str) -> None:
        control = KEYS.get(key)
        if control is None:
            return
        if control is Control.STOP and not self._stop_confirmed():
            self._say("Not stopped.")
            return
        try:
            RunDesk(self.services).control(control, self.run_id, user=self.user,
                                           via="terminal")
        except DeckhandError as exc:  # refused (audited by steer), or the store failed
            self._say(f"{control.value} refused: {exc}")
            return
        self._say(SAID[control].format(run=short_id(self.run_id)))

    def _stop_confirmed(self) -> bool:
        """Ask y/N first, as Slack's Stop does; only ``y`` stops."""
        self._say(f"Stop run {short_id(self.run_id)}? Running commands are killed and the "
                  f"rollback runs. [y/N]")
        return self.keys is not None and self.keys.next_key() in ("y", "Y")

    def _say(self, line: str) -> None:
        with contextlib.suppress(OSError):  # no one to read it: the run goes on
            self.console.print(line, markup=False, highlight=False)


SAID = {Control.PAUSE: "run {run}: pausing — what runs finishes, nothing new starts until "
                       "you press r",
        Control.RESUME: "run {run}: resumed",
        Control.STOP: "run {run}: stopping — running commands are killed, then rollback runs"}


def terminal_keys(services: Services, console: Console, run_id: str, *,
                  user: str) -> TerminalKeys | None:
    """Keys for ``run_id`` if stdin and ``console`` are a terminal, else None (piped)."""
    if not console.is_terminal or not sys.stdin.isatty():
        return None
    steering = KeySteering(services, console, run_id, user=user)
    steering.keys = TerminalKeys(sys.stdin.fileno(), steering)
    return steering.keys
