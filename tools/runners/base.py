"""The one interface every runner (local subprocess, SSH) implements, and its helpers."""

from __future__ import annotations

import codecs
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

OutputSink = Callable[[str], None]
"""Receives each complete line of output (without its newline) as it arrives."""
class LinesSink(Protocol):
    """An OutputSink that can also take the lines of one chunk at once (``feed_many``):
    a flood of output then costs one call per chunk, not one per line."""

    def __call__(self, line: str) -> None: ...

    def feed_many(self, lines: list[str]) -> None: ...


PidSink = Callable[[int], "str | None"]
"""The start gate: learns the command's process group before the command runs; returns
None to let it run, or why it must not (it then never runs: CommandRefused)."""

GO, NO = b"go\n", b"no\n"
"""What a gated wrapper reads on stdin before it runs the command (see GATE)."""
GATE = ('IFS= read -r __deckhand_go; [ "$__deckhand_go" = go ] || exit 125; '
        'exec </dev/null; ')
"""sh that waits for GO and otherwise exits without running anything; stdin is /dev/null
for the command itself, as without a gate."""

TAIL_BYTES = 8192
MAX_LINE = 65536
"""Longer lines reach the sink in pieces of this many characters (memory stays bounded)."""


@dataclass(frozen=True)
class CommandResult:
    """How one command ended. ``exit_code`` is None when it was killed."""

    exit_code: int | None
    tail: str
    duration: float
    timed_out: bool = False
    cancelled: bool = False
    output_held_open: bool = False
    """Timed out after the command itself had ended: something it started in the background
    kept its output open (a daemon not started with ``>/dev/null 2>&1 &``)."""
    unconfirmed_kill: str | None = None
    """Timed out or cancelled, but the kill could not be confirmed (why): the command may
    still be running on the host."""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.cancelled


class CancelToken:
    """A cancellation flag that also runs callbacks, so a waiting runner can kill its process.

    Callbacks added after cancellation run at once. Tokens can be chained: cancelling a
    parent cancels its children.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self.reason = ""

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self, reason: str = "cancelled") -> None:
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run ``callback`` on cancellation; returns a function that unregisters it."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return lambda: self._remove(callback)
        callback()
        return lambda: None

    def child(self) -> CancelToken:
        token = CancelToken()
        self.on_cancel(lambda: token.cancel(self.reason))
        return token

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True if cancelled meanwhile (used for retry backoff)."""
        return self._event.wait(seconds)

    def _remove(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)


class OutputCollector:
    """Turns raw output chunks into lines for a sink and keeps a bounded tail.

    Thread-safe: stdout and stderr readers may feed it at the same time.
    """

    def __init__(self, sink: OutputSink | None, tail_bytes: int = TAIL_BYTES):
        self._sink = sink
        self._many: Callable[[list[str]], None] | None = getattr(sink, "feed_many", None)
        self._tail: deque[str] = deque()
        self._tail_len = 0
        self._tail_bytes = tail_bytes
        self._partial: dict[str, list[str]] = {}
        self._partial_len: dict[str, int] = {}
        self._decoders: dict[str, codecs.IncrementalDecoder] = {}
        self._lock = threading.Lock()

    def feed(self, chunk: bytes, stream: str = "stdout") -> None:
        with self._lock:
            text = self._decoder(stream).decode(chunk)
            self._remember(text)
            lines = self._lines(stream, text)
        self._emit(lines)

    def close(self) -> None:
        with self._lock:
            rest = ["".join(p) for p in self._partial.values() if p]
            self._partial.clear()
            self._partial_len.clear()
        self._emit(rest)

    def _decoder(self, stream: str) -> codecs.IncrementalDecoder:
        """One per stream, so a character split across two chunks decodes whole."""
        if stream not in self._decoders:
            self._decoders[stream] = codecs.getincrementaldecoder("utf-8")(errors="replace")
        return self._decoders[stream]

    def _lines(self, stream: str, text: str) -> list[str]:
        """Complete lines in ``text`` (joined to what came before); the rest is kept.

        Linear in the output: pieces of an unfinished line are kept in a list, not
        re-concatenated per chunk, and a line longer than ``MAX_LINE`` is passed on in
        pieces of that size rather than held without bound.
        """
        parts = self._partial.setdefault(stream, [])
        pieces = text.split("\n")
        lines: list[str] = []
        if len(pieces) > 1:
            lines = ["".join([*parts, pieces[0]]), *pieces[1:-1]]
            parts.clear()
            self._partial_len[stream] = 0
        if pieces[-1]:
            parts.append(pieces[-1])
            self._partial_len[stream] = self._partial_len.get(stream, 0) + len(pieces[-1])
        if self._partial_len.get(stream, 0) >= MAX_LINE:
            lines.append("".join(parts))
            parts.clear()
            self._partial_len[stream] = 0
        if max(map(len, lines), default=0) <= MAX_LINE:  # the usual case, at C speed
            return lines
        return [line[i:i + MAX_LINE] for line in lines
                for i in range(0, max(len(line), 1), MAX_LINE)]

    def tail(self) -> str:
        with self._lock:
            text = "".join(self._tail)
        return text[-self._tail_bytes:]

    def _remember(self, text: str) -> None:
        self._tail.append(text)
        self._tail_len += len(text)
        while self._tail_len - len(self._tail[0]) >= self._tail_bytes:
            self._tail_len -= len(self._tail.popleft())

    def _emit(self, lines: list[str]) -> None:
        if self._sink is None or not lines:
            return
        lines = [line.rstrip("\r") for line in lines]
        if self._many is not None:
            self._many(lines)
            return
        for line in lines:
            self._sink(line)


class Runner(Protocol):
    """Runs one shell command on one host."""

    def run(self, command: str, *, timeout: float, on_output: OutputSink | None = None,
            cancel: CancelToken | None = None, on_start: PidSink | None = None) -> CommandResult:
        """Run ``command`` to completion, its deadline, or cancellation.

        Never raises for a command that ran and failed; raises RunnerError when the
        command could not be run at all (host unreachable, auth refused...). ``on_start``
        learns the command's process-group id before the command runs, so whoever takes a
        run over can stop what is left of it (``kill_group``); the command waits for its
        answer, and does not run at all if it names a reason (CommandRefused).
        """
        ...

    def kill_group(self, pid: int) -> None:
        """Stop process group ``pid`` on the host (SIGTERM, then SIGKILL after a grace);
        RunnerError unless the group is confirmed gone."""
        ...

    def check_ready(self) -> None:
        """Raise RunnerError unless a command could start now (reachable, key and login
        accepted); cheap, and what it opens is reused by the commands that follow."""
        ...
