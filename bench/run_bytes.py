"""Redis bytes per run, on realistic records: 8-step, 3-host deploys run by a real worker.

The runs go the whole way (planned, approved, queued, claimed, executed over three hosts by
the executor with the worker's recorder, history recorded, audit written), each step
printing a few lines as a deploy script does. Then every key Redis holds is sized with
``MEMORY USAGE`` and grouped by kind, and the run record's JSON is split by field, so the
README's figure comes from what a real run leaves behind.

Run: python -m bench.run_bytes [--runs 20]
(starts its own redis-server on a free port; or set REDIS_URL, whose database is flushed).
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from collections import Counter
from pathlib import Path

from agents.engine.worker import Worker, WorkerOptions
from agents.run.record import Run
from agents.services import build_services
from agents.store import Store
from bench.store_history import redis_url
from tests.fixtures.builders import fleet_config, make_plan
from tests.integration.test_store import submit

SCRIPT = ("echo '==> fetching release'; echo 'release v2.4.1 (sha 3f9c2e1)'; "
          "echo '==> unpacking into /srv/app/releases/20261125'; echo 'done in 0.4s'")
STEPS = 8


def plan_of(n: int) -> object:
    steps = [{"id": f"step_{i}", "tool": "change", "depends_on": [f"step_{i - 1}"] if i else [],
              "description": f"deploy part {i} of release {n}",
              "params": {"environment": "fleet", "label": f"v2.4.{n}", "script": SCRIPT}}
             for i in range(STEPS)]
    return make_plan(steps, goal=f"deploy v2.4.{n} to fleet",
                     rollback=[{"id": "undo", "tool": "undo", "params": {"environment": "fleet"}}])


def kind_of(key: bytes) -> str:
    """deckhand:run:ID -> run; deckhand:plan:ID:v1 -> plan; ids become *."""
    name = key.decode()
    name = re.sub(r"(run|plan|aud|sched)-[0-9a-z]+", "*", name)
    return name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    with redis_url() as url, tempfile.TemporaryDirectory() as tmp:
        store = Store.connect(url)
        store.r.flushdb()
        store.queue.ensure_group()
        services = build_services(fleet_config(Path(tmp)), store=store)
        worker = Worker(services, store, name="bench", options=WorkerOptions(block=0.1))
        base = {k: int(store.r.memory_usage(k) or 0) for k in store.r.scan_iter(count=1000)}
        ids = []
        for n in range(args.runs):
            run = submit(services, plan_of(n))  # type: ignore[arg-type]
            worker.step(block=1)
            ids.append(run.id)
        sizes: Counter[str] = Counter()
        for key in store.r.scan_iter(count=1000):
            sizes[kind_of(key)] += int(store.r.memory_usage(key) or 0) - base.get(key, 0)
        total = sum(sizes.values())
        last = store.runs.get(ids[-1])
        print(f"{args.runs} runs of {STEPS} steps on 3 hosts, status {last.status.value}")
        print(f"Redis bytes per run: {total / args.runs:,.0f}")
        for kind, size in sizes.most_common(8):
            print(f"  {kind:<40} {size / args.runs:8,.0f}")
        record(last)


def record(run: Run) -> None:
    """The run record's JSON, field by field (what the bytes are spent on)."""
    data = json.loads(run.model_dump_json())
    whole = len(run.model_dump_json())
    print(f"run record JSON: {whole:,} bytes; by field:")
    for key, value in sorted(data.items(), key=lambda kv: -len(json.dumps(kv[1]))):
        print(f"  {key:<20} {len(json.dumps(value, separators=(',', ':'))):7,}")
    host = next(iter(next(iter(data["steps"].values()))["hosts"].values()))
    print(f"one host result: {len(json.dumps(host, separators=(',', ':')))} bytes: "
          f"{json.dumps(host)[:300]}")


if __name__ == "__main__":
    main()
