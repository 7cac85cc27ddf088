"""Prometheus gates judge every series against every bound, against a real Prometheus
scraping a loopback endpoint whose series the test sets; and a gate's deadline bounds its
HTTP calls, against a server that trickles its answer."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.prometheus import Metrics, Prometheus, expose
from tools.runners.gate import GateCommandResult, GateRunner


def _expose(scraped: tuple[Metrics, Prometheus], **series: str) -> None:
    metrics, prom = scraped
    expose(metrics, prom, **series)


def _gate(url: str, timeout: float = 10, **fields: Any) -> GateCommandResult:
    spec = {"kind": "prometheus", "url": url, "query": "ratio", "interval": 0, **fields}
    return GateRunner().run(json.dumps(spec), timeout=timeout)


def test_every_series_is_judged_against_min(scraped: tuple[Metrics, Prometheus]) -> None:
    _expose(scraped, a="1", b="0.5")
    result = _gate(scraped[1].url, min=0.99)
    assert not result.ok
    reason = result.gate.reason or ""
    assert 'series="b"} = 0.5' in reason and "below 0.99" in reason  # the worst, named
    assert sorted((s.value, s.ok) for s in result.gate.samples) == [("0.5", False), ("1", True)]
    assert all(s.query == "ratio" and s.bound == "must be ≥ 0.99" and s.at > 0
               for s in result.gate.samples)


def test_every_series_is_judged_against_max(scraped: tuple[Metrics, Prometheus]) -> None:
    _expose(scraped, a="0.9", b="0")
    result = _gate(scraped[1].url, max=0.1)
    assert not result.ok
    assert 'series="a"} = 0.9' in (result.gate.reason or "")
    _expose(scraped, a="0.05", b="0")
    passed = _gate(scraped[1].url, max=0.1, min=0, count=2)
    assert passed.ok and len(passed.gate.samples) == 4 and passed.gate.reason is None


@pytest.mark.parametrize("values", [{"a": "NaN", "b": "1"}, {"a": "1", "b": "NaN"},
                                    {"a": "1", "b": "+Inf"}, {"a": "-Inf", "b": "1"}])
def test_nan_and_inf_fail_in_any_position(scraped: tuple[Metrics, Prometheus],
                                          values: dict[str, str]) -> None:
    _expose(scraped, **values)
    result = _gate(scraped[1].url, min=0, max=2)
    bad = next(k for k, v in values.items() if v != "1")
    assert not result.ok
    reason = result.gate.reason or ""
    assert f'series="{bad}"}} = {values[bad]}' in reason
    assert "is not a measurement" in reason


class Trickle:
    """A TCP server that answers an HTTP request one byte every ``every`` seconds."""

    def __init__(self, answer: bytes, every: float):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.answer, self.every, self.stop = answer, every, threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            for byte in self.answer:
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return
                if self.stop.wait(self.every):
                    return

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


_PASSING = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
    {"metric": {}, "value": [time.time(), "0"]}]}}).encode()


@pytest.mark.parametrize("head", [b"", b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n"
                                  % len(_PASSING)], ids=["in_headers", "in_body"])
def test_a_trickling_server_fails_the_gate_at_its_deadline(head: bytes, tmp_path: Path) -> None:
    """One byte every 2 s, in the headers or in the body: the gate's 2 s deadline is the
    whole gate's, so it fails after about 2 s, saying so, with no passing sample."""
    server = Trickle(head + _PASSING if head else b"HTTP/1.1 200 OK\r\n" + b"X" * 100, 2.0)
    try:
        started = time.monotonic()
        result = _gate(server.url, timeout=2, max=1)
        took = time.monotonic() - started
    finally:
        server.close()
    assert not result.ok and result.exit_code == 1
    assert took < 3.5, f"the gate took {took:.1f}s with a 2 s deadline"
    assert "deadline exceeded" in (result.gate.reason or "")
    assert result.gate.samples == [] and "✓" not in result.tail
