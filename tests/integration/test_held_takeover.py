"""A held run survives a change of worker (issue 39.3): two real `deckhand worker` processes,
a 3-batch rollout on real sshd hosts, the run held in batch 1 — paused, or at a go/no-go —
and the worker holding it SIGKILLed (or stalled through a Redis outage longer than its
lease, so the idle worker claims it when Redis returns). The worker that takes it over keeps
it held — the same pause, the same go/no-go with its deadline and name — and goes on only
when someone resumes or decides, with the hosts still pending: every host is changed exactly
once, nothing is rolled back. Asserted on the hosts (each one's change log), in raw Redis
and in the audit log.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agents.config import Config, load_config
from agents.engine.control import Control, steer
from agents.engine.worker import Worker, WorkerOptions
from agents.errors import ApprovalRefused
from agents.run.record import Judgment, Run, RunStatus
from agents.services import build_services
from agents.store import Store
from agents.store._redis import GROUP
from agents.store.audit import AuditEntry
from bot.cli import main
from tests.fixtures.builders import make_plan
from tests.fixtures.polling import wait_until
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.sshd import SSHFleet
from tests.integration.test_store import submit

ROOT = Path(__file__).resolve().parents[2]
HOSTS = ("prod-1", "prod-2", "prod-3")
VERSION = "v2.0.0"
WAIT_FOR_GO = "for i in $(seq 1 600); do [ -e {vars.go} ] && exit 0; sleep 0.05; done; exit 1"
TOOLS = {
    "ship": {"description": "put a version on a host: appends to its change log, so a "
                            "second run there shows (not idempotent)",
             "command": "echo {version} >> {host.dir}/changes; touch {host.dir}/started; "
                        + WAIT_FOR_GO,
             "target": "environment", "mutates": True, "rollback": "undo", "timeout": 60,
             "params": {"version": {"pattern": r"^v\d+\.\d+\.\d+$"}}},
    "undo": {"description": "put the host back", "target": "environment", "mutates": True,
             "command": "echo undo >> {host.dir}/changes"},
}
POLICY = {"environments": {"production": {"approvers": {"users": ["alice", "bob", "carol"]},
                                          "self_approval": False}}}
GO_NO_GO = {"after_batches": [1], "timeout": "30m", "on_timeout": "rollback"}


def _config(tmp_path: Path, fleet: SSHFleet, judgment: dict[str, Any] | None) -> Config:
    for name in HOSTS:
        (tmp_path / "hosts" / name).mkdir(parents=True)
    rollout: dict[str, Any] = {"batch_size": 1, **({"judgment": judgment} if judgment else {})}
    data = {"inventory": {
                "known_hosts": str(fleet.known_hosts),
                "hosts": {n: fleet.inventory_host(n, vars={"dir": str(tmp_path / "hosts" / n)})
                          for n in HOSTS},
                "environments": {"production": {"hosts": list(HOSTS), "rollout": rollout}}},
            "tools": TOOLS, "policy": POLICY, "vars": {"go": str(tmp_path / "go")}}
    path = tmp_path / "deckhand.yml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


def _plan() -> Any:
    return make_plan([{"id": "ship", "tool": "ship",
                       "params": {"environment": "production", "version": VERSION}}],
                     rollback=[{"id": "undo", "tool": "undo",
                                "params": {"environment": "production"}}])


def _changes(tmp_path: Path) -> list[list[str]]:
    """Each host's change log: what ran there, in order."""
    logs = [tmp_path / "hosts" / h / "changes" for h in HOSTS]
    return [p.read_text().split() if p.exists() else [] for p in logs]


def _spawn(config: Config, url: str, name: str, log: Path, *,
           lease: float = 1.0) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "worker", "--config", str(config.path),
             "--name", name, "--lease", f"{lease:g}", "--claim-after", f"{lease:g}",
             "--log-format", "json"],
            env={**os.environ, "REDIS_URL": url, "PYTHONPATH": str(ROOT)},
            stdout=out, stderr=out, cwd=ROOT)


def _said(log: Path) -> list[str]:
    """The messages of a worker's JSON log so far (whole lines only)."""
    return [json.loads(line)["message"] for line in log.read_text().split("\n")[:-1]
            if line.strip().startswith("{")]


