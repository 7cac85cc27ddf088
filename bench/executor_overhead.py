"""Executor overhead, measured against peers in the same run.

1. Per-step overhead of the executor over a bare ``subprocess.run`` of the same command:
   an 8-step chain of ``true`` steps, median over repetitions (target < 5 ms).
2. For a DAG of sleeping steps, wall time / critical-path time (target <= 1.05).

Run: python -m bench.executor_overhead [--reps 30]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from agents.plan.model import Plan
from tests.fixtures.builders import make_config, make_executor

TOOLS = """
tools:
  noop:
    description: do nothing
    command: "true"
  nap:
    description: sleep
    command: "sleep {seconds}"
    params: {seconds: {type: string, pattern: '^[0-9.]+$'}}
"""

# A DAG with fan-out and fan-in; critical path a -> c -> f -> g = 0.2+0.5+0.3+0.2 = 1.2 s
SLEEPS = {"a": 0.2, "b": 0.3, "c": 0.5, "d": 0.4, "e": 0.2, "f": 0.3, "g": 0.2}
DEPS = {"a": [], "b": [], "c": ["a"], "d": ["a", "b"], "e": ["b"], "f": ["c", "d"],
        "g": ["f", "e"]}


def chain_plan(n: int) -> Plan:
    steps = [{"id": f"s{i}", "tool": "noop", "depends_on": [f"s{i - 1}"] if i else []}
             for i in range(n)]
    return Plan.model_validate({"goal": "chain", "steps": steps})


def sleep_plan() -> Plan:
    steps = [{"id": k, "tool": "nap", "params": {"seconds": str(v)}, "depends_on": DEPS[k]}
             for k, v in SLEEPS.items()]
    return Plan.model_validate({"goal": "dag", "steps": steps})


def bare_median(reps: int) -> float:
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        subprocess.run(["/bin/sh", "-c", "true"], check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def executor_per_step(executor, reps: int, steps: int = 8) -> float:
    plan = chain_plan(steps)
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        run = executor.execute(plan)
        times.append((time.perf_counter() - started) / steps)
        assert run.status.value == "succeeded"
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        executor = make_executor(make_config(Path(tmp), tools=TOOLS))
        executor_per_step(executor, 3)  # warm up imports and thread pools
        bare = bare_median(args.reps * 8)
        per_step = executor_per_step(executor, args.reps)
        print(f"bare subprocess `true`: {bare * 1000:.2f} ms median")
        print(f"executor per step:     {per_step * 1000:.2f} ms median (8-step chain)")
        print(f"overhead per step:     {(per_step - bare) * 1000:.2f} ms "
              f"(ratio executor/bare {per_step / bare:.2f}x; target overhead < 5 ms)")
        plan = sleep_plan()
        critical = plan.critical_path(SLEEPS)[1]
        walls = []
        for _ in range(3):
            started = time.perf_counter()
            executor.execute(plan)
            walls.append(time.perf_counter() - started)
        wall = statistics.median(walls)
        print(f"sleep DAG: wall {wall:.3f} s / critical path {critical:.3f} s = "
              f"{wall / critical:.3f} (target <= 1.05)")


if __name__ == "__main__":
    main()
