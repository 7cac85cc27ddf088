"""Keys in `deckhand run`'s live table: p pauses, r resumes, s stops (after y/N), on a real
pseudo-terminal, deploying over real sshd with the run recorded in real Redis; the
terminal's mode is what it was once deckhand exits, and a pipe gets no keys."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agents.run.record import RunStatus, StepStatus, Verdict
from agents.store import Store
from tests.fixtures.polling import wait_until
from tests.fixtures.sshd import SSHFleet

ROOT = Path(__file__).resolve().parents[2]
HINT = "p pause · r resume · s stop · Ctrl-C cancel"


def _config(tmp_path: Path, fleet: SSHFleet) -> Path:
    """Staging is sshd host staging-1; `ship` runs `first` (which holds until released)
    then `second`."""
    flag, second = tmp_path / "started", tmp_path / "second"
    data = {
        "inventory": {"known_hosts": str(fleet.known_hosts),
                      "hosts": {"staging-1": fleet.inventory_host("staging-1")},
                      "environments": {"staging": {"hosts": ["staging-1"]}}},
        "tools": {
            "first": {"description": "say it started, then hold until released",
                      "command": f"echo started > {flag}; while [ ! -e {flag}.release ]; "
                                 f"do sleep 0.05; done",
                      "target": "environment", "mutates": True, "rollback": "undo"},
            "second": {"description": "the next step", "command": f"echo ran > {second}",
                       "target": "environment", "mutates": True, "rollback": "undo"},
            "undo": {"description": "put the host back", "command": "true",
                     "target": "environment", "mutates": True}},
        "playbooks": [{"name": "ship", "match": ["^ship$"], "goal": "ship it to staging",
                       "steps": [{"id": "first", "tool": "first",
                                  "params": {"environment": "staging"}},
                                 {"id": "second", "tool": "second", "depends_on": ["first"],
                                  "params": {"environment": "staging"}}],
                       "rollback": [{"id": "undo", "tool": "undo",
                                     "params": {"environment": "staging"}}]}],
    }
    path = tmp_path / "deckhand.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class Terminal:
    """A pseudo-terminal: deckhand's stdin and stdout are its slave; everything it draws is
    read off the master (a full pty would block the writer) into ``screen``."""

    def __init__(self) -> None:
        self.master, self.slave = pty.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        self.mode = termios.tcgetattr(self.slave)
        self._out = bytearray()
        self._wake_r, self._wake_w = os.pipe()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while True:
            ready, _, _ = select.select([self.master, self._wake_r], [], [])
            if self._wake_r in ready:
                return
            try:
                self._out += os.read(self.master, 65536)
            except OSError:
                return

    @property
    def screen(self) -> str:
        return bytes(self._out).decode("utf-8", "replace")

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def close(self) -> None:
        os.write(self._wake_w, b"x")
        self._reader.join(5)
        for fd in (self.master, self.slave, self._wake_r, self._wake_w):
            os.close(fd)


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    term = Terminal()
    yield term
    term.close()


def _deckhand_run(config: Path, redis_url: str, *, stdin: int, stdout: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT),
           "TERM": "xterm-256color", "COLUMNS": "200"}
    # a process group of its own, whose parent (pytest) is in another one of the session:
    # never an orphaned group, where the kernel discards a Ctrl-Z (SIGTSTP) — as it would
    # for pytest's own group when whatever started pytest has exited
    return subprocess.Popen([sys.executable, "-m", "bot.cli", "run", "ship", "--yes",
                             "--user", "alice", "--config", str(config)],
                            stdin=stdin, stdout=stdout, stderr=stdout, env=env, cwd=ROOT,
                            process_group=0)


def _actions(store: Store, run_id: str) -> list[tuple[str, str | None]]:
    return [(e.action, e.details.get("via")) for e in store.audit.entries(run_id=run_id)]


def _heartbeats(store: Store, run_id: str, count: int) -> None:
    """Wait for ``count`` renewals of the worker's lease on ``run_id``: its heartbeat, which
    relays a pause to the run right after renewing, has run that often since the call."""
    key, seen = store.keys.owner(run_id), {"ttl": store.r.pttl(store.keys.owner(run_id)),
                                           "beats": 0}

    def renewed() -> bool:
        ttl = store.r.pttl(key)
        seen["beats"] += ttl > seen["ttl"]
        seen["ttl"] = ttl
        return seen["beats"] >= count

    wait_until(renewed, what=f"{count} heartbeats of the run's worker")


def test_p_pauses_r_resumes_and_the_terminal_gets_its_mode_back(
        tmp_path: Path, sshd_hosts: SSHFleet, store: Store, redis_url: str,
        terminal: Terminal) -> None:
    proc = _deckhand_run(_config(tmp_path, sshd_hosts), redis_url, stdin=terminal.slave,
                         stdout=terminal.slave)
    try:
        wait_until(lambda: (tmp_path / "started").exists(), what="the first step to start")
        run_id = store.runs.recent(limit=1)[0].id
        wait_until(lambda: HINT in terminal.screen, what="the keys' hint under the table")

        terminal.type(b"r")  # nothing to resume: one line, audited, no traceback
        wait_until(lambda: ("resume_refused", "terminal") in _actions(store, run_id),
                   what="the refused resume in the audit")
        wait_until(lambda: "resume refused: run" in terminal.screen, what="the refusal")
        terminal.type(b"sn")  # a stop that is not confirmed stops nothing
        wait_until(lambda: "Not stopped." in terminal.screen, what="the unconfirmed stop")
        assert store.runs.cancel_requested(run_id) is None

        terminal.type(b"p")
        wait_until(lambda: store.runs.pause_requested(run_id), what="the pause request")
        _heartbeats(store, run_id, 2)  # a pause reaches the run within one heartbeat
        (tmp_path / "started.release").touch()  # the first step ends; the second must wait
        held = wait_until(lambda: store.runs.get(run_id).paused, what="the run to hold")
        assert (held.by, held.via, held.before) == ("alice", "terminal", "step second")
        wait_until(lambda: "⏸ paused by alice (terminal)" in terminal.screen,
                   what="the live table to show the pause")
        run = store.runs.get(run_id)
        assert run.steps["first"].status is StepStatus.SUCCEEDED
        assert run.steps["second"].status is StepStatus.PENDING
        assert not (tmp_path / "second").exists()

        terminal.type(b"r")
        assert proc.wait(20) == 0, terminal.screen
    finally:
        (tmp_path / "started.release").touch()
        if proc.poll() is None:
            proc.kill()
    assert (tmp_path / "second").read_text() == "ran\n"  # the host ran the second step
    run = store.runs.get(run_id)
    assert run.status is RunStatus.SUCCEEDED and run.paused is None
    actions = _actions(store, run_id)
    assert ("pause_requested", "terminal") in actions
    assert ("resume_requested", "terminal") in actions
    assert "Traceback" not in terminal.screen
    assert termios.tcgetattr(terminal.slave) == terminal.mode  # cooked again, echo on


@contextlib.contextmanager
def _reading_keys(tmp_path: Path, fleet: SSHFleet, redis_url: str,
                  terminal: Terminal) -> Iterator[subprocess.Popen[bytes]]:
    """`deckhand run` on the terminal, its first step holding and its keys being read; the
    step is released and the process gone however the block ends."""
    proc = _deckhand_run(_config(tmp_path, fleet), redis_url, stdin=terminal.slave,
                         stdout=terminal.slave)
    try:
        wait_until(lambda: (tmp_path / "started").exists(), what="the first step to start")
        wait_until(lambda: HINT in terminal.screen, what="the keys to be read")
        yield proc
    finally:
        (tmp_path / "started.release").touch()
        if proc.poll() is None:
            proc.kill()


def test_ctrl_c_in_cbreak_mode_still_cancels_and_gives_the_mode_back(
        tmp_path: Path, sshd_hosts: SSHFleet, store: Store, redis_url: str,
        terminal: Terminal) -> None:
    with _reading_keys(tmp_path, sshd_hosts, redis_url, terminal) as proc:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 1, terminal.screen  # cancelled and rolled back
    assert store.runs.recent(limit=1)[0].status is RunStatus.CANCELLED
    assert termios.tcgetattr(terminal.slave) == terminal.mode


def _state(pid: int) -> str:
    """The process's state letter in /proc (T: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_ctrl_z_gives_the_terminal_back_and_fg_takes_the_keys_again(
        tmp_path: Path, sshd_hosts: SSHFleet, store: Store, redis_url: str,
        terminal: Terminal) -> None:
    with _reading_keys(tmp_path, sshd_hosts, redis_url, terminal) as proc:
        assert termios.tcgetattr(terminal.slave)[3] & termios.ICANON == 0  # cbreak
        proc.send_signal(signal.SIGTSTP)  # Ctrl-Z
        wait_until(lambda: _state(proc.pid) == "T", what="deckhand to stop")
        assert termios.tcgetattr(terminal.slave) == terminal.mode  # the shell's mode, as it was
        proc.send_signal(signal.SIGCONT)  # fg
        wait_until(lambda: termios.tcgetattr(terminal.slave)[3] & termios.ICANON == 0,
                   what="cbreak mode again after fg")
        run_id = store.runs.recent(limit=1)[0].id
        terminal.type(b"p")  # the keys work again
        wait_until(lambda: store.runs.pause_requested(run_id), what="the pause request")
        terminal.type(b"r")
        wait_until(lambda: store.runs.pause_requested(run_id) is None, what="the resume")
        (tmp_path / "started.release").touch()
        assert proc.wait(20) == 0, terminal.screen
    assert store.runs.recent(limit=1)[0].status is RunStatus.SUCCEEDED
    assert "Traceback" not in terminal.screen
    assert termios.tcgetattr(terminal.slave) == terminal.mode