class TwoWorkers:
    """`deckhand worker` w1 and w2 on one store, each logging to its own file; one of them
    takes the queued run (``holder``), the other is idle until it takes the run over."""

    def __init__(self, tmp_path: Path, config: Config, url: str, store: Store, run_id: str,
                 *, lease: float = 1.0):
        self.store, self.run_id = store, run_id
        self.logs = {n: tmp_path / f"{n}.log" for n in ("w1", "w2")}
        self.procs = {n: _spawn(config, url, n, log, lease=lease)
                      for n, log in self.logs.items()}

    @property
    def holder(self) -> str:
        return str(wait_until(lambda: self.store.runs.get(self.run_id).worker,
                              what="a worker to take the run"))

    def other(self, name: str) -> str:
        return "w2" if name == "w1" else "w1"

    def wait_ready(self) -> None:
        """Both workers are serving (connected to the store, reading the queue)."""
        for name in self.procs:
            wait_until(lambda n=name: self.logged(n, f"worker {n} ready"), timeout=60,
                       what=f"worker {name} to be ready")

    def logged(self, name: str, text: str) -> bool:
        return any(text in m for m in _said(self.logs[name]))

    def kill(self, name: str) -> None:
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait(10)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)  # a stalled one, too
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def cli(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("REDIS_URL", redis_url)  # `deckhand pause|resume|judge` share it
    yield


def _cli(config: Config, *args: str) -> int:
    return main([*args, "--config", str(config.path)])


def _held_by(store: Store, run_id: str, taker: str, said: Callable[[], bool]) -> Run:
    """Wait until ``taker`` holds the run, having said so (``said``) — or until the run
    ended (as it did before issue 39: rolled back by the taker, nobody resuming)."""
    wait_until(lambda: said() or store.runs.get(run_id).status.terminal,
               timeout=30, what=f"{taker} to take the run over and hold it")
    run = store.runs.get(run_id)
    assert run.status is RunStatus.RUNNING, (run.status, run.reason)
    assert run.worker == taker and store.r.get(store.keys.owner(run_id)) == taker.encode()
    return run


def _assert_each_host_changed_once(tmp_path: Path, store: Store, run_id: str,
                                   holder: str, taker: str) -> list[AuditEntry]:
    final = store.runs.get(run_id)
    assert final.status is RunStatus.SUCCEEDED, final.reason
    assert _changes(tmp_path) == [[VERSION]] * 3  # once each, nothing undone
    assert final.changed_hosts == list(HOSTS)
    audit = store.audit.entries(run_id=run_id)
    resumed = [(e.actor, e.details.get("previous_worker")) for e in audit
               if e.action == "resumed"]
    assert resumed == [(taker, holder)]
    assert [(e.actor, e.details["status"]) for e in audit if e.action == "step_finished"
            and not e.details.get("after_lease_lost")] == [(taker, "succeeded")]
    assert "rollback_started" not in [e.action for e in audit]
    return audit


def _paused_in_batch_1(tmp_path: Path, store: Store, config: Config, run_id: str,
                       holder: Callable[[], str], said: Callable[[str, str], bool]) -> Run:
    """Pause the run while batch 1 runs (`deckhand pause`), then let batch 1 end: the run
    holds before batch 2. The record as then stored."""
    wait_until((tmp_path / "hosts" / "prod-1" / "started").exists, what="batch 1 to start")
    assert _cli(config, "pause", run_id, "--user", "alice") == 0
    wait_until(lambda: said(holder(), "paused by alice"), what="the pause to be relayed")
    (tmp_path / "go").touch()  # batch 1 ends; batch 2 is held
    held = wait_until(lambda: (r := store.runs.get(run_id)).paused and r,
                      what="the run to hold before batch 2")
    assert held.paused is not None and held.paused.before == "batch 2 of 3 of ship"
    return held


PAUSED_SAID = "paused by alice; step ship waits"  # resumed: held before its next batch


def test_a_paused_run_stays_paused_on_the_worker_that_takes_it_over(
        tmp_path: Path, store: Store, redis_url: str, sshd_hosts: SSHFleet, cli: None) -> None:
    config = _config(tmp_path, sshd_hosts, judgment=None)
    run_id = submit(build_services(config, store=store), _plan(), by="alice",
                    approvers=("bob",)).id
    workers = TwoWorkers(tmp_path, config, redis_url, store, run_id)
    try:
        held = _paused_in_batch_1(tmp_path, store, config, run_id, lambda: workers.holder,
                                  workers.logged)
        holder = workers.holder
        taker = workers.other(holder)
        workers.kill(holder)
        run = _held_by(store, run_id, taker, lambda: workers.logged(taker, PAUSED_SAID))
        assert run.paused == held.paused  # the same pause: who, since when, its deadline
        assert _changes(tmp_path) == [[VERSION], [], []]  # nothing new on the hosts
        assert _cli(config, "resume", run_id, "--user", "bob") == 0
        wait_until(lambda: store.runs.get(run_id).status.terminal, timeout=60,
                   what="the run to finish on the worker that took it over")
    finally:
        (tmp_path / "go").touch()
        workers.stop()
    audit = _assert_each_host_changed_once(tmp_path, store, run_id, holder, taker)
    assert [(e.action, e.actor) for e in audit if e.action in ("run_paused", "run_resumed")] \
        == [("run_paused", holder), ("run_resumed", taker)]


def test_a_paused_run_whose_queue_entry_was_lost_is_requeued_still_paused(
        tmp_path: Path, store: Store, redis_url: str, sshd_hosts: SSHFleet, cli: None,
        caplog: pytest.LogCaptureFixture) -> None:
    """The reconciler's path to the same takeover: the dead worker's queue entry is gone
    (lost with a failed-over primary), so no XAUTOCLAIM finds it; the reconciler queues the
    run again and a worker resumes it, still paused."""
    caplog.set_level(logging.INFO, logger="deckhand.executor")
    config = _config(tmp_path, sshd_hosts, judgment=None)
    services = build_services(config, store=store)
    run_id = submit(services, _plan(), by="alice", approvers=("bob",)).id
    log = tmp_path / "doomed.log"
    doomed = _spawn(config, redis_url, "doomed", log)
    rescuer = Worker(services, store, name="rescuer",
                     options=WorkerOptions(lease=1, claim_after=1, block=0.1))
    thread = threading.Thread(target=rescuer.step, kwargs={"block": 0.1})
    try:
        _paused_in_batch_1(tmp_path, store, config, run_id, lambda: "doomed",
                           lambda _, text: any(text in m for m in _said(log)))
        held = store.runs.get(run_id)
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)
        entries = [entry for entry, run in store.queue.entries() if run == run_id]
        store.r.xack(store.keys.queue(), GROUP, *entries)  # lost: nothing left to claim
        store.r.xdel(store.keys.queue(), *entries)
        wait_until(lambda: not store.r.exists(store.keys.owner(run_id)), timeout=10,
                   what="the dead worker's lease to run out")
        assert rescuer.reconcile() == [run_id]
        thread.start()
        run = _held_by(store, run_id, "rescuer",
                       lambda: any(PAUSED_SAID in r.getMessage() for r in caplog.records))
        assert run.paused == held.paused
        assert _changes(tmp_path) == [[VERSION], [], []]
        steer(config.policy, Control.RESUME, run_id, runs=store.runs, audit=store.audit,
              user="bob", via="cli")
        thread.join(60)
    finally:
        (tmp_path / "go").touch()
        if doomed.poll() is None:
            doomed.kill()
        if thread.is_alive():  # a failed test: let the rescuer roll back and go
            with contextlib.suppress(ApprovalRefused):
                store.runs.request_cancel(run_id, user="test")
            thread.join(60)
    _assert_each_host_changed_once(tmp_path, store, run_id, "doomed", "rescuer")


