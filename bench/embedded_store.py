"""The embedded store's cost on ``deckhand run``: the same command (a local deploy from
``deckhand init``'s config, ``--yes``) on the in-process store, on the state directory's
server already running (warm), and with the server started by the command (cold: stopped
before each rep), against ``deckhand --version`` measured in the same run, medians of N
interleaved reps; then opening the store alone in one process (``Store.local``).

Run: python -m bench.embedded_store [--reps 7]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def env(mode: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DECKHAND_CONFIG")}
    return {**base, "PYTHONPATH": str(ROOT), "DECKHAND_EMBEDDED_STORE": mode}


def wall(args: list[str], cwd: Path, mode: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "bot.launch", *args], cwd=cwd, env=env(mode),
                   check=True, capture_output=True, stdin=subprocess.DEVNULL)
    return time.perf_counter() - started


def stop_server(home: Path) -> None:
    """SHUTDOWN, then wait until the socket is gone (the watcher then exits on its own)."""
    try:
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(str(home / "redis.sock"))
            conn.sendall(b"*1\r\n$8\r\nSHUTDOWN\r\n")
            conn.recv(64)
    except OSError:
        pass
    deadline = time.monotonic() + 30
    while (home / "redis.sock").exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def commands(work: Path, reps: int) -> dict[str, list[float]]:
    home = work / ".deckhand" / "redis"
    took: dict[str, list[float]] = {}
    cases: dict[str, Callable[[int], float]] = {
        "deckhand --version": lambda i: wall(["--version"], work, "server"),
        "run, in-process store": lambda i: wall(["run", f"deploy v1.0.{i}", "--yes"], work,
                                                "memory"),
        "run, server warm": lambda i: wall(["run", f"deploy v1.1.{i}", "--yes"], work, "server"),
        "run, server cold": lambda i: (stop_server(home), wall(
            ["run", f"deploy v1.2.{i}", "--yes"], work, "server"))[1]}
    wall(["run", "deploy v0.9.0", "--yes"], work, "server")  # warm caches, start the server
    for i in range(reps):
        for name, case in cases.items():
            took.setdefault(name, []).append(case(i))
    stop_server(home)
    return took


def opening(work: Path, reps: int) -> dict[str, float]:
    """Store.local alone, in this process: cold (server started) and warm, and in-process."""
    sys.path.insert(0, str(ROOT))
    from agents.store import Store

    state = work / "open"
    home = state / "redis"
    found: dict[str, list[float]] = {}
    for _ in range(reps):
        for name in ("cold", "warm", "memory"):
            if name == "cold":
                stop_server(home)
            started = time.perf_counter()
            store = Store.local(state, mode="server" if name != "memory" else "memory")
            store.r.ping()
            found.setdefault(name, []).append(time.perf_counter() - started)
            if store.server is not None:
                store.server.close()
    stop_server(home)
    return {name: statistics.median(v) for name, v in found.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="deckhand-bench-") as tmp:
        work = Path(tmp)
        subprocess.run([sys.executable, "-m", "bot.launch", "init"], cwd=work, env=env("server"),
                       check=True, capture_output=True)
        medians = {k: statistics.median(v) for k, v in commands(work, args.reps).items()}
        peer = medians["deckhand --version"]
        for name, value in medians.items():
            print(f"{name:<24} {value * 1e3:7.0f} ms  ({value / peer:5.1f}× --version)")
        base = medians["run, in-process store"]
        for name in ("run, server warm", "run, server cold"):
            print(f"added by {name.removeprefix('run, ')}: {(medians[name] - base) * 1e3:+.0f} ms "
                  f"({medians[name] / base:.2f}× the in-process run)")
        print("opening the store alone (Store.local, then PING), in one process:")
        for name, value in opening(work, args.reps).items():
            print(f"  {name:<7} {value * 1e3:7.1f} ms")


if __name__ == "__main__":
    main()
