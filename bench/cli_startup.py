"""CLI start-up: ``deckhand --version`` through the entry point (bot.launch) against the
whole CLI (bot.cli, what the entry point was) and a bare interpreter, medians of N runs
measured in the same run; then the heaviest imports of the whole CLI (``-X importtime``).

Run: python -m bench.cli_startup [--reps 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {"bare python": ["-c", "pass"],
         "deckhand --version (bot.launch)": ["-m", "bot.launch", "--version"],
         "whole CLI --version (bot.cli)": ["-m", "bot.cli", "--version"]}


def wall(args: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    subprocess.run([sys.executable, *args], env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def heaviest(count: int = 6) -> list[tuple[int, str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    err = subprocess.run([sys.executable, "-X", "importtime", "-m", "bot.cli", "--version"],
                         env=env, check=True, capture_output=True, text=True).stderr
    rows = []
    for line in err.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit() and parts[2].startswith("   ") \
                and not parts[2].startswith("    "):  # top-level imports of bot.cli
            rows.append((int(parts[1]), parts[2].strip()))
    return sorted(rows, reverse=True)[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    medians = {name: statistics.median(wall(a) for _ in range(args.reps))
               for name, a in CASES.items()}
    bare = medians["bare python"]
    for name, took in medians.items():
        print(f"{name:<34} {took * 1e3:7.0f} ms  ({took / bare:4.1f}× a bare interpreter)")
    print("heaviest imports under bot.cli (cumulative µs):")
    for micros, name in heaviest():
        print(f"  {micros:>9,}  {name}")


if __name__ == "__main__":
    main()
