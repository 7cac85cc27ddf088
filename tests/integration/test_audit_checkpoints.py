"""Signed checkpoints of the audit chain against a real redis-server: a chain rebuilt
wholesale through redis-cli — every hash and link recomputed, the head rewritten — passes
the link checks, and is found by its checkpoint (re-signed it cannot be without the key,
kept in a file outside Redis); removing the checkpoints leaves old entries unsigned, which
fails too. Workers write checkpoints periodically; a verify resumes from the last verified
checkpoint; a copy's checkpoints are checked with the same key; `check` says what the chain
is worth without one."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agents.config import load_config
from agents.engine.worker import CHECKPOINT_JOB, Worker
from agents.services import build_services
from agents.settings import Settings
from agents.store import Store
from agents.store.chain import copy_fields, entry_hash
from agents.store.checkpoints import CHECKPOINT
from bot.cli import main
from tests.fixtures.siem_standin import SiemStandin
from tests.integration.test_audit_chain import CHAIN, STREAM, cli, entries

KEY = "0123456789abcdef" * 4


@pytest.fixture
def env(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A config (checkpoints every 10 s: unsigned entries fail after 20 s), REDIS_URL, and
    the key in a file outside Redis."""
    (tmp_path / "audit-key").write_text(KEY + "\n")
    config = tmp_path / "deckhand.yml"
    config.write_text("audit:\n  checkpoint_every: 10\n")
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("DECKHAND_AUDIT_KEY_FILE", str(tmp_path / "audit-key"))
    return {"config": str(config), "key_file": str(tmp_path / "audit-key")}


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(args))
    return code, " ".join(capsys.readouterr().out.split())


def write(store: Store, count: int, start: int = 0) -> None:
    for n in range(start, start + count):
        store.audit.record("schedule_created", actor=f"u{n}", schedule=f"s{n}")


def rebuild_wholesale(redis_url: str, store: Store, *, drop: str | None = None) -> None:
    """What someone with Redis access can do: edit an entry, then recompute every hash and
    link from the genesis on and rewrite the stream and the recorded head (redis-cli only).
    ``drop``: an action whose entries are left out of the rebuilt chain."""
    rows = entries(store)
    genesis = cli(redis_url, "HGET", CHAIN, "genesis")
    rows[1][1]["actor"] = "mallory"
    cli(redis_url, "DEL", STREAM)
    prev = genesis
    for stream_id, fields in rows:
        if fields["action"] == drop:
            continue
        fields["prev"] = prev
        fields["hash"] = prev = entry_hash(fields)
        cli(redis_url, "XADD", STREAM, stream_id, *[x for kv in fields.items() for x in kv])
    cli(redis_url, "HSET", CHAIN, "head", prev)
    cli(redis_url, "DEL", "dh:audit:verified")


