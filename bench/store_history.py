"""The store with a long history: reads stay bounded as finished runs pile up (issue 22).

Seeds N realistic finished runs through deckhand's own store API (mixed outcomes, two
environments, 46 requesters, audit entries, locks taken and released), then times what
people do every day, each as a ratio against one bare Redis round trip measured in the
same run (the floor no read can beat), and against what the store did before:

* ``runs`` (the newest 20), ``audit`` (the newest 200), ``audit --run`` (one run's entries),
  the App Home's lock listing, a prefix lookup (``runs show 01JD3…``);
* the old way: the whole audit stream read and filtered (XRANGE), locks found by SCAN;
* Redis bytes per run, the queue's length (acknowledged entries are deleted), and
  ``deckhand check --store`` over the whole history.

Run: python -m bench.store_history [--runs 20000]
(starts its own redis-server on a free port; or set REDIS_URL, whose database is flushed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis

from agents.ids import short_id
from agents.plan import Plan
from agents.policy import Policy
from agents.runs import Run, RunStatus
from agents.store import Store
from agents.store.check import StoreCheck
from tests.fixtures.sample import free_port

ENVS = ("staging", "production")
OUTCOMES = (RunStatus.SUCCEEDED, RunStatus.SUCCEEDED, RunStatus.SUCCEEDED, RunStatus.FAILED,
            RunStatus.CANCELLED)
REQUESTERS = [f"U{i:03d}" for i in range(46)]
DAY = 86_400.0


@contextmanager
def redis_url() -> Iterator[str]:
    """REDIS_URL if set, else a private redis-server without persistence."""
    given = os.environ.get("REDIS_URL")
    if given:
        yield given
        return
    port, binary = free_port(), shutil.which("redis-server")
    assert binary, "redis-server is not installed"
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1",
                                 "--save", "", "--appendonly", "no", "--dir", tmp],
                                stdout=subprocess.DEVNULL)
        client = redis.Redis(port=port)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.02)
        try:
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait()


def seed_one(store: Store, n: int, now: float, policy: Policy) -> str:
    """One finished run, written the way the bot and a worker write it."""
    env = ENVS[n % 2]
    plan = store.save_plan(Plan.model_validate({
        "goal": f"deploy v2.{n % 50}.{n % 7} to {env}", "requested_by": REQUESTERS[n % 46],
        "steps": [{"id": "deploy", "tool": "deploy", "params": {"environment": env}}]}))
    created = now - (n % 500) * DAY / 10
    run = store.create_run(Run.for_plan(plan, created_at=created))
    store.audit("planned", actor=run.requested_by, run_id=run.id, plan_id=plan.id)
    outcome = OUTCOMES[n % len(OUTCOMES)]
    if outcome is RunStatus.CANCELLED:
        store.request_cancel(run.id, user=run.requested_by)
        return run.id
    store.approve(run.id, user="UAPPROVER", plan_version=1, plan_hash=plan.hash, policy=policy)
    store.audit("approved", actor="UAPPROVER", run_id=run.id, plan_id=plan.id)
    entry = store.read_queue("bench", block=0.001)
    store.acquire_locks([env], run_id=run.id, worker="bench", ttl=600)
    store.claim(run.id, worker="bench", lease=600)
    store.transition(run.id, outcome)
    store.audit("run_finished", actor="bench", run_id=run.id, status=outcome.value)
    store.release_locks([env], run_id=run.id)
    store.release(run.id, worker="bench")
    if entry:
        store.ack(entry[0])
    return run.id


def timed(action: Callable[[], Any], repeat: int = 5) -> float:
    """Median seconds of ``action``."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def report(store: Store, ids: list[str], bytes_per_run: float) -> None:
    client, some = store.r, ids[len(ids) // 2]
    floor = timed(lambda: client.get("bench:nothing"), repeat=200)
    rows = [
        ("runs (newest 20)", lambda: store.runs(limit=20), None),
        ("audit (newest 200)", lambda: store.audit_log(limit=200),
         lambda: client.xrange(store.keys.audit())),
        ("audit --run", lambda: store.audit_log(run_id=some),
         lambda: [f for _, f in client.xrange(store.keys.audit())
                  if f[b"run_id"] == some.encode()]),
        ("App Home locks", store.locks,
         lambda: list(client.scan_iter(store.keys.lock("*")))),
        ("runs show PREFIX", lambda: store.find_run(short_id(some)), None),
    ]
    print(f"one bare round trip: {floor * 1e6:.0f} µs")
    for name, now_, old in rows:
        took = timed(now_)
        line = f"{name:<20} {took * 1e3:8.2f} ms  = {took / floor:7.1f} round trips"
        if old is not None:
            before = timed(old, repeat=1)
            line += f"   (before: {before * 1e3:8.1f} ms, {before / took:,.0f}x slower)"
        print(line)
    print(f"Redis bytes per run: {bytes_per_run:,.0f}; queue length: "
          f"{client.xlen(store.keys.queue())} (acknowledged entries are deleted)")
    started = time.perf_counter()
    found = StoreCheck(store).violations()
    print(f"check --store over {len(ids):,} runs: {time.perf_counter() - started:.1f} s, "
          f"{len(found)} violation(s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20_000)
    args = parser.parse_args()
    with redis_url() as url:
        store = Store.connect(url)
        store.r.flushdb()
        store.ensure_group()
        policy, now = Policy(), time.time()
        base = int(store.r.info("memory")["used_memory"])
        started = time.perf_counter()
        ids = [seed_one(store, n, now, policy) for n in range(args.runs)]
        seeded = time.perf_counter() - started
        used = int(store.r.info("memory")["used_memory"]) - base
        print(f"seeded {args.runs:,} runs in {seeded:.0f} s "
              f"({args.runs / seeded:,.0f} runs/s through the store API)")
        report(store, ids, used / args.runs)
        store.r.flushdb()


if __name__ == "__main__":
    main()
