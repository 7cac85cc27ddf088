"""Retention on a real Redis: old finished runs and audit entries are exported to a JSONL
file, then trimmed with everything they own; nothing unfinished, unexported or young goes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from agents.engine.retention import Retention, run_exclusively
from agents.engine.worker import Worker
from agents.history.deploys import DAY, Deploy
from agents.plan.model import Plan
from agents.policy.rules import Policy
from agents.run.record import Run, RunStatus
from agents.schedules.model import Schedule
from agents.services import build_services
from agents.store import Store
from agents.store.check import StoreCheck
from bot.cli import main
from tests.fixtures.builders import NO_TARGETS, make_config, make_plan
from tests.fixtures.polling import wait_until
from tests.fixtures.store_snapshot import snapshot

S = RunStatus
PATHS: dict[RunStatus, list[RunStatus]] = {
    S.AWAITING_APPROVAL: [], S.APPROVED: [S.APPROVED], S.QUEUED: [S.QUEUED],
    S.RUNNING: [S.QUEUED, S.RUNNING], S.ROLLING_BACK: [S.QUEUED, S.RUNNING, S.ROLLING_BACK],
    S.SUCCEEDED: [S.QUEUED, S.RUNNING, S.SUCCEEDED], S.FAILED: [S.QUEUED, S.RUNNING, S.FAILED],
    S.ROLLED_BACK: [S.QUEUED, S.RUNNING, S.ROLLING_BACK, S.ROLLED_BACK],
    S.ROLLBACK_FAILED: [S.QUEUED, S.RUNNING, S.ROLLING_BACK, S.ROLLBACK_FAILED],
    S.REJECTED: [S.REJECTED], S.CANCELLED: [S.CANCELLED], S.EXPIRED: [S.EXPIRED],
    S.INTERRUPTED: [S.QUEUED, S.RUNNING, S.INTERRUPTED],
}
"""How each status is reached through the store's own calls."""
OLD, NEW = 200 * DAY, 1 * DAY
RETENTION = "retention: {days: 90, export: archive.jsonl}\n"
POLICY = Policy()


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def ago(self, seconds: float) -> Clock:
        self.now = time.time() - seconds
        return self


def make_run(store: Store, status: RunStatus, *, leftovers: bool = False,
             service: str | None = None) -> Run:
    """A run in ``status`` (of ``service``) with audit entries, written at the store's
    clock; a finished one settles its queue entry and lease unless ``leftovers`` (what a
    crash leaves)."""
    plan = make_plan([{"id": "s", "tool": "log", "params": {"line": "x"}}])
    plan = store.plans.save(plan.model_copy(update={"service": service}))
    store.plans.save(plan.revised(goal="v2"))
    run = Run.for_plan(plan, NO_TARGETS, created_at=store.clock())
    run.environments = ["staging"]
    run = store.runs.create(run)
    store.audit.record("planned", actor="alice", run_id=run.id, plan_id=plan.id)
    for step in PATHS[status]:
        _move(store, run, plan, step)
        store.audit.record(step.value, actor="w1", run_id=run.id)
    if status.terminal and not leftovers:
        store.queue.settle(run.id)
        store.leases.release(run.id, worker="w1")
    return store.runs.get(run.id)


def _move(store: Store, run: Run, plan: Plan, step: RunStatus) -> None:
    if step is S.QUEUED:  # approved and queued in one go, as the store does it
        store.runs.approve(run.id, face="cli", user="bob", plan_version=1, plan_hash=plan.hash, policy=POLICY)
    elif step is S.RUNNING:
        store.leases.claim(run.id, worker="w1", lease=3600)
    else:
        store.runs.transition(run.id, step)
        if step is S.APPROVED:
            store.commit([store.queue.step(run.id)])  # an approved run waits for a worker


