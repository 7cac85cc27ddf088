"""The audit sink against a real redis-server and a SIEM stand-in on loopback: every entry
arrives once, in order, through 503s and a 429's Retry-After; the copy verifies with the
chain's own link checks; a shipper SIGKILLed mid-batch and restarted loses nothing; a secret
canary never reaches the sink; syslog (RFC 5424 over TCP) carries the same lines."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agents.config import load_config
from agents.engine.retention import Retention, RetentionReport
from agents.store import Store
from agents.store.chain import verify_copy
from bot.cli import main
from bot.metrics import Metrics
from tests.fixtures.polling import wait_until
from tests.fixtures.siem_standin import SiemStandin, SyslogStandin

ROOT = Path(__file__).resolve().parents[2]
CANARY = "canary-s3cr3t-value"
TOKEN = "tok-1234567890"


def sink_config(tmp_path: Path, transport: str, *, batch: int = 10) -> str:
    (tmp_path / "siem-token").write_text(TOKEN + "\n")
    path = tmp_path / "deckhand.yml"
    path.write_text(f"""\
secrets: ["{CANARY}"]
audit:
  sink:
    {transport}
    batch: {batch}
    retries: 3
    backoff: 0.01
    max_backoff: 0.05
""")
    return str(path)


def webhook(url: str) -> str:
    return (f'webhook: {{url: "{url}", headers: {{Authorization: '
            f'{{file: "{{config_dir}}/siem-token", prefix: "Bearer "}}, X-Source: deckhand}}}}')


def write_entries(store: Store, count: int, *, start: int = 0) -> None:
    """Audit entries as deckhand writes them; two carry secrets the store did not know."""
    for n in range(start, start + count):
        extra = {"note": f"leaked {CANARY} here"} if n == 3 else \
            {"note": f"header {TOKEN}"} if n == 7 else {}
        store.audit.record("step_finished", actor=f"w{n % 3}", run_id=f"run-{n // 5}",
                           step=str(n), **extra)


def stream_keys(store: Store) -> list[tuple[str, str]]:
    return [(i.decode(), f[b"hash"].decode()) for i, f in store.r.xrange("dh:audit")]


def keys_of(lines: list[dict[str, str]]) -> list[tuple[str, str]]:
    return [(line["stream_id"], line["hash"]) for line in lines]


def once(lines: list[dict[str, str]]) -> list[tuple[str, str]]:
    """What a SIEM keeps when it drops repeats by the idempotency key."""
    return list(dict.fromkeys(keys_of(lines)))


def lag_metric(store: Store) -> float | None:
    metrics = Metrics()
    metrics.watch_audit_sink(store.feed)
    return metrics.registry.get_sample_value("deckhand_audit_sink_lag")


def test_every_entry_arrives_once_in_order_through_503s_and_retry_after(
        store: Store, siem: SiemStandin, redis_url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    config = sink_config(tmp_path, webhook(siem.url))
    write_entries(store, 25)
    assert lag_metric(store) == 25
    siem.fail_next(2, 503, retry_after="0")
    siem.fail_next(1, 429, retry_after="1")
    monkeypatch.setenv("REDIS_URL", redis_url)
    assert main(["audit", "ship", "--once", "--config", config]) == 0
    assert "shipped 25 audit entries" in capsys.readouterr().out

    assert [p.status for p in siem.posts] == [503, 503, 429, 200, 200, 200]
    assert siem.posts[3].at - siem.posts[2].at >= 0.9, "Retry-After: 1 was not honoured"
    received = siem.received()
    assert keys_of(received) == stream_keys(store)  # each once, in stream order
    assert lag_metric(store) == 0 and store.feed.lag() == 0

    assert all(p.headers["Authorization"] == f"Bearer {TOKEN}" for p in siem.posts)
    assert all(p.headers["Content-Type"] == "application/x-ndjson" for p in siem.posts)
    assert len({p.headers["Idempotency-Key"] for p in siem.accepted}) == 3
    bodies = b"".join(p.body for p in siem.posts)
    assert CANARY.encode() not in bodies
    assert TOKEN.encode() not in bodies
    assert [json.loads(line["details"])["step"] for line in received if line.get("masked")] \
        == ["3", "7"]

    report = verify_copy(received)  # the verifier `audit verify` uses, on the SIEM's copy
    assert report.ok, report.broken
    assert (report.entries, report.masked, report.duplicates) == (25, 2, 0)
    copy = tmp_path / "siem.jsonl"
    copy.write_text("".join(json.dumps(line) + "\n" for line in received))
    assert main(["audit", "verify", "--copy", str(copy), "--config", config]) == 0
    assert "copy intact: 25 linked entries (2 masked by the sink)" in capsys.readouterr().out
    received[10]["actor"] = "mallory"
    copy.write_text("".join(json.dumps(line) + "\n" for line in received))
    assert main(["audit", "verify", "--copy", str(copy), "--config", config]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert f"copy BROKEN at entry {received[10]['stream_id']} (step_finished by mallory): " \
           f"its content does not match its hash" in out


def _ship(config: str, redis_url: str, err: Path) -> subprocess.Popen[bytes]:
    with err.open("ab") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "audit", "ship", "--config", config,
             "--name", "siem-test"], env={**os.environ, "REDIS_URL": redis_url}, cwd=ROOT,
            stdout=subprocess.DEVNULL, stderr=stderr)


def test_a_shipper_killed_mid_batch_loses_nothing_after_a_restart(
        store: Store, siem: SiemStandin, redis_url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    config = sink_config(tmp_path, webhook(siem.url), batch=5)
    write_entries(store, 12)
    siem.hold_from = 1  # the second batch is received, and the shipper killed before the 200
    first = _ship(config, redis_url, tmp_path / "ship.err")
    try:
        assert siem.held.wait(30), "the second batch never arrived"
        first.kill()
        first.wait(10)
    finally:
        first.kill()
    siem.hold_from = None
    siem.release.set()
    assert store.feed.lag() == 12 - 5  # the held batch was never acknowledged
    write_entries(store, 6, start=12)  # written while no shipper runs
    monkeypatch.setenv("REDIS_URL", redis_url)
    main(["check", config])
    assert "audit sink: 13 entries not yet shipped; shipped by siem-test" in \
        " ".join(capsys.readouterr().out.split())

    second = _ship(config, redis_url, tmp_path / "ship.err")
    try:
        wait_until(lambda: len(once(siem.received())) == 18, timeout=30,
                   what="every entry at the SIEM")
        wait_until(lambda: store.feed.lag() == 0, timeout=30, what="the lag to reach 0")
    finally:
        second.terminate()
        assert second.wait(10) == 0
    received = siem.received()
    assert once(received) == stream_keys(store)  # nothing lost, in order
    assert len(received) == 18 + 5  # at-least-once: the held batch was sent again, whole
    assert keys_of(received[5:10]) == keys_of(received[10:15])
    report = verify_copy(received)
    assert report.ok and (report.entries, report.duplicates) == (18, 5), report.broken
    assert CANARY not in json.dumps(received)


def test_syslog_over_tcp_carries_rfc5424_messages_that_verify(
        store: Store, syslog_tcp: SyslogStandin, redis_url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    config = sink_config(tmp_path, f'syslog: {{address: "{syslog_tcp.address}", '
                                   f'facility: local0}}', batch=4)
    write_entries(store, 9)
    monkeypatch.setenv("REDIS_URL", redis_url)
    assert main(["audit", "ship", "--once", "--config", config]) == 0
    wait_until(lambda: len(syslog_tcp.messages) == 9, timeout=10, what="9 syslog messages")
    shape = re.compile(r"^<134>1 \d{4}-\d\d-\d\dT[\d:.]+Z \S+ deckhand \d+ audit - (\{.*\})$")
    lines = [json.loads(shape.fullmatch(m)[1]) for m in syslog_tcp.messages]  # type: ignore[index]
    assert keys_of(lines) == stream_keys(store)
    assert verify_copy(lines).ok and CANARY not in "".join(syslog_tcp.messages)


def test_retention_keeps_what_the_sink_has_not_shipped(
        store: Store, siem: SiemStandin, redis_url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A trim never opens a gap in the SIEM's copy: entries the sink has not taken (read and
    pending, or never read) stay until it has; then the next pass trims them."""
    write_entries(store, 12)
    ids = [i for i, _ in stream_keys(store)]
    store.feed.ensure_group()
    taken = store.feed.fresh(5, block=0)
    store.feed.ack([i for i, _ in taken])  # the sink took five
    store.feed.fresh(3, block=0)  # three read, never acknowledged: a shipper died with them

    def trim() -> RetentionReport:
        return Retention(store, older_than=-60, export=tmp_path / "archive.jsonl").run()

    report = trim()  # every entry is "old": only what was shipped may go
    assert (report.audit, report.held_for_sink) == (5, True)
    assert [i for i, _ in stream_keys(store)] == ids[5:]
    assert store.audit.verify().ok  # the chain still verifies from the first entry kept

    monkeypatch.setenv("REDIS_URL", redis_url)
    assert main(["audit", "ship", "--once", "--config",
                 sink_config(tmp_path, webhook(siem.url))]) == 0
    assert [line["stream_id"] for line in siem.received()] == ids[5:]
    report = trim()
    assert (report.audit, report.held_for_sink) == (7, False)
    assert stream_keys(store) == []


