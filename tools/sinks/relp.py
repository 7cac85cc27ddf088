"""A small RELP client (the Reliable Event Logging Protocol of rsyslog's ``imrelp``): each
syslog message is a numbered transaction the collector answers ``200 OK`` once it holds it.

A frame is ``TXNR SP COMMAND SP DATALEN [SP DATA] LF``. The session opens with ``open``
(offering ``relp_version=0`` and ``commands=syslog``), sends ``syslog`` frames — up to
``WINDOW`` unanswered at a time — and ends with ``close``. A message is held by the collector
only once its own ``rsp`` says 200; anything else (an error code, a ``serverclose``, a
dropped connection, a reply out of turn) raises ``RelpError`` and the caller sends the batch
again. No maintained Python RELP client exists on PyPI (``pyrelp`` wraps librelp and was last
released in 2014), hence this one.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from typing import BinaryIO

TXNR_MAX = 999_999_999
WINDOW = 64
"""Frames sent before their answers are read (librelp's own client allows 128)."""
HEADER_MAX = 32
DATA_MAX = 1 << 20
"""The longest answer taken from a collector (an open's offers are a few hundred bytes)."""
OFFERS = b"relp_version=0\nrelp_software=deckhand\ncommands=syslog"


class RelpError(Exception):
    """The collector did not confirm a message (or broke the protocol)."""


class RelpSession:
    """One open RELP session to ``target``; ``send`` returns once every message is held."""

    def __init__(self, target: tuple[str, int], *, timeout: float,
                 tls: ssl.SSLContext | None = None):
        self.target, self.timeout, self.tls = target, timeout, tls
        self._sock: socket.socket | None = None
        self._reader: BinaryIO | None = None
        self._txnr = 0

    def send(self, messages: list[bytes]) -> None:
        """Send ``messages`` and wait for each one's ``200 OK`` (opening the session first)."""
        if self._sock is None:
            self._open()
        for start in range(0, len(messages), WINDOW):
            window = messages[start:start + WINDOW]
            numbers = [self._next() for _ in window]
            self._write(b"".join(_frame(n, b"syslog", m) for n, m in zip(numbers, window,
                                                                         strict=True)))
            for number in numbers:
                self._expect(number)

    def close(self) -> None:
        """End the session politely when it is up; never raises."""
        if self._sock is None:
            return
        with contextlib.suppress(OSError):
            self._write(_frame(self._next(), b"close", b""))
        self._drop()

    def _open(self) -> None:
        sock = socket.create_connection(self.target, timeout=self.timeout)
        if self.tls is not None:
            sock = self.tls.wrap_socket(sock, server_hostname=self.target[0])
        self._sock, self._reader, self._txnr = sock, sock.makefile("rb"), 0
        try:
            self._write(_frame(self._next(), b"open", OFFERS))
            self._expect(self._txnr)
        except (OSError, RelpError):
            self._drop()
            raise

    def _expect(self, number: int) -> None:
        txnr, command, data = self._read_frame()
        if command == b"serverclose":
            raise RelpError("the collector is closing the session (serverclose)")
        if command != b"rsp" or txnr != number:
            raise RelpError(f"expected the answer to transaction {number}, got "
                            f"{command.decode(errors='replace')} {txnr}")
        status = data.split(b"\n", 1)[0].decode(errors="replace")
        if not status.startswith("200"):
            raise RelpError(f"the collector refused transaction {number}: {status[:200]}")

    def _read_frame(self) -> tuple[int, bytes, bytes]:
        txnr = _number(self._token(b" "), "TXNR")
        command = self._token(b" ")
        size_text, ended = self._token_either()
        size = _number(size_text, "DATALEN")
        if size > DATA_MAX:
            raise RelpError(f"an answer of {size} bytes is more than a RELP reply holds")
        data = b""
        if size:
            if ended != b" ":
                raise RelpError("a frame's DATALEN was not followed by its data")
            data = self._exactly(size)
            ended = self._exactly(1)
        if ended != b"\n":
            raise RelpError("a frame did not end with LF")
        return txnr, command, data

    def _token(self, end: bytes) -> bytes:
        token, found = self._token_either()
        if found != end:
            raise RelpError("a RELP frame's header is malformed")
        return token

    def _token_either(self) -> tuple[bytes, bytes]:
        """Bytes up to the next space or LF, and which of them ended it."""
        token = b""
        while len(token) <= HEADER_MAX:
            char = self._exactly(1)
            if char in (b" ", b"\n"):
                return token, char
            token += char
        raise RelpError("a RELP frame's header is too long")

    def _exactly(self, count: int) -> bytes:
        assert self._reader is not None  # noqa: S101 - only called while open
        data = self._reader.read(count)
        if data is None or len(data) < count:
            raise RelpError("the collector closed the connection before answering")
        return data

    def _write(self, data: bytes) -> None:
        assert self._sock is not None  # noqa: S101 - only called while open
        self._sock.sendall(data)

    def _next(self) -> int:
        self._txnr = self._txnr % TXNR_MAX + 1
        return self._txnr

    def _drop(self) -> None:
        for closable in (self._reader, self._sock):
            if closable is not None:
                with contextlib.suppress(OSError):
                    closable.close()
        self._sock = self._reader = None


def _frame(txnr: int, command: bytes, data: bytes) -> bytes:
    if not data:
        return b"%d %s 0\n" % (txnr, command)
    return b"%d %s %d %s\n" % (txnr, command, len(data), data)


def _number(token: bytes, what: str) -> int:
    if not token.isdigit():
        raise RelpError(f"a RELP frame's {what} is not a number: {token[:20]!r}")
    return int(token)
