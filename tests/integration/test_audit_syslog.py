"""The syslog sink against a real collector (Debian's rsyslogd on loopback), stopped and
started again while entries are being written and shipped: over RELP (every message
answered) and over plain TCP (the collector's clean close is the receipt), nothing is lost,
repeats carry the same stream id and hash, and the collector's copy verifies. RELP over
TLS delivers to a collector whose certificate verifies, and sends nothing to one that does
not."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from agents.config import load_config
from agents.engine.shipper import shipper_for, start_in_thread
from agents.services import build_services
from agents.store import Store
from agents.store.chain import verify_copy
from bot.cli import main
from tests.fixtures.polling import wait_until
from tests.fixtures.rsyslog import Rsyslog, write_certificates
from tests.integration.test_audit_sink import (
    keys_of,
    once,
    sink_config,
    stream_keys,
    write_entries,
)
from tools.errors import SinkError
from tools.sinks import Sink
from tools.sinks.syslog import Syslog, SyslogSettings

TOTAL = 800


class Noticing:
    """The shipper's sink, as it is, noting each batch it failed to deliver."""

    def __init__(self, sink: Sink, failures: list[str]):
        self.sink, self.failures = sink, failures
        self.secrets = sink.secrets

    def send(self, lines: list[str]) -> None:
        try:
            self.sink.send(lines)
        except SinkError as exc:
            self.failures.append(str(exc))
            raise

    def describe(self) -> str:
        return self.sink.describe()


@pytest.mark.parametrize("scheme", ["relp", "tcp"])
def test_a_collector_restarted_mid_stream_loses_nothing(
        scheme: str, store: Store, rsyslog: Rsyslog, tmp_path: Path) -> None:
    """Stopped (SIGTERM) while the shipper streams a backlog flat out, written to while it
    is down, started again; then frozen with a batch sent to it and killed (a crash: what it
    had not read is gone), started again. Only a receipt tells the shipper to send again."""
    config = sink_config(tmp_path, f'syslog: {{address: "{rsyslog.address(scheme)}"}}',
                         batch=20)
    write_entries(store, TOTAL)
    shipper = shipper_for(build_services(load_config(config), store=store), owner="t")
    assert shipper is not None
    stop, failures = threading.Event(), list[str]()
    shipper.sink = Noticing(shipper.sink, failures)
    thread = start_in_thread(shipper, stop)
    try:
        wait_until(lambda: rsyslog.count() >= TOTAL // 4, timeout=60,
                   what="the first entries at the collector")
        rsyslog.stop()  # mid-stream
        wait_until(lambda: failures, timeout=30, what="the shipper to notice it is gone")
        write_entries(store, 40, start=TOTAL)  # while it is down
        rsyslog.start()
        _all_arrived(rsyslog, store, TOTAL + 40)

        rsyslog.freeze()  # a batch in flight when it crashes: sent, never read
        store.commit([store.audit.write("step_finished", actor="w", step=str(n))
                      for n in range(10)])  # one batch: all of it read at once
        wait_until(lambda: _read_by_shipper(store), timeout=30, what="the batch to be sent")
        rsyslog.kill()
        rsyslog.start()
        _all_arrived(rsyslog, store, TOTAL + 50)
    finally:
        stop.set()
        thread.join(30)
    lines = rsyslog.lines()
    assert once(lines) == stream_keys(store)  # every entry, in stream order, none lost
    report = verify_copy(lines)
    assert report.ok, report.broken
    assert report.entries == TOTAL + 50 and report.duplicates == len(lines) - TOTAL - 50


def _read_by_shipper(store: Store) -> bool:
    """The shipper has read the newest entry (to send it, or sent it already)."""
    newest = store.r.xrevrange("dh:audit", count=1)[0][0]
    [group] = store.r.xinfo_groups("dh:audit")
    return bool(group["last-delivered-id"] == newest)


def _all_arrived(rsyslog: Rsyslog, store: Store, count: int) -> None:
    wait_until(lambda: rsyslog.count() >= count and len(once(rsyslog.lines())) >= count,
               timeout=60,
               what=f"all {count} entries at the collector")
    wait_until(lambda: store.feed.lag() == 0, timeout=30, what="the lag to reach 0")


def test_relp_over_tls_verifies_the_collector_and_delivers(
        store: Store, rsyslog: Rsyslog, redis_url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    write_entries(store, 12)
    monkeypatch.setenv("REDIS_URL", redis_url)
    address = rsyslog.address("relp", tls=True)
    stranger = tmp_path / "other-ca"
    stranger.mkdir()
    impostor_ca = SyslogSettings.model_validate(
        {"address": address, "tls": {"ca_file": str(write_certificates(stranger))}})
    with pytest.raises(SinkError, match="certificate verify failed"):
        Syslog(impostor_ca).send(['{"n": 1}'])  # a collector we cannot verify gets nothing
    assert rsyslog.lines() == []

    config = sink_config(tmp_path, f'syslog: {{address: "{address}", tls: {{ca_file: '
                                   f'"{rsyslog.ca_file}"}}}}', batch=5)
    assert main(["audit", "ship", "--once", "--config", config]) == 0
    wait_until(lambda: len(rsyslog.lines()) == 12, timeout=30, what="12 entries over TLS")
    assert keys_of(rsyslog.lines()) == stream_keys(store) and store.feed.lag() == 0
    assert verify_copy(rsyslog.lines()).ok
