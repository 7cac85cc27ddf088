"""A frozen host: the sshd session serving a step is SIGSTOPped (TCP stays open) while the
command runs past its deadline. deckhand says "killed" only when the host confirmed it —
through a fresh connection when the frozen one does not answer — and otherwise says the
command may still be running there, and counts the host as changed."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.engine.recorder import RunRecorder
from agents.plan.targets import resolve
from agents.run.executor import Executor, ExecutorDeps, Listener
from agents.run.record import Event, EventKind, Run, RunStatus
from agents.store import Store
from tests.fixtures.builders import make_plan
from tests.fixtures.polling import wait_until
from tests.fixtures.sshd import SSHFleet
from tests.integration.test_ssh_truth import _session_processes
from tools.catalog import Catalog, Tool
from tools.inventory import SSHSettings
from tools.runners.base import CancelToken
from tools.runners.pool import RunnerPool
from tools.runners.ssh import SSHOptions


def _catalog(tmp_path: Path) -> Catalog:
    return Catalog({
        "hang": Tool(name="hang", description="a command that outlives its deadline",
                     command=f"echo started >> {tmp_path}/log; sleep 600", target="group:prod-1",
                     mutates=True, rollback="undo", timeout=3),
        "undo": Tool(name="undo", description="undo it", target="group:prod-1",
                     command=f"echo undone >> {tmp_path}/log", mutates=True)})


class _Freezer:
    """Freezes prod-1's sshd session(s) once the step's command has started."""

    def __init__(self, fleet: SSHFleet, log: Path, *, listener_too: bool,
                 thaw_at_rollback: bool = False):
        self.fleet, self.log, self.listener_too = fleet, log, listener_too
        self.thaw_at_rollback = thaw_at_rollback
        self.alive_at_rollback = False
        self.frozen: list[int] = []
        self.pgid: int | None = None
        self.alive = False
        """Whether the command's process group still ran when the test thawed the host."""

    def __call__(self, event: Event, run: Run) -> None:
        if event.kind is EventKind.ROLLBACK_STARTED and self.thaw_at_rollback:
            self.alive_at_rollback = self.pgid is not None and _group_alive(self.pgid)
            for pid in self.frozen:  # the host answers again, its command still running
                os.kill(pid, signal.SIGCONT)
        if event.kind is EventKind.HOST_PID and self.pgid is None and event.pid is not None:
            # the process group is known before the command runs (its start gate waits for
            # "go" on the same session): freeze once the command itself has started
            self.pgid = event.pid
            threading.Thread(target=self._freeze_when_started, daemon=True).start()

    def _freeze_when_started(self) -> None:
        wait_until(lambda: self.log.exists() and "started" in self.log.read_text(),
                   timeout=10, what="the command to start")
        self._freeze()

    def _freeze(self) -> None:
        frozen = _session_processes(self.fleet, "prod-1")
        listener = self.fleet["prod-1"].proc
        if self.listener_too and listener is not None:  # no fresh connection either
            frozen.append(listener.pid)
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        self.frozen = frozen

    def thaw(self, *, kill: bool = True) -> None:
        self.alive = self.pgid is not None and _group_alive(self.pgid)
        for pid in self.frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        if self.pgid is not None and kill:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pgid, signal.SIGKILL)


@pytest.fixture
def pool(sshd_hosts: SSHFleet) -> Iterator[RunnerPool]:
    pool = RunnerPool(inventory=sshd_hosts.inventory(),
                      ssh_options=SSHOptions(connect_timeout=1.0, kill_grace=1.0),
                      ssh=SSHSettings(connect_attempts=1, connect_timeout=1.0))
    yield pool
    pool.close()


def _run(tmp_path: Path, pool: RunnerPool, freezer: _Freezer,
         store: Store | None = None, *, thaw: bool = True) -> Run:
    """The run, executed here; with ``store``, also recorded and audited there as a
    worker's recorder does (claimed by worker "w")."""
    assert pool.inventory is not None
    catalog = _catalog(tmp_path)
    executor = Executor(ExecutorDeps(catalog, pool.inventory, pool.for_host))
    plan = make_plan([{"id": "deploy", "tool": "hang"}], rollback=[{"id": "undo", "tool": "undo"}])
    run: Run | None = None
    listeners: list[Listener] = [freezer]
    if store is not None:
        store.plans.save(plan)
        created = store.runs.create(Run.for_plan(plan, resolve(plan, catalog, pool.inventory)))
        for status in (RunStatus.APPROVED, RunStatus.QUEUED):
            store.runs.transition(created.id, status)
        run = store.leases.claim(created.id, worker="w", lease=600)
        listeners = [RunRecorder(leases=store.leases, audit=store.audit, plans=store.plans,
                                 worker="w", token=CancelToken()), freezer]
    try:
        return executor.execute(plan, run, listeners=listeners)
    finally:
        if thaw:
            freezer.thaw()


