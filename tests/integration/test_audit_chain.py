"""The audit stream's hash chain against a real redis-server: entries edited, removed or
inserted with redis-cli are found by ``deckhand audit verify`` (first broken link named,
exit 1); concurrent writers, retention trims and an export keep it verifiable."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from agents.store import Store
from agents.store.chain import entry_hash
from bot.cli import main

CONFIG = str(Path(__file__).resolve().parents[2] / "examples" / "deckhand.yml")
STREAM, CHAIN = "dh:audit", "dh:audit:chain"


def cli(redis_url: str, *args: str) -> str:
    """redis-cli against the test server, as an operator with Redis access would."""
    port = str(urlsplit(redis_url).port)
    binary = shutil.which("redis-cli")
    assert binary, "redis-cli is not installed"
    done = subprocess.run([binary, "-p", port, *args], capture_output=True, text=True,
                          check=True, timeout=10)
    return done.stdout.strip()


def entries(store: Store) -> list[tuple[str, dict[str, str]]]:
    return [(i.decode(), {k.decode(): v.decode() for k, v in f.items()})
            for i, f in store.r.xrange(STREAM)]


def rebuild(redis_url: str, rows: list[tuple[str, dict[str, str]]]) -> None:
    """Rewrite the stream through redis-cli, keeping ids: the only way to 'edit' one."""
    cli(redis_url, "DEL", STREAM)
    for stream_id, fields in rows:
        cli(redis_url, "XADD", STREAM, stream_id, *[x for kv in fields.items() for x in kv])


def verify(redis_url: str, monkeypatch: pytest.MonkeyPatch,
           capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    monkeypatch.setenv("REDIS_URL", redis_url)
    capsys.readouterr()
    code = main(["audit", "verify", "--config", CONFIG])
    return code, " ".join(capsys.readouterr().out.split())


@pytest.fixture
def audited(store: Store) -> list[tuple[str, dict[str, str]]]:
    """Six entries, two runs' copies among them, written by deckhand."""
    store.audit.record("planned", actor="alice", run_id="run-1", plan_id="p1", request="deploy")
    store.audit.record("approved", actor="bob", run_id="run-1", version=1)
    store.audit.record("schedule_created", actor="carol", schedule="s1")
    store.commit([store.audit.write("step_finished", actor="w1", run_id="run-2", step="a"),
                  store.audit.write("run_finished", actor="w1", run_id="run-2")])
    store.audit.record("retention", actor="w2", runs=0)
    return entries(store)