def test_keys_on_a_pipe_do_nothing(tmp_path: Path, sshd_hosts: SSHFleet, store: Store,
                                   redis_url: str, terminal: Terminal) -> None:
    (tmp_path / "started.release").touch()  # nothing holds: the run goes straight through
    proc = _deckhand_run(_config(tmp_path, sshd_hosts), redis_url, stdin=subprocess.PIPE,
                         stdout=terminal.slave)
    assert proc.stdin is not None
    proc.stdin.write(b"ps")  # piped in, not typed: no pause, no stop
    proc.stdin.close()
    assert proc.wait(20) == 0, terminal.screen
    run = store.runs.recent(limit=1)[0]
    assert run.status is RunStatus.SUCCEEDED
    assert not {a for a, _ in _actions(store, run.id)} & {"pause_requested", "cancel_requested"}
    assert HINT not in terminal.screen


def _judged_config(tmp_path: Path, fleet: SSHFleet) -> Path:
    """`ship` deploys to prod-1 then prod-2, with a go/no-go after the first batch."""
    hosts = ("prod-1", "prod-2")
    step = {"environment": "production"}
    data = {
        "inventory": {"known_hosts": str(fleet.known_hosts),
                      "hosts": {n: fleet.inventory_host(n) for n in hosts},
                      "environments": {"production": {"hosts": list(hosts), "rollout": {
                          "batch_size": 1, "judgment": {"after_batches": [1]}}}}},
        "tools": {"deploy": {"description": "mark the host", "target": "environment",
                             "command": f"echo {{host.name}} >> {tmp_path}/deployed",
                             "mutates": True, "rollback": "undo"},
                  "undo": {"description": "put the host back", "command": "true",
                           "target": "environment", "mutates": True}},
        "playbooks": [{"name": "ship", "match": ["^ship$"], "goal": "ship it",
                       "steps": [{"id": "deploy", "tool": "deploy", "params": step}],
                       "rollback": [{"id": "undo", "tool": "undo", "params": step}]}],
    }
    path = tmp_path / "deckhand.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_the_keys_stand_aside_for_the_go_no_go_question(
        tmp_path: Path, sshd_hosts: SSHFleet, store: Store, redis_url: str,
        terminal: Terminal) -> None:
    proc = _deckhand_run(_judged_config(tmp_path, sshd_hosts), redis_url,
                         stdin=terminal.slave, stdout=terminal.slave)
    try:
        wait_until(lambda: "Continue or Roll back?" in terminal.screen, what="the question")
        # no reader in cbreak mode while the line prompt asks: the terminal is as it was
        assert termios.tcgetattr(terminal.slave) == terminal.mode
        terminal.type(b"c\n")
        assert proc.wait(20) == 0, terminal.screen
    finally:
        if proc.poll() is None:
            proc.kill()
    run = store.runs.recent(limit=1)[0]
    assert (tmp_path / "deployed").read_text().split() == ["prod-1", "prod-2"]
    decision = run.judgments[0].decision
    assert decision is not None and (decision.actor, decision.via, decision.verdict) == (
        "alice", "terminal", Verdict.CONTINUE)
    assert termios.tcgetattr(terminal.slave) == terminal.mode