def _group_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process is in process group ``pgid`` (reads /proc)."""
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def test_a_frozen_session_is_killed_through_a_fresh_connection(
        tmp_path: Path, sshd_hosts: SSHFleet, pool: RunnerPool) -> None:
    freezer = _Freezer(sshd_hosts, tmp_path / "log", listener_too=False)
    run = _run(tmp_path, pool, freezer)
    assert freezer.frozen and freezer.pgid is not None
    error = run.steps["deploy"].error or ""
    assert "timed out after 3s; the process was killed" in error, error
    assert not freezer.alive  # gone before anyone thawed the host
    assert run.status is RunStatus.ROLLED_BACK, run.reason
    assert (tmp_path / "log").read_text().splitlines() == ["started", "undone"]


def test_a_kill_that_cannot_be_confirmed_says_the_command_may_still_run(
        tmp_path: Path, sshd_hosts: SSHFleet, pool: RunnerPool, store: Store) -> None:
    freezer = _Freezer(sshd_hosts, tmp_path / "log", listener_too=True)
    ran = _run(tmp_path, pool, freezer, store)
    assert freezer.pgid is not None
    assert freezer.alive  # it was, indeed, still running
    run = store.runs.get(ran.id)  # the record in Redis, as a worker leaves it
    error = run.steps["deploy"].error or ""
    assert "may still be running on host prod-1" in error and "killed" not in error, error
    assert "prod-1" in run.changed_hosts  # the record says the host may differ
    assert run.steps["deploy"].hosts["prod-1"].pid == freezer.pgid  # for whoever stops it
    assert run.status is RunStatus.ROLLBACK_FAILED, run.reason  # not "rolled back"
    (finished,) = [e.details for e in store.audit.entries(run_id=run.id)
                   if e.action == "step_finished" and e.details["step"] == "deploy"]
    assert "may still be running on host prod-1" in finished["error"]
    assert "killed" not in finished["error"]


def test_the_rollback_first_stops_what_an_unconfirmed_kill_left_running(
        tmp_path: Path, sshd_hosts: SSHFleet, pool: RunnerPool) -> None:
    freezer = _Freezer(sshd_hosts, tmp_path / "log", listener_too=True, thaw_at_rollback=True)
    run = _run(tmp_path, pool, freezer)
    assert "may still be running on host prod-1" in (run.steps["deploy"].error or "")
    assert freezer.alive_at_rollback  # still running when the rollback began...
    assert not freezer.alive  # ...and stopped by it, before its undo ran
    assert run.steps["deploy"].hosts["prod-1"].pid is None
    assert run.status is RunStatus.ROLLED_BACK, run.reason
    assert (tmp_path / "log").read_text().splitlines() == ["started", "undone"]


def test_what_an_unconfirmed_kill_left_running_is_killed_once_the_host_answers(
        tmp_path: Path, sshd_hosts: SSHFleet, pool: RunnerPool, store: Store) -> None:
    """The worker's sweep retries the kill after the run ended: while the host is still
    frozen it says so once (record, audit, the run's feed); once the host thaws — the
    command running on — the kill is confirmed, the record forgets the group, and it is
    said."""
    from agents.engine.leftovers import RetryKills

    freezer = _Freezer(sshd_hosts, tmp_path / "log", listener_too=True)
    try:
        ran = _run(tmp_path, pool, freezer, store, thaw=False)
        assert freezer.pgid is not None
        assert pool.inventory is not None
        inventory = pool.inventory
        retry = RetryKills(runs=store.runs, audit=store.audit, feed=store.run_feed,
                           runner_for=pool.for_host, hosts=lambda: inventory.hosts, actor="w2")
        assert retry.sweep() == [f"run {ran.id}: deploy on prod-1 (process group "
                                 f"{freezer.pgid}): unconfirmed"]
        assert retry.sweep() == []  # said once, not every sweep
        feed = [e.data["text"] for e in store.run_feed.read(ran.id, after="0-0", count=1000)
                if e.kind == "say"]
        assert len(feed) == 1 and "may still be running: the kill is still not confirmed" \
            in feed[0] and "keeps trying until" in feed[0], feed
    finally:
        freezer.thaw(kill=False)  # the host answers again; its command runs on
    assert freezer.alive and _group_alive(freezer.pgid)
    assert retry.sweep() == [f"run {ran.id}: deploy on prod-1 (process group "
                             f"{freezer.pgid}): stopped"]
    assert not _group_alive(freezer.pgid)  # on the host itself
    run = store.runs.get(ran.id)
    assert run.steps["deploy"].hosts["prod-1"].pid is None  # nothing left to stop
    assert retry.sweep() == []
    outcomes = [e.details["outcome"] for e in store.audit.entries(run_id=ran.id)
                if e.action == "leftover_stopped"]
    assert outcomes == ["unconfirmed", "stopped"]
    said = [e.data["text"] for e in store.run_feed.read(ran.id, after="0-0", count=1000)
            if e.kind == "say"]
    assert len(said) == 2 and "is stopped now: the host confirmed it" in said[1], said