def test_an_untouched_chain_verifies(audited: list[tuple[str, dict[str, str]]], redis_url: str,
                                     monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert len(audited) == 6
    assert all(f["hash"] == entry_hash(f) for _, f in audited)
    assert [f["prev"] for _, f in audited[1:]] == [f["hash"] for _, f in audited[:-1]]
    code, out = verify(redis_url, monkeypatch, capsys)
    assert code == 0 and "intact: 6 linked entries" in out and "4 run copies" in out


Tamper = Callable[[str, list[tuple[str, dict[str, str]]]], None]


def _edit(url: str, rows: list[tuple[str, dict[str, str]]]) -> None:
    rows[2][1]["actor"] = "mallory"
    rebuild(url, rows)


def _edit_relinked(url: str, rows: list[tuple[str, dict[str, str]]]) -> None:
    rows[2][1]["actor"] = "mallory"  # and the edited entry's own hash made to match
    rows[2][1]["hash"] = entry_hash(rows[2][1])
    rebuild(url, rows)


def _remove(url: str, rows: list[tuple[str, dict[str, str]]]) -> None:
    cli(url, "XDEL", STREAM, rows[2][0])


def _insert_middle(url: str, rows: list[tuple[str, dict[str, str]]]) -> None:
    forged = dict(rows[2][1], actor="mallory", action="approved", ref="aud-forged")
    forged["prev"] = rows[1][1]["hash"]
    forged["hash"] = entry_hash(forged)
    millis = int(rows[2][0].split("-")[0])
    later = [(f"{millis + 1 + n}-0", f) for n, (_, f) in enumerate(rows[2:])]
    rebuild(url, [*rows[:2], (f"{millis}-{int(rows[2][0].split('-')[1])}", forged), *later])


def _append_unlinked(url: str, rows: list[tuple[str, dict[str, str]]]) -> None:
    cli(url, "XADD", STREAM, "*", "actor", "mallory", "action", "approved", "run_id", "run-1")


def _append_linked(url: str, rows: list[tuple[str, dict[str, str]]]) -> None:
    forged = dict(rows[-1][1], actor="mallory", ref="aud-forged", prev=rows[-1][1]["hash"])
    forged["hash"] = entry_hash(forged)
    cli(url, "XADD", STREAM, "*", *[x for kv in forged.items() for x in kv])


def _remove_newest(url: str, rows: list[tuple[str, dict[str, str]]]) -> None:
    cli(url, "XDEL", STREAM, rows[-1][0])


def _edit_run_copy(url: str, rows: list[tuple[str, dict[str, str]]]) -> None:
    copy = json.loads(cli(url, "LINDEX", "dh:run:run-1:audit", "1"))
    copy["actor"] = "mallory"
    cli(url, "LSET", "dh:run:run-1:audit", "1", json.dumps(copy))


def _drop_chain(url: str, rows: list[tuple[str, dict[str, str]]]) -> None:
    cli(url, "DEL", CHAIN)


@pytest.mark.parametrize(("tamper", "first_broken"), [
    (_edit, "entry {2} (schedule_created by mallory): its content does not match its hash"),
    (_edit_relinked, "entry {3} (step_finished by w1): does not link to entry {2}"),
    (_remove, "entry {3} (step_finished by w1): does not link to entry {1}"),
    (_insert_middle, "(schedule_created by carol): does not link to entry {2}"),
    (_append_unlinked, "(approved by mallory): carries no link"),
    (_append_linked, "(retention by mallory): is the newest entry but not the head"),
    (_remove_newest, "entry {4} (run_finished by w1): is the newest entry but not the head deckhand recorded"),
    (_edit_run_copy, "dh:run:run-1:audit[1] (approved): its content does not match its hash"),
    (_drop_chain, "entry {0}: carries a link but the chain's record (dh:audit:chain) is gone"),
], ids=["edit", "edit-and-rehash", "remove", "insert", "append", "append-linked",
        "remove-newest", "edit-run-copy", "drop-chain-record"])
def test_verify_names_the_first_broken_link(
        tamper: Tamper, first_broken: str, audited: list[tuple[str, dict[str, str]]],
        redis_url: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    tamper(redis_url, [(i, dict(f)) for i, f in audited])
    code, out = verify(redis_url, monkeypatch, capsys)
    assert code == 1
    assert "audit chain BROKEN at" in out
    assert first_broken.format(*[i for i, _ in audited]) in out


def test_concurrent_writers_keep_one_chain(store: Store, redis_url: str) -> None:
    """Four workers (own clients) append at once, singly and in held batches."""
    def writer(name: str) -> None:
        mine = Store.connect(redis_url)
        for n in range(15):
            mine.audit.record("step_finished", actor=name, run_id=f"run-{name}", step=str(n))
            if n % 5 == 0:
                mine.commit([mine.audit.write("held", actor=name, run_id=f"run-{name}"),
                             mine.audit.write("held", actor=name)])

    threads = [threading.Thread(target=writer, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    report = store.audit.verify()
    assert report.ok, report.broken
    assert report.entries == 4 * (15 + 3 * 2) and report.copies == 4 * (15 + 3)


def test_retention_trims_keep_the_chain_verifiable(store: Store, redis_url: str,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    clock = iter(float(t) for t in range(1000, 1100))
    store.clock = lambda: next(clock)
    for n in range(8):
        store.audit.record("step_finished", actor="w", run_id="run-1", step=str(n))
    old, more = store.audit.older_than(1004.5)
    assert len(old) == 5 and not more
    assert store.audit.forget([i for i, _ in old]) == 5
    code, out = verify(redis_url, monkeypatch, capsys)
    assert code == 0 and f"after the trimmed head {old[-1][0]}" in out and "3 linked" in out
    kept = entries(store)
    cli(redis_url, "XDEL", STREAM, kept[0][0])  # the first entry kept, removed behind its back
    code, out = verify(redis_url, monkeypatch, capsys)
    assert code == 1
    assert (f"entry {kept[1][0]} (step_finished by w): does not link to the last entry "
            f"retention removed ({old[-1][0]})") in out


def test_export_carries_the_links(audited: list[tuple[str, dict[str, str]]], redis_url: str,
                                  monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    capsys.readouterr()
    assert main(["audit", "export", "--since", "1h", "--format", "jsonl",
                 "--config", CONFIG]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["stream_id"] for line in lines] == [i for i, _ in audited]
    assert [line["prev"] for line in lines[1:]] == [line["hash"] for line in lines[:-1]]
    assert main(["audit", "export", "--since", "2999-01-01", "--config", CONFIG]) == 0
    assert capsys.readouterr().out == ""
    assert main(["audit", "export", "--since", "yesterday", "--config", CONFIG]) == 2
    assert "error: --since 'yesterday': give a date" in capsys.readouterr().out
