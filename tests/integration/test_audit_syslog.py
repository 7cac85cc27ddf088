"""The syslog sink against a real collector (Debian's rsyslogd on loopback), stopped and
started again while entries are being written and shipped: over RELP (every message
answered) and over plain TCP (the collector's clean close is the receipt), nothing is lost,
repeats carry the same stream id and hash, and the collector's copy verifies."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from agents.store import Store
from agents.store.chain import verify_copy
from tests.fixtures.polling import wait_until
from tests.fixtures.rsyslog import Rsyslog
from tests.integration.test_audit_sink import _ship, once, sink_config, stream_keys

TOTAL = 600


def _writer(store: Store, written: list[int], done: threading.Event) -> threading.Thread:
    def write() -> None:
        for n in range(TOTAL):
            store.audit.record("step_finished", actor=f"w{n % 3}", run_id=f"run-{n // 5}",
                               step=str(n))
            written[0] = n + 1
        done.set()
    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("scheme", ["relp", "tcp"])
def test_a_collector_restarted_mid_stream_loses_nothing(
        scheme: str, store: Store, rsyslog: Rsyslog, redis_url: str, tmp_path: Path) -> None:
    config = sink_config(tmp_path, f'syslog: {{address: "{rsyslog.address(scheme)}"}}',
                         batch=20)
    err = tmp_path / "ship.err"
    shipper = _ship(config, redis_url, err)
    written, done = [0], threading.Event()
    try:
        writer = _writer(store, written, done)
        wait_until(lambda: len(rsyslog.lines()) >= 100, timeout=60,
                   what="the first entries at the collector")
        rsyslog.stop()  # mid-stream: the shipper is sending, the writer writing
        stopped_at = written[0]
        wait_until(lambda: "audit sink: syslog" in err.read_text(), timeout=30,
                   what="the shipper to notice the collector is gone")
        wait_until(lambda: written[0] >= min(stopped_at + 100, TOTAL), timeout=60,
                   what="entries written while the collector is down")
        rsyslog.start()
        writer.join(60)
        assert done.is_set()
        keys = stream_keys(store)
        wait_until(lambda: len(once(rsyslog.lines())) >= TOTAL, timeout=60,
                   what=f"all {TOTAL} entries at the collector")
        wait_until(lambda: store.feed.lag() == 0, timeout=30, what="the lag to reach 0")
    finally:
        shipper.terminate()
        shipper.wait(10)
    lines = rsyslog.lines()
    assert once(lines) == keys  # every entry, in stream order, none lost
    report = verify_copy(lines)
    assert report.ok, report.broken
    assert report.entries == TOTAL and report.duplicates == len(lines) - TOTAL
