"""The embedded Redis server's idle watcher (``agents.store.local_server``): run as a script
on the standard library alone (``python -I idle_stop.py HOME IDLE``), detached from the
deckhand that started it, so it costs no command its start.

It holds ``HOME/watch.lock`` for its life (one watcher per server) and stops the server
once no deckhand process has held ``users.lock`` for IDLE seconds (nor touched it: a
command that came and went between two looks counts too). It stops the server while holding
``users.lock`` exclusively, so nobody joins a server that is going away; it exits as soon
as the server is gone, whoever stopped it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import sys
import time
from pathlib import Path

PING = b"*1\r\n$4\r\nPING\r\n"
SHUTDOWN = b"*1\r\n$8\r\nSHUTDOWN\r\n"


def main(argv: list[str]) -> int:
    home, idle = Path(argv[0]), float(argv[1])
    watch = os.open(home / "watch.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(watch, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # the server has its watcher already
    os.ftruncate(watch, 0)
    os.write(watch, str(os.getpid()).encode())  # who watches, for whoever must stop it
    sock, users = home / "redis.sock", home / "users.lock"
    if not _answers(sock):
        return 0  # stopped before this watcher got going
    server = _server_pid(home)
    tick = max(0.05, min(5.0, idle / 10))
    busy_at = time.time()
    while True:
        time.sleep(tick)
        if not _answers(sock):  # gone (killed, or stopped by hand): the next deckhand starts
            _stop_orphan(server, sock)  # one; a server whose socket was deleted is stopped
            return 0
        if _stop_if_idle(sock, users, busy_at, idle):
            return 0
        busy_at = _busy_at(users, busy_at)


def _busy_at(users: Path, busy_at: float) -> float:
    """Now if a deckhand holds ``users``, else ``busy_at``."""
    fd = os.open(users, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return time.time()
    finally:
        os.close(fd)
    return busy_at


def _stop_if_idle(sock: Path, users: Path, busy_at: float, idle: float) -> bool:
    """Stop the server (holding ``users`` exclusively) if nobody used it for ``idle`` s."""
    fd = os.open(users, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        if time.time() - max(busy_at, os.stat(users).st_mtime) < idle:
            return False
        with contextlib.suppress(OSError):  # it closes the connection as it goes
            _send(sock, SHUTDOWN)  # the AOF is fsynced before it exits
        deadline = time.monotonic() + 60
        while _answers(sock) and time.monotonic() < deadline:
            time.sleep(0.02)
        return True
    finally:
        os.close(fd)


def _server_pid(home: Path) -> int | None:
    """The server's pid, as its pid file says (it is written as the server starts)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            return int((home / "server.pid").read_text().strip())
        time.sleep(0.05)
    return None


def _stop_orphan(pid: int | None, sock: Path) -> None:
    """SIGTERM ``pid`` if it is still the server of ``sock`` (the state directory was
    removed under it: nobody could reach it again); it saves and exits."""
    if pid is None:
        return
    with contextlib.suppress(OSError):
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        if str(sock).encode() in cmdline:
            os.kill(pid, signal.SIGTERM)


def _answers(sock: Path) -> bool:
    try:
        return bool(_send(sock, PING))  # any reply: alive (LOADING, too)
    except OSError:
        return False


def _send(sock: Path, command: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(5)
        conn.connect(str(sock))
        conn.sendall(command)
        return conn.recv(256)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
