"""The RELP client against a collector that answers as told (what rsyslogd will not do on
demand): a refused message, a ``serverclose`` and a connection dropped before the answer
all fail the batch (SinkError, sent again whole); the next send opens a new session."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from typing import BinaryIO

import pytest

from tools.errors import SinkError
from tools.sinks.syslog import Syslog, SyslogSettings

Answer = Callable[[int, bytes], bytes | None]
"""(txnr, message) -> the reply frame to send, or None to drop the connection."""


def ok(txnr: int, _: bytes) -> bytes | None:
    return b"%d rsp 6 200 OK\n" % txnr


class Collector:
    """Reads RELP frames on loopback; answers ``open`` with 200 and each ``syslog`` frame
    as ``answer`` says; keeps what it confirmed."""

    def __init__(self, answer: Answer):
        self.answer, self.sessions = answer, 0
        self.held: list[bytes] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.sessions += 1
            with conn, conn.makefile("rb") as reader:
                self._session(conn, reader)

    def _session(self, conn: socket.socket, reader: BinaryIO) -> None:
        while header := _header(reader):
            txnr, command, data = header
            if command == b"open":
                conn.sendall(b"%d rsp 22 200 OK\ncommands=syslog\n" % txnr)
            elif command == b"close":
                conn.sendall(b"%d rsp 0\n" % txnr)
                return
            else:
                reply = self.answer(txnr, data)
                if reply is None:
                    return
                if b" 200 OK" in reply:
                    self.held.append(data)
                conn.sendall(reply)


def _header(reader: BinaryIO) -> tuple[int, bytes, bytes] | None:
    line = b""
    read = reader.read
    while (char := read(1)) not in (b"", b" "):
        line += char
    if not line:
        return None
    command = b""
    while (char := read(1)) != b" ":
        command += char
    size = b""
    while (char := read(1)) not in (b" ", b"\n"):
        size += char
    data = read(int(size)) if int(size) else b""
    if int(size):
        read(1)
    return int(line), command, data


@pytest.fixture
def collector(request: pytest.FixtureRequest) -> Iterator[Collector]:
    found = Collector(request.param)
    yield found
    found.server.close()


def sink(collector: Collector) -> Syslog:
    return Syslog(SyslogSettings(address=f"relp://127.0.0.1:{collector.port}", timeout=5))


@pytest.mark.parametrize("collector", [ok], indirect=True)
def test_every_message_is_confirmed_on_one_session(collector: Collector) -> None:
    relp = sink(collector)
    relp.send([f'{{"n":{n}}}' for n in range(150)])  # more than one window
    relp.send(['{"n":150}'])
    relp.close()
    assert len(collector.held) == 151 and collector.sessions == 1
    assert collector.held[0].endswith(b' audit - {"n":0}')


def refuse_third(txnr: int, _: bytes) -> bytes | None:
    return b"%d rsp 14 500 queue full\n" % txnr if txnr == 4 else ok(txnr, b"")


def close_at_third(txnr: int, _: bytes) -> bytes | None:
    return b"0 serverclose 0\n" if txnr == 4 else ok(txnr, b"")


def drop_at_third(txnr: int, _: bytes) -> bytes | None:
    return None if txnr == 4 else ok(txnr, b"")


@pytest.mark.parametrize(("collector", "said"), [
    (refuse_third, "the collector refused transaction 4: 500 queue full"),
    (close_at_third, "the collector is closing the session (serverclose)"),
    (drop_at_third, "the collector closed the connection before answering"),
], indirect=["collector"])
def test_a_message_not_confirmed_fails_the_batch_and_the_next_send_reopens(
        collector: Collector, said: str) -> None:
    relp = sink(collector)
    with pytest.raises(SinkError, match="the batch is sent again") as failed:
        relp.send([f"m{n}" for n in range(5)])
    assert said in str(failed.value)
    collector.answer = ok
    relp.send(["again"])
    assert collector.sessions == 2  # a fresh session; the shipper sends the batch again