def _at_go_no_go(store: Store, run_id: str) -> Judgment:
    held = wait_until(lambda: store.runs.get(run_id).awaiting,
                      what="the run to hold for a go/no-go after batch 1")
    assert held.hold == "ship/1"
    return held


def test_a_go_no_go_hold_is_the_same_hold_on_the_worker_that_takes_it_over(
        tmp_path: Path, store: Store, redis_url: str, sshd_hosts: SSHFleet, cli: None) -> None:
    config = _config(tmp_path, sshd_hosts, judgment=GO_NO_GO)
    (tmp_path / "go").touch()  # no batch waits: the rollout holds at its go/no-go
    run_id = submit(build_services(config, store=store), _plan(), by="alice",
                    approvers=("bob",)).id
    workers = TwoWorkers(tmp_path, config, redis_url, store, run_id)
    try:
        held = _at_go_no_go(store, run_id)
        holder = workers.holder
        taker = workers.other(holder)
        workers.kill(holder)
        run = _held_by(store, run_id, taker, lambda: workers.logged(
            taker, "still awaiting go/no-go after batch 1 of 3 of ship"))
        assert run.judgments == [held]  # the same hold: its name, since, deadline, buttons
        assert _changes(tmp_path) == [[VERSION], [], []]
        assert _cli(config, "judge", run_id, "continue", "--user", "carol") == 0
        wait_until(lambda: store.runs.get(run_id).status.terminal, timeout=60,
                   what="the run to finish on the worker that took it over")
    finally:
        workers.stop()
    audit = _assert_each_host_changed_once(tmp_path, store, run_id, holder, taker)
    assert [e.actor for e in audit if e.action == "judgment_awaited"] == [holder]  # once
    assert [(e.actor, e.details["decision"]) for e in audit if e.action == "judged"] == [
        ("carol", "continue")]
    (decided,) = store.runs.get(run_id).judgments
    assert decided.since == held.since and decided.decision is not None
    assert decided.decision.actor == "carol"


