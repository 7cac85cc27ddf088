"""Redis as a production service: Sentinel failover, settings that lose data, bad URLs."""

from __future__ import annotations

import contextlib
import io
import json
import socket
import threading
import time
from pathlib import Path

import pytest

from agents.engine.worker import Worker, WorkerOptions
from agents.errors import StoreError
from agents.plan.model import Plan
from agents.policy.rules import Policy
from agents.run.record import Run, RunStatus, StepStatus
from agents.services import build_services
from agents.store import Store
from agents.store.connect import connect_client, parse_sentinel_url, safe_url
from bot.cli import main
from bot.slack.blocks import summary_blocks
from bot.slack.home_blocks import HomeData, home_view
from tests.fixtures.builders import NO_TARGETS, make_config, make_plan
from tests.fixtures.polling import wait_until
from tests.fixtures.redis_sentinel import SentinelGroup
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.sample import EXAMPLES, free_port
from tests.integration.test_store import config_for, gated_plan, log_lines, submit

POLICY = Policy()


def _waiting_run(store: Store) -> tuple[Run, Plan]:
    plan = make_plan([{"id": "a", "tool": "echo", "params": {"text": "x"}}])
    store.plans.save(plan)
    return store.runs.create(Run.for_plan(plan, NO_TARGETS)), plan


def _approve(store: Store, run: Run, plan: Plan) -> Run:
    return store.runs.approve(run.id, face="cli", user="alice", plan_version=plan.version, plan_hash=plan.hash,
                              policy=POLICY)


def test_sentinel_failover_keeps_every_acknowledged_approval(
        sentinel_group: SentinelGroup) -> None:
    store = Store.connect(sentinel_group.url)
    store.replicate_timeout = 5.0  # a loaded machine's replica may take over 0.5 s
    runs = [_waiting_run(store) for _ in range(6)]
    before = [_approve(store, run, plan) for run, plan in runs[:3]]
    assert all("unreplicated" not in r.meta for r in before)  # WAIT saw the replica
    store.replicate_timeout = 0.5  # after the failover no replica answers: each WAIT times out

    sentinel_group.kill_primary()  # Sentinel promotes the replica; deckhand retries meanwhile
    after = [_approve(store, run, plan) for run, plan in runs[3:]]

    assert sentinel_group.current_primary() == sentinel_group.replica_port
    for run, _ in runs:
        stored = store.runs.get(run.id)
        assert stored.status is RunStatus.QUEUED and [a.user for a in stored.approvals] == [
            "alice"]
    assert store.queue.depth() == 6  # each run queued exactly once, across the failover
    # the new primary has no replica: the record says those writes are not replicated
    assert all(store.runs.get(r.id).meta.get("unreplicated") for r in after)


