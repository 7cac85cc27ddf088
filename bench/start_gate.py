"""What the start gate costs a command: ``run("true")`` on a warm SSH connection and as a
local subprocess, with a start gate (the wrapper waits on stdin until the gate has
recorded its process group and answers "go", as every run's command does) and without
(as before), medians measured in the same run.

The gate here answers at once (a Redis WAIT adds one round trip to a replica on top).

Run: python -m bench.start_gate [--reps 200]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.fixtures.sshd import start_fleet
from tools.inventory import Inventory
from tools.runners.base import Runner
from tools.runners.local import LocalRunner
from tools.runners.pool import RunnerPool


def median_ms(action: Callable[[], object], reps: int) -> float:
    action()  # warm
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1e3


def compare(name: str, runner: Runner, reps: int) -> None:
    plain = median_ms(lambda: runner.run("true", timeout=10), reps)
    gated = median_ms(lambda: runner.run("true", timeout=10, on_start=lambda pid: None), reps)
    print(f"{name:<24} ungated {plain:6.2f} ms   gated {gated:6.2f} ms   "
          f"({gated / plain:.2f}×, +{gated - plain:.2f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        fleet = start_fleet(Path(tmp) / "fleet", ["bench-0"])
        inventory = Inventory.model_validate({
            "known_hosts": str(fleet.known_hosts),
            "hosts": {"bench-0": fleet.inventory_host("bench-0")}})
        pool = RunnerPool(inventory=inventory)
        try:
            compare("ssh, warm connection", pool.for_host(inventory.hosts["bench-0"]),
                    args.reps)
            compare("local subprocess", LocalRunner(), args.reps)
        finally:
            pool.close()
            fleet.stop()


if __name__ == "__main__":
    main()