def test_the_idle_worker_that_claims_a_held_run_after_an_outage_keeps_it_held(
        tmp_path: Path, own_redis: RedisServer, sshd_hosts: SSHFleet,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A Redis outage longer than the lease while the run waits at its go/no-go, both
    workers alive: the idle one claims the run as Redis returns. (The holder is stalled
    through the outage, SIGSTOP, so that the idle one wins the race for the lapsed lease;
    once it is let go it finds the run is another worker's and starts nothing.)"""
    monkeypatch.setenv("REDIS_URL", own_redis.url)
    store = Store.connect(own_redis.url)
    config = _config(tmp_path, sshd_hosts, judgment=GO_NO_GO)
    (tmp_path / "go").touch()
    run_id = submit(build_services(config, store=store), _plan(), by="alice",
                    approvers=("bob",)).id
    workers = TwoWorkers(tmp_path, config, own_redis.url, store, run_id)
    try:
        held = _at_go_no_go(store, run_id)
        holder = workers.holder
        taker = workers.other(holder)
        workers.wait_ready()  # the idle one too: it must be serving when Redis goes
        workers.procs[holder].send_signal(signal.SIGSTOP)
        own_redis.stop()
        # a failed look for work has first spent the client's retry budget (over a
        # second): the 1 s lease, last renewed before the outage, ran out while it lasted
        wait_until(lambda: any(m.startswith(f"worker {taker}: ") for m in
                               _said(workers.logs[taker])), timeout=30,
                   what="the outage to outlive the lease")
        own_redis.start()
        run = _held_by(store, run_id, taker, lambda: workers.logged(
            taker, "still awaiting go/no-go after batch 1 of 3 of ship"))
        assert run.judgments == [held]
        workers.procs[holder].send_signal(signal.SIGCONT)
        wait_until(lambda: "lease_lost" in [e.action for e in store.audit.entries(
            run_id=run_id)], timeout=30, what="the stalled worker to learn it lost the run")
        assert store.runs.get(run_id).awaiting == held  # its cancel decided nothing
        assert _changes(tmp_path) == [[VERSION], [], []]
        assert _cli(config, "judge", run_id, "continue", "--user", "carol") == 0
        wait_until(lambda: store.runs.get(run_id).status.terminal, timeout=60,
                   what="the run to finish on the worker that claimed it")
    finally:
        if own_redis.proc is None:
            own_redis.start()
        workers.stop()
    audit = _assert_each_host_changed_once(tmp_path, store, run_id, holder, taker)
    assert [(e.actor, e.details["decision"]) for e in audit if e.action == "judged"] == [
        ("carol", "continue")]
    # what the stalled worker made of it once let go: its own step, marked as such
    assert [(e.details["status"], e.details.get("after_lease_lost")) for e in audit
            if e.action == "step_finished" and e.actor == holder] == [("cancelled", True)]


def test_a_revision_awaiting_approval_stays_held_when_its_queue_entry_is_taken_over(
        tmp_path: Path, store: Store, sshd_hosts: SSHFleet) -> None:
    """The third hold: a replan whose revision needs approval, its worker gone right after
    (its queue entry still pending). The worker that takes the entry over leaves the run
    waiting for approval, takes no lock, and is done with the entry; the approval of the
    revision queues the run again."""
    config = _config(tmp_path, sshd_hosts, judgment=None)
    services = build_services(config, store=store)
    run_id = submit(services, _plan(), by="alice", approvers=("bob",)).id
    store.queue.ensure_group()
    assert store.queue.read("ghost", block=0.1) is not None  # taken by a worker…
    assert store.leases.claim(run_id, worker="ghost", lease=60) is not None
    store.runs.update(run_id, lambda r: r.move(RunStatus.AWAITING_APPROVAL))  # …replanned
    store.r.delete(store.keys.owner(run_id))  # …and gone, its entry never acknowledged
    rescuer = Worker(services, store, name="rescuer",
                     options=WorkerOptions(lease=1, claim_after=0.1, block=0.1))
    wait_until(lambda: rescuer.step(block=0.1), timeout=10, what="the entry to be taken over")
    assert store.runs.get(run_id).status is RunStatus.AWAITING_APPROVAL  # still held
    assert store.locks.all() == []  # nothing locked for a run nobody may run yet
    assert store.queue.backlog() == (0, 0)  # the entry is done with
    assert not rescuer.step(block=0.1)