def test_check_refuses_a_redis_that_evicts_and_warns_without_replicas(
        own_redis: RedisServer, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("REDIS_URL", own_redis.url)
    config = str(EXAMPLES / "deckhand.yml")
    assert main(["check", config]) == 0
    assert "no replica is connected" in capsys.readouterr().out
    Store.connect(own_redis.url).r.config_set("maxmemory-policy", "allkeys-lru")
    assert main(["check", config]) == 1
    out = capsys.readouterr().out
    assert "maxmemory-policy is allkeys-lru" in out and "noeviction" in out


@pytest.mark.parametrize(("url", "message"), [
    ("redis+sentinel://:secret@127.0.0.1:26379", "names the sentinels and the service"),
    ("redis+sentinel://s1:26379,s2:port/mymaster", "'s2:port' is not host:port"),
    ("redis+sentinel://s1:26379/mymaster/zero", "database 'zero' is not a number"),
    ("http://localhost:6379", "unknown scheme 'http'"),
    ("redis://:secret@localhost:port/0", "REDIS_URL is malformed"),
])
def test_malformed_redis_urls_get_one_clear_line(url: str, message: str) -> None:
    with pytest.raises(StoreError, match=message) as caught:
        connect_client(url)
    assert "secret" not in str(caught.value)


def test_sentinel_url_carries_credentials_and_tls() -> None:
    target = parse_sentinel_url("rediss+sentinel://app:s3cr%40t@a:26379,[::1]:26380/main/2")
    assert target.sentinels == [("a", 26379), ("::1", 26380)]
    assert (target.service, target.db, target.username, target.password, target.tls) == (
        "main", 2, "app", "s3cr@t", True)


def test_a_bad_redis_url_is_an_error_line_not_a_traceback(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    monkeypatch.setenv("REDIS_URL", "redis+sentinel://:hunter2@nohost/")
    assert main(["runs", "--config", str(EXAMPLES / "deckhand.yml")]) == 2
    err = capsys.readouterr()
    text = err.out + err.err
    assert "Sentinel URL" in text and "Traceback" not in text and "hunter2" not in text


def _change_run(tmp_path: Path, store: Store) -> tuple[Worker, Run]:
    services = build_services(make_config(tmp_path), store=store)
    plan = make_plan([{"id": "deploy", "tool": "change",
                       "params": {"environment": "staging", "label": "v2"}}],
                     rollback=[{"id": "undo", "tool": "undo",
                                "params": {"environment": "staging"}}])
    run = submit(services, plan)  # approved while the replica answers
    return Worker(services, store, name="w", options=WorkerOptions(block=0.1)), run


def test_a_mutating_command_starts_only_once_a_replica_has_its_record(
        tmp_path: Path, sentinel_group: SentinelGroup) -> None:
    store = Store.connect(sentinel_group.url)
    changes = tmp_path / "web-1" / "changes"  # what the deploy writes on its host
    worker, run = _change_run(tmp_path, store)  # approved with the default bound: a
    store.replicate_timeout = store.replica_wait = 0.5  # loaded machine may take > 0.5 s
    sentinel_group.pause_replica()
    try:
        assert worker.step(block=1)
    finally:
        sentinel_group.resume_replica()
    refused = store.runs.get(run.id)
    assert not changes.exists()  # the command never ran on the host
    assert refused.status is RunStatus.FAILED, refused.reason  # nothing changed:
    assert (refused.reason or "").startswith("not started")  # "not started", not rolled back
    assert refused.rollback["undo"].status is StepStatus.PENDING  # no rollback phase
    assert refused.steps["deploy"].status is StepStatus.FAILED
    assert "not started: replication to a Redis replica timed out" in (
        refused.steps["deploy"].error or "")
    assert refused.changed_hosts == []  # nothing may differ on the host: nothing to undo
    assert refused.meta["unreplicated"] == ["end (failed)"]  # its end waited in vain too
    _faces_say_unreplicated(store, refused, tmp_path, sentinel_group.url)

    worker, run = _change_run(tmp_path, store)  # the replica answers again
    assert worker.step(block=1)
    assert store.runs.get(run.id).status is RunStatus.SUCCEEDED
    assert changes.read_text().splitlines() == ["v2"]


def _faces_say_unreplicated(store: Store, run: Run, tmp_path: Path, url: str) -> None:
    """runs show, the thread's summary and the App Home each say what no replica has."""
    plan = store.plans.get(run.plan_id, run.plan_version)
    thread = json.dumps(summary_blocks(plan, run))
    home = json.dumps(home_view(HomeData(user="alice", now=time.time(), recent=[run]),
                                POLICY))
    assert "not confirmed by a Redis replica: end (failed)" in thread
    assert "not on a replica: end (failed)" in home
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("REDIS_URL", url)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["runs", "show", run.id, "--config", str(tmp_path / "deckhand.yml")]) == 0
    assert "not confirmed by a Redis replica: end (failed)" in " ".join(out.getvalue().split())


def test_a_run_rides_through_a_failover_mid_command_and_runs_nothing_twice(
        tmp_path: Path, sentinel_group: SentinelGroup) -> None:
    store = Store.connect(sentinel_group.url)
    store.replicate_timeout = 5.0  # the approved run is on the replica before anything else
    services = build_services(config_for(tmp_path), store=store)
    plan = gated_plan(tmp_path)
    run = submit(services, plan)
    store.replicate_timeout = 0.5  # after the failover no replica answers: each WAIT times out
    worker = Worker(services, store, name="w", options=WorkerOptions(block=0.1, lease=5))
    thread = threading.Thread(target=worker.step)
    thread.start()
    try:
        wait_until(lambda: (tmp_path / "started").exists(), what="the gate step to start")
        sentinel_group.kill_primary()  # mid-command: heartbeats and events meet the failover
        wait_until(lambda: sentinel_group.current_primary() == sentinel_group.replica_port,
                   timeout=30, what="Sentinel to promote the replica")
    finally:
        (tmp_path / "go").touch()
        thread.join(60)
    final = store.runs.get(run.id)
    assert final.status is RunStatus.SUCCEEDED, final.reason
    assert log_lines(tmp_path).count("change web-1") == 1  # on the host: exactly once
    assert (tmp_path / "started").read_text().splitlines() == ["run"]  # gate started once
    assert [s.status.value for s in final.steps.values()] == ["succeeded"] * len(final.steps)


def test_every_sentinel_down_is_one_line_naming_them_within_the_budget() -> None:
    with socket.socket() as silent:  # accepts, never answers: a hung sentinel
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        ports = [silent.getsockname()[1], free_port()]  # and one that refuses
        url = f"redis+sentinel://127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/deckhand/0"
        store = Store(connect_client(url, failover_seconds=3), where=safe_url(url))
        started = time.monotonic()
        with pytest.raises(StoreError) as caught:
            store.runs.recent(limit=5)
        took = time.monotonic() - started
    message = str(caught.value)
    assert took < 3 + 1, took  # the budget bounds every nested retry together
    assert "\n" not in message and len(message) < 300, message
    assert f"tried 127.0.0.1:{ports[0]}, 127.0.0.1:{ports[1]}" in message
    assert "Error(" not in message  # none of redis-py's exception reprs
