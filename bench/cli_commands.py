"""Read-only commands on the embedded default (no REDIS_URL: the state directory's server,
running): ``runs``, ``where``, ``history``, ``plan``, ``check``, against ``deckhand
--version`` measured in the same run, medians of N interleaved reps, wall and CPU (user +
sys of the child). ``--against PATH`` also times another checkout (e.g. main) in the same
run, on its own default store.

Run: python -m bench.cli_commands [--reps 7] [--against /path/to/other/checkout]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = [["--version"], ["runs"], ["where"], ["history", "production"],
            ["plan", "deploy v1.0.0"], ["check"]]


def timed(args: list[str], cwd: Path, source: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one ``deckhand ARGS`` from ``source``."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DECKHAND_CONFIG",
                                                            "DECKHAND_EMBEDDED_STORE")}
    env["PYTHONPATH"] = str(source)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "bot.launch", *args], cwd=cwd, env=env, check=True,
                   capture_output=True, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(sources: dict[str, Path], work: Path, reps: int
            ) -> dict[tuple[str, str], tuple[float, float]]:
    samples: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for _ in range(reps):
        for label, source in sources.items():
            for args in COMMANDS:
                samples.setdefault((label, " ".join(args)), []).append(
                    timed(args, work, source))
    return {key: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
            for key, v in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--against", type=Path, help="another checkout, timed alike")
    args = parser.parse_args()
    sources = {"this": ROOT, **({"other": args.against} if args.against else {})}
    with tempfile.TemporaryDirectory(prefix="deckhand-bench-") as tmp:
        work = Path(tmp)
        timed(["init"], work, ROOT)
        timed(["run", "deploy v1.0.0", "--yes"], work, ROOT)  # history to show; starts the server
        found = measure(sources, work, args.reps)
        subprocess.run(["redis-cli", "-s", str(work / ".deckhand/redis/redis.sock"), "shutdown"],
                       capture_output=True, check=False)
    for label in sources:
        peer = found[(label, "--version")][0]
        print(f"{label} ({sources[label]}):")
        for args_ in COMMANDS:
            wall, cpu = found[(label, " ".join(args_))]
            print(f"  {' '.join(args_):<22} {wall * 1e3:6.0f} ms wall ({wall / peer:4.1f}× "
                  f"--version), {cpu * 1e3:5.0f} ms CPU")


if __name__ == "__main__":
    main()