def test_a_chain_rebuilt_wholesale_is_found_by_its_signed_checkpoint(
        env: dict[str, str], store: Store, redis_url: str,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    write(store, 4)
    assert run(capsys, "audit", "checkpoint", "--config", env["config"])[0] == 0
    write(store, 2, start=4)
    code, out = run(capsys, "audit", "verify", "--config", env["config"])
    assert code == 0 and "intact: 7 linked entries" in out
    assert "1 signed checkpoints verified" in out and "2 entries after it not signed" in out
    [checkpoint] = [f for _, f in entries(store) if f["action"] == CHECKPOINT]
    assert checkpoint["prev"] == entries(store)[3][1]["hash"]  # it signs the head it followed
    assert KEY not in json.dumps(entries(store))

    rebuild_wholesale(redis_url, store)
    monkeypatch.delenv("DECKHAND_AUDIT_KEY_FILE")  # without the key: the links all hold
    code, out = run(capsys, "audit", "verify", "--config", env["config"])
    assert code == 0 and "only as strong as Redis access" in out
    monkeypatch.setenv("DECKHAND_AUDIT_KEY_FILE", env["key_file"])
    code, out = run(capsys, "audit", "verify", "--config", env["config"])
    stream_id = entries(store)[4][0]
    assert code == 1
    assert (f"audit chain BROKEN at entry {stream_id} ({CHECKPOINT} by "
            in out and "is a checkpoint whose signature does not verify with this key: the "
                       "chain before it was rewritten" in out), out


def test_a_chain_rebuilt_without_its_checkpoints_is_found_once_they_are_overdue(
        env: dict[str, str], redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Entries written a minute ago (an injected clock), checkpointed, then rebuilt with the
    checkpoint left out: every entry is unsigned and older than twice checkpoint_every."""
    store = Store.connect(redis_url, clock=lambda: time.time() - 60)
    write(store, 4)
    assert run(capsys, "audit", "checkpoint", "--config", env["config"])[0] == 0
    rebuild_wholesale(redis_url, store, drop=CHECKPOINT)
    code, out = run(capsys, "audit", "verify", "--config", env["config"])
    assert code == 1
    assert ("audit chain BROKEN at 4 entries after the chain's start (no checkpoint): are "
            "unsigned, the oldest older than 20 s: checkpoints were removed") in out


def test_verify_resumes_from_the_last_verified_checkpoint(
        env: dict[str, str], store: Store, redis_url: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    write(store, 5)
    assert run(capsys, "audit", "checkpoint", "--config", env["config"])[0] == 0
    write(store, 3, start=5)
    code, out = run(capsys, "audit", "verify", "--config", env["config"])
    assert code == 0 and "intact: 9 linked entries, 0 run copies" in out
    checkpoint_id = entries(store)[5][0]
    code, out = run(capsys, "audit", "verify", "--config", env["config"])
    assert code == 0 and (f"intact: 3 linked entries after the checkpoint verified before "
                          f"({checkpoint_id})") in out
    assert "run copies not checked (--full checks them)" in out
    assert f"signed up to entry {checkpoint_id}; 3 entries after it not signed yet" in out
    code, out = run(capsys, "audit", "verify", "--full", "--config", env["config"])
    assert code == 0 and "intact: 9 linked entries, 0 run copies" in out

    cli(redis_url, "SET", "dh:audit:verified", json.dumps(
        {"stream_id": entries(store)[7][0], "hash": entries(store)[7][1]["hash"],
         "key_id": "forged", "signature": "00"}))  # a mark nobody with the key wrote
    code, out = run(capsys, "audit", "verify", "--config", env["config"])
    assert code == 0 and "intact: 9 linked entries, 0 run copies" in out  # walked it all
    rows = entries(store)
    cli(redis_url, "XDEL", STREAM, rows[2][0])  # before the verified checkpoint
    code, out = run(capsys, "audit", "verify", "--config", env["config"])
    assert code == 0  # incremental: what came after the checkpoint only
    code, out = run(capsys, "audit", "verify", "--full", "--config", env["config"])
    assert code == 1 and f"BROKEN at entry {rows[3][0]}" in out


def test_workers_sign_the_head_periodically_one_at_a_time(
        env: dict[str, str], store: Store, tmp_path: Path) -> None:
    services = build_services(load_config(env["config"]), Settings(), store=store)
    first, second = Worker(services, store, name="w1"), Worker(services, store, name="w2")
    assert not first.checkpoint()  # an empty chain: nothing to sign
    write(store, 3)
    store.locks.mark_job_done(CHECKPOINT_JOB, time.time() - 11)
    assert first.checkpoint() and not second.checkpoint()  # done just now: not due again
    assert [f["action"] for _, f in entries(store)][-1] == CHECKPOINT
    assert entries(store)[-1][1]["actor"] == "w1"
    store.locks.mark_job_done(CHECKPOINT_JOB, time.time() - 11)
    assert not second.checkpoint()  # due, but the head is a checkpoint already
    write(store, 1, start=3)
    store.locks.mark_job_done(CHECKPOINT_JOB, time.time() - 11)
    assert store.locks.take_job(CHECKPOINT_JOB, owner="w1", ttl=30)
    assert not second.checkpoint()  # another holds the job
    store.locks.release_job(CHECKPOINT_JOB, owner="w1")
    assert second.checkpoint()
    assert [f["action"] for _, f in entries(store)].count(CHECKPOINT) == 2
    assert store.audit.verify().ok


def test_a_copy_s_checkpoints_are_checked_with_the_key(
        env: dict[str, str], store: Store, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    write(store, 3)
    assert run(capsys, "audit", "checkpoint", "--config", env["config"])[0] == 0
    write(store, 1, start=3)
    capsys.readouterr()
    assert main(["audit", "export", "--config", env["config"]]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    copy = tmp_path / "copy.jsonl"
    copy.write_text("".join(json.dumps(line) + "\n" for line in lines))
    code, out = run(capsys, "audit", "verify", "--copy", str(copy), "--config", env["config"])
    assert code == 0 and "copy intact: 5 linked entries" in out
    assert "1 signed checkpoints verified" in out

    forged = {**lines[3], "details": {**lines[3]["details"], "signature": "ab" * 32}}
    forged["hash"] = entry_hash(copy_fields(forged, 4)[1])  # rehashed: its link holds
    copy.write_text("".join(json.dumps(line) + "\n" for line in [*lines[:3], forged]))
    code, out = run(capsys, "audit", "verify", "--copy", str(copy), "--config", env["config"])
    assert code == 1 and (f"BROKEN at entry {lines[3]['stream_id']} ({CHECKPOINT} by "
                          in out and "signature does not verify" in out), out


def test_checkpoints_reach_the_sink_and_verify_in_its_copy(
        env: dict[str, str], store: Store, siem: SiemStandin, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    write(store, 3)
    assert run(capsys, "audit", "checkpoint", "--config", env["config"])[0] == 0
    config = Path(env["config"])
    config.write_text(config.read_text() + f"  sink: {{webhook: {{url: \"{siem.url}\"}}}}\n")
    assert run(capsys, "audit", "ship", "--once", "--config", str(config))[0] == 0
    copy = tmp_path / "siem.jsonl"
    copy.write_text("".join(json.dumps(line) + "\n" for line in siem.received()))
    assert [line["action"] for line in siem.received()][-1] == CHECKPOINT
    code, out = run(capsys, "audit", "verify", "--copy", str(copy), "--config", str(config))
    assert code == 0 and "1 signed checkpoints verified" in out


def test_check_says_an_unsigned_chain_is_as_strong_as_redis_access(
        env: dict[str, str], store: Store, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "check", env["config"])
    assert "audit chain: checkpoints signed with key" in out
    monkeypatch.delenv("DECKHAND_AUDIT_KEY_FILE")
    code, out = run(capsys, "check", env["config"])
    assert "audit chain: unsigned — it is only as strong as access to Redis" in out
    (Path(env["key_file"])).write_text("short\n")
    monkeypatch.setenv("DECKHAND_AUDIT_KEY_FILE", env["key_file"])
    code, out = run(capsys, "audit", "verify", "--config", env["config"])
    assert code == 2 and "DECKHAND_AUDIT_KEY: Value error, must hold at least 32 characters " \
        "of randomness (the file DECKHAND_AUDIT_KEY_FILE names" in out