def test_retention_before_the_first_shipment_keeps_every_entry(
        store: Store, siem: SiemStandin, redis_url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With a sink configured and no shipper run yet (no consumer group), nothing has been
    taken: a pass trims no audit entry; once shipped, the next pass trims them all. Without
    a sink the archive is the only copy, and a pass trims as before."""
    write_entries(store, 12)
    ids = [i for i, _ in stream_keys(store)]
    path = sink_config(tmp_path, webhook(siem.url))
    config = load_config(Path(path))

    def trim(*, sink: bool) -> RetentionReport:
        return Retention.configured(store, None, history_days=None, sink=sink, older_than=-60,
                                    export=tmp_path / "archive.jsonl").run()

    report = trim(sink=config.audit.sink is not None)
    assert (report.audit, report.held_for_sink) == (0, True)
    assert [i for i, _ in stream_keys(store)] == ids  # nothing left Redis unshipped
    assert store.r.xinfo_groups("dh:audit") == []  # a pass reads; it creates no cursor

    monkeypatch.setenv("REDIS_URL", redis_url)
    assert main(["audit", "ship", "--once", "--config", path]) == 0
    assert [line["stream_id"] for line in siem.received()] == ids
    report = trim(sink=True)
    assert (report.audit, report.held_for_sink) == (12, False)
    write_entries(store, 3, start=12)
    store.r.xgroup_destroy("dh:audit", "sink")  # no sink reads this stream any more
    assert trim(sink=False).audit == 3 and stream_keys(store) == []


def test_a_gate_judged_entry_reaches_the_sink_with_its_samples_masked(
        store: Store, siem: SiemStandin, redis_url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A gate's samples are the measured system's words (series labels): the sink's door
    masks a secret in them as in any other entry, keeping the entry's JSON and every other
    figure of the sample (value, bound, round) as they were."""
    from agents.run.record import GateCheck
    from tools.gates import GateSample

    leaky = GateSample(query="ratio", series=f'{{dsn="{CANARY}", series="b"}}', value="0.5",
                       bound="must be ≥ 0.99", at=1.0, round=1, ok=False, problem="below 0.99")
    check = GateCheck(name="ratio", step="ship", after_batch=1, batches=3, ok=False,
                      reason="1 failed round(s), limit 0; worst: " + leaky.line(1),
                      samples=[leaky], samples_total=1, lines=[leaky.line(1)])
    store.audit.record("gate_judged", actor="w1", run_id="run-g", step="ship",
                       status="failed", error=check.reason, gate=check.model_dump(mode="json"))
    monkeypatch.setenv("REDIS_URL", redis_url)
    assert main(["audit", "ship", "--once", "--config",
                 sink_config(tmp_path, webhook(siem.url))]) == 0
    [line] = siem.received()
    assert CANARY not in json.dumps(line) and line.get("masked") is True
    shipped = json.loads(line["details"])["gate"]
    [sample] = shipped["samples"]
    assert sample["series"] == '{dsn="[REDACTED]", series="b"}'
    assert (sample["value"], sample["bound"], sample["round"], sample["ok"]) == \
        ("0.5", "must be ≥ 0.99", 1, False)
    assert verify_copy([line]).ok