def archive(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def owned_keys(store: Store, run: Run) -> list[str]:
    keys = store.keys
    return [keys.run(run.id), *keys.run_companions(run.id), keys.plan_latest(run.plan_id),
            keys.plan(run.plan_id, 1), keys.plan(run.plan_id, 2)]


@pytest.fixture
def world(tmp_path: Path, store: Store, client: redis.Redis, redis_url: str,
          monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Runs of every status, old and new, with audit entries; a lock queue and a queue
    entry left by old finished runs; one old run's plan kept by an unattended schedule.
    (``client`` is named so that its flush happens before, not after, the seeding.)"""
    monkeypatch.setenv("REDIS_URL", redis_url)
    clock = Clock().ago(OLD)
    store.clock = clock
    old = {s: make_run(store, s, leftovers=True) for s in PATHS}
    store.locks.wait_for(None, "staging", old[S.SUCCEEDED].id)
    store.history.record(None, old[S.SUCCEEDED].id, [_deploy(old[S.SUCCEEDED], clock.now)])
    store.audit.record("config_reloaded", actor="ops")  # an entry of no run
    clock.ago(NEW)
    new = {s: make_run(store, s) for s in PATHS}
    store.audit.record("config_reloaded", actor="ops")
    kept_plan = old[S.FAILED].plan_id
    store.schedules.create(Schedule.model_validate({
        "spec": "every day at 02:00", "cron": "0 2 * * *", "request": "deploy",
        "created_by": "alice", "auto": True, "approved_plan_id": kept_plan,
        "created_at": "2026-01-01T00:00:00Z", "armed_at": "2026-01-01T00:00:00Z"}))
    config = tmp_path / "deckhand.yml"
    make_config(tmp_path, RETENTION)
    audited = {r.id: len(store.audit.entries(run_id=r.id)) for r in [*old.values(), *new.values()]}
    return {"old": old, "new": new, "config": str(config), "kept_plan": kept_plan,
            "export": tmp_path / "archive.jsonl", "audited": audited}


def _deploy(run: Run, at: float, env: str = "staging", version: str = "v1.0.0") -> Deploy:
    return Deploy(run_id=run.id, environment=env, version=version, outcome=S.SUCCEEDED,
                  requested_by="alice", started_at=at, finished_at=at, hosts={"web-1": version})


def test_only_old_finished_runs_go_each_exported_with_everything_it_owned(
        world: dict[str, Any], store: Store, client: redis.Redis) -> None:
    assert main(["retention", "--config", world["config"]]) == 0

    lines = archive(world["export"])
    runs = {line["id"]: line for line in lines if line["kind"] == "run"}
    for status, run in world["old"].items():
        if status.terminal:
            assert run.id in runs, status
            assert [a["action"] for a in runs[run.id]["audit"]][0] == "planned"
            assert len(runs[run.id]["audit"]) == world["audited"][run.id] > len(PATHS[status])
            gone = [k for k in owned_keys(store, run) if client.exists(k)]
            assert gone == ([store.keys.plan_latest(run.plan_id), store.keys.plan(run.plan_id, 1),
                             store.keys.plan(run.plan_id, 2)] if run.plan_id == world["kept_plan"]
                            else [])
            assert client.zscore(store.keys.runs(), run.id) is None
        else:
            assert store.runs.get(run.id).status is status  # however old, never trimmed
            assert len(store.audit.entries(run_id=run.id)) == world["audited"][run.id]
    assert all(store.runs.get(run.id).status is s for s, run in world["new"].items())
    assert [p["version"] for p in runs[world["old"][S.SUCCEEDED].id]["plans"]] == [1, 2]
    assert client.lrange(store.keys.lock_queue(None, "staging"), 0, -1) == []
    assert StoreCheck(store).violations() == []
    assert main(["check", "--store"]) == 0

    audit = [line for line in lines if line["kind"] == "audit"]
    assert audit and all(line["at"] < time.time() - 90 * DAY for line in audit)
    left = store.audit.entries(limit=10_000)
    assert left and all(entry.at > time.time() - 90 * DAY for entry in left)
    assert audit[-1]["hash"] == left[0].prev  # the archive and the stream are one chain
    assert store.audit.verify().ok and store.audit.verify().trimmed == audit[-1]["stream_id"]
    assert store.history.current(None, "staging").hosts["web-1"].version == "v1.0.0"  # where: kept
    assert len(store.history.recent(None, "staging")) == 1  # history.retention_days is not set

    before = world["export"].read_bytes()
    assert main(["retention", "--config", world["config"]]) == 0
    assert world["export"].read_bytes() == before  # nothing new to export


def test_dry_run_counts_the_same_and_changes_nothing(
        world: dict[str, Any], client: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(client)
    assert main(["retention", "--dry-run", "--config", world["config"]]) == 0
    dry = capsys.readouterr().out
    assert snapshot(client) == before and not world["export"].exists()
    assert main(["retention", "--config", world["config"]]) == 0
    done = capsys.readouterr().out
    counted = [line.split("│")[2].strip() for line in dry.splitlines() if "runs" in line]
    assert counted and counted == [line.split("│")[2].strip() for line in done.splitlines()
                                   if "runs" in line]
    assert "finished runs" in dry and "8 (" in dry


def test_an_export_that_cannot_be_written_deletes_nothing(
        world: dict[str, Any], client: redis.Redis, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("not a directory")
    before = snapshot(client)
    code = main(["retention", "--config", world["config"], "--export",
                 str(tmp_path / "file" / "archive.jsonl")])
    err = capsys.readouterr()
    assert code == 2 and snapshot(client) == before
    assert "cannot write the retention export" in err.out + err.err
    assert "nothing was trimmed" in err.out + err.err and "Traceback" not in err.out + err.err


def test_history_retention_trims_old_deploys_but_never_where_or_the_newest(
        tmp_path: Path, store: Store, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    store.clock = Clock().ago(OLD)
    runs = [make_run(store, S.SUCCEEDED)]
    for n in range(60):
        at = time.time() - (OLD if n < 55 else NEW) + n
        store.history.record(None, f"run-{n:04d}", [_deploy(runs[0], at, version=f"v1.0.{n}")])
    make_config(tmp_path, RETENTION + "history: {retention_days: 30}\n")
    assert main(["retention", "--config", str(tmp_path / "deckhand.yml")]) == 0

    deploys = [line for line in archive(tmp_path / "archive.jsonl") if line["kind"] == "deploy"]
    assert [d["deploy"]["version"] for d in deploys] == [f"v1.0.{n}" for n in range(10)]
    kept = store.history.recent(None, "staging", limit=100)
    assert len(kept) == 50 and kept[0].version == "v1.0.59"
    assert store.history.current(None, "staging").hosts["web-1"].version == "v1.0.59"


def test_retention_trims_every_services_history_and_its_index_of_runs(
        tmp_path: Path, store: Store, client: redis.Redis, redis_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    store.clock = Clock().ago(OLD)
    old = make_run(store, S.SUCCEEDED, service="api")
    for service in ("api", None):
        for n in range(55):
            store.history.record(service, f"run-{service}-{n:04d}",
                                 [_deploy(old, time.time() - OLD + n, version=f"v1.0.{n}")])
    make_config(tmp_path, RETENTION + "history: {retention_days: 30}\n")
    assert main(["retention", "--config", str(tmp_path / "deckhand.yml")]) == 0

    deploys = [line for line in archive(tmp_path / "archive.jsonl") if line["kind"] == "deploy"]
    assert sorted((d.get("service", ""), d["deploy"]["version"]) for d in deploys) == sorted(
        (s, f"v1.0.{n}") for s in ("api", "") for n in range(5))  # 50 newest kept each
    assert len(store.history.recent("api", "staging", limit=100)) == 50
    assert len(store.history.recent(None, "staging", limit=100)) == 50
    assert client.zcard("dh:runs:svc:api") == 0 and not client.exists(f"dh:run:{old.id}")


def test_one_process_at_a_time_and_workers_run_it_when_due(
        world: dict[str, Any], store: Store, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert store.locks.take_job("retention", owner="ops@bastion", ttl=60)
    assert main(["retention", "--config", world["config"]]) == 2
    assert "already running (ops@bastion" in capsys.readouterr().out
    store.locks.release_job("retention", owner="ops@bastion")

    services = build_services(make_config(tmp_path, RETENTION), store=store)
    sliced = run_exclusively(Retention.configured(store, services.config.retention,
                                                  history_days=None, sink=False, batch=2),
                             locks=store.locks, audit=store.audit,
                             owner="w8", budget=0)  # out of time after the first batch
    assert sliced is not None and not sliced.complete
    assert store.locks.job_done_at("retention") is None  # not done: the next idle moment goes on
    worker = Worker(services, store, name="w9")
    report = worker.retain()
    assert report is not None and report.complete
    assert sum(report.runs.values()) + sum(sliced.runs.values()) == 8
    assert worker.retain() is None  # done today; the next pass is every_hours later
    assert store.audit.entries(limit=1)[0].action == "retention"
    assert StoreCheck(store).violations() == []


def test_a_pass_killed_mid_trim_loses_nothing_and_the_next_one_finishes(
        tmp_path: Path, store: Store, client: redis.Redis, redis_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    clock = Clock().ago(OLD)
    store.clock = clock
    plan = store.plans.save(make_plan([{"id": "s", "tool": "log", "params": {"line": "x"}}]))
    ids = _many_finished_runs(store, plan, 1500)
    export = tmp_path / "archive.jsonl"
    before = {c["id"] for c in client.client_list()}
    proc = subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "retention", "--older-than", "90d", "--export",
         str(export), "--batch", "50"],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: len(_exported(export)) > 50, timeout=60,
                   what="a second batch exported (so the first one was deleted)")
        client.client_pause(30_000, all=False)  # writes wait: no more deletes from here
        both = wait_until(lambda: _exported(export) & set(_present(client, store, ids)),
                          what="a batch exported but not yet deleted")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        wait_until(lambda: {c["id"] for c in client.client_list()} <= before,
                   what="the killed process's connections to close")
    finally:
        client.client_unpause()
        proc.kill()
    present = set(_present(client, store, ids))
    assert both and present and present != set(ids)  # killed mid-trim
    assert set(ids) - present <= _exported(export)  # every run gone was exported first
    assert StoreCheck(store).violations() == []

    client.pexpire(store.keys.job_lock("retention"), 1)  # the dead process's lease lapses
    wait_until(lambda: not client.exists(store.keys.job_lock("retention")), what="lease expiry")
    assert main(["retention", "--older-than", "90d", "--export", str(export)]) == 0
    assert _present(client, store, ids) == [] and _exported(export) == set(ids)
    runs = [line for line in archive(export) if line["kind"] == "run"]
    assert len(runs) > len(ids)  # the batch exported twice: a duplicate, never a loss


def _many_finished_runs(store: Store, plan: Plan, count: int) -> list[str]:
    ids = []
    for _ in range(count):
        run = store.runs.create(Run.for_plan(plan, NO_TARGETS, created_at=store.clock()))
        store.runs.transition(run.id, S.REJECTED)
        store.audit.record("rejected", actor="bob", run_id=run.id)
        ids.append(run.id)
    return ids


def _present(client: redis.Redis, store: Store, ids: list[str]) -> list[str]:
    found = client.mget([store.keys.run(i) for i in ids])
    return [i for i, raw in zip(ids, found, strict=True) if raw is not None]


def _exported(path: Path) -> set[str]:
    if not path.exists():
        return set()
    lines = path.read_text().splitlines()
    complete = lines if path.read_text().endswith("\n") else lines[:-1]
    return {json.loads(line)["id"] for line in complete
            if line.strip() and json.loads(line)["kind"] == "run"}



def test_a_dry_run_needs_no_export_and_a_trimmed_run_is_shown_from_the_archive(
        world: dict[str, Any], tmp_path: Path, client: redis.Redis,
        capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(client)
    assert main(["retention", "--dry-run", "--older-than", "90d"]) == 0  # no config, no export
    assert "a dry run writes nothing" in capsys.readouterr().out
    assert snapshot(client) == before

    assert main(["retention", "--config", world["config"]]) == 0
    capsys.readouterr()
    gone = world["old"][S.SUCCEEDED]
    assert main(["runs", "show", gone.id, "--config", world["config"]]) == 2
    said = " ".join((lambda c: c.out + c.err)(capsys.readouterr()).split())
    assert f"retention archived it to {world['export']}" in said
    assert f"deckhand runs show {gone.id} --archive {world['export']}" in said
    assert main(["runs", "show", gone.id[:16], "--archive", str(world["export"]),
                 "--config", world["config"]]) == 0
    shown = capsys.readouterr().out
    assert "from the archive" in shown and "succeeded" in shown.lower()
