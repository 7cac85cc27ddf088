"""Store throughput against a local redis-server, and worker scaling.

1. Atomic run transitions per second (WATCH/MULTI compare-and-set), against bare
   GET+SET round trips on the same server as the peer.
2. 100 runs of a 5-step plan drained by 4 worker processes vs 1: wall-time ratio
   (target near-linear to the core count), and peak RSS per worker (target < 80 MB).

Run: REDIS_URL=redis://127.0.0.1:6379/15 python -m bench.store_throughput
(the database in REDIS_URL is flushed).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from agents.plan.targets import PlanTargets
from agents.run.record import Run
from agents.services import build_services
from agents.store import Store
from tests.fixtures.builders import make_config, make_plan

TOOLS = """
tools:
  work:
    description: a short piece of work
    command: "sleep 0.05"
"""
ROOT = Path(__file__).resolve().parents[1]


def transitions_per_second(store: Store, count: int = 2000) -> float:
    plan = make_plan([{"id": "a", "tool": "work"}])
    store.plans.save(plan)
    run = store.runs.create(Run.for_plan(plan, PlanTargets({})))
    started = time.perf_counter()
    for i in range(count):
        store.runs.update(run.id, lambda r, i=i: r.meta.__setitem__("n", i))
    return count / (time.perf_counter() - started)


def bare_round_trips(client: redis.Redis, count: int = 2000) -> float:
    started = time.perf_counter()
    for i in range(count):
        client.get("bench:x")
        client.set("bench:x", i)
    return count / (time.perf_counter() - started)


def enqueue_runs(store: Store, config_path: Path, runs: int) -> list[str]:
    from agents.config import load_config

    services = build_services(load_config(config_path), store=store)
    plan_steps = [{"id": f"s{i}", "tool": "work", "depends_on": [f"s{i-1}"] if i else []}
                  for i in range(5)]
    ids = []
    for _ in range(runs):
        plan = make_plan(plan_steps)
        store.plans.save(plan)
        run = store.runs.create(Run.for_plan(plan, services.targets(plan)))
        store.runs.approve(run.id, face="cli", user="bench", plan_version=1, plan_hash=plan.hash,
                           policy=services.config.policy)
        ids.append(run.id)
    return ids


def drain(url: str, config_path: Path, workers: int, runs: int) -> tuple[float, list[int]]:
    store = Store.connect(url)
    store.r.flushdb()
    ids = enqueue_runs(store, config_path, runs)
    env = {**os.environ, "REDIS_URL": url}
    started = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "bot.cli", "worker", "--config",
                               str(config_path), "--name", f"bench-{i}"], env=env, cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for i in range(workers)]
    while any(not store.runs.get(i).status.terminal for i in ids):
        time.sleep(0.05)
    wall = time.perf_counter() - started
    rss = [_peak_rss_kb(p.pid) for p in procs]
    for proc in procs:
        proc.terminate()
        proc.wait()
    return wall, rss


def _peak_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def main() -> None:
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
    store = Store.connect(url)
    store.r.flushdb()
    cas = transitions_per_second(store)
    bare = bare_round_trips(store.r)
    print(f"CAS transitions: {cas:,.0f}/s; bare GET+SET pairs: {bare:,.0f}/s "
          f"(ratio {cas / bare:.2f})")
    with tempfile.TemporaryDirectory() as tmp:
        config = make_config(Path(tmp), tools=TOOLS)
        one, rss1 = drain(url, config.path, 1, 100)
        four, rss4 = drain(url, config.path, 4, 100)
    print(f"100 runs x 5 steps: 1 worker {one:.1f} s, 4 workers {four:.1f} s "
          f"(speed-up {one / four:.2f}x on {os.cpu_count()} cores)")
    print(f"peak RSS per worker: max {max(rss1 + rss4) / 1024:.0f} MB (target < 80 MB)")
    store.r.flushdb()


if __name__ == "__main__":
    main()
