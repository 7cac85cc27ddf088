"""The store with a long history: reads stay bounded as finished runs pile up (issues 22, 23).

Seeds N realistic finished runs (8 steps on 3 hosts each, with output; mixed outcomes, two
environments, 46 requesters, audit entries, locks taken and released, a deploy recorded in
the history for each run that ran, ages spread over ~100 days, 30 schedules): the first
``--through-api`` through deckhand's own store API, the rest as copies of those with the
same keys and shapes. Then it times what people do every day, each as a ratio against one
bare Redis round trip measured in the same run (the floor no read can beat), and against
what the store did before:

* ``runs`` (the newest 20), ``audit`` (the newest 200), ``audit --run`` (one run's entries),
  the App Home's lock listing, a prefix lookup (``runs show 01JD3…``);
* ``history ENV``, ``where``, ``stats ENV`` (DORA over every deploy in 30 days; "before" is
  the count is printed beside the old newest-500 sample's), everything the
  App Home reads for one user, ``schedules list``;
* the old way: the whole audit stream read and filtered (XRANGE), locks found by SCAN;
* Redis bytes per run, the queue's length (acknowledged entries are deleted), and
  ``deckhand check --store`` over the whole history;
* retention: the runs and audit entries older than 50 days exported to a JSONL file and
  trimmed (runs/s), then ``check --store`` again and the bytes it freed.

Run: python -m bench.store_history [--runs 20000]
(starts its own redis-server on a free port; or set REDIS_URL, whose database is flushed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import redis

from agents.config import load_config
from agents.engine.retention import Retention
from agents.history.deploys import Deploy, stats
from agents.history.facts import fact_member
from agents.ids import new_id, short_id
from agents.plan.model import Plan
from agents.plan.targets import PlanTargets
from agents.policy.rules import Policy
from agents.run.record import Event, EventKind, Run, RunStatus
from agents.schedules.model import Schedule, utc_now
from agents.services import Services, build_services
from agents.store import Store
from agents.store.check import StoreCheck
from agents.store.history import HISTORY_READ
from bench.timing import median_ms
from bot.schedule_commands import handle_schedule_command
from bot.slack.home import home_data
from tests.fixtures.builders import fan_out_events
from tests.fixtures.sample import EXAMPLES, free_port

ENVS = ("staging", "production")
STEPS = ("preflight", "fetch", "migrate", "stop_old", "switch", "start_new", "smoke",
         "cleanup")
"""A realistic deploy: 8 steps, each on the environment's 3 hosts, each printing a few lines."""
TAIL = ("==> fetching release v2.4.1 (sha 3f9c2e1)\nunpacked into /srv/app/releases/"
        "20261125T1403\nhealth check: 200 OK in 41 ms\ndone in 2.3s\n")
OUTCOMES = (RunStatus.SUCCEEDED, RunStatus.SUCCEEDED, RunStatus.SUCCEEDED, RunStatus.FAILED,
            RunStatus.CANCELLED)
REQUESTERS = [f"U{i:03d}" for i in range(46)]
DAY = 86_400.0
SPREAD = 100 * DAY
"""Runs are created over this many days back; retention trims the older half."""


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


class Clock:
    """The store's clock while seeding: each run happens at its own time in the past."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def seed_one(store: Store, clock: Clock, n: int, total: int, policy: Policy) -> str:
    """One finished run, written the way the bot and a worker write it, at its own time."""
    env, now = ENVS[n % 2], time.time()
    clock.now = now - SPREAD * (total - n) / total  # oldest first, as history accrues
    version = f"v2.{n % 50}.{n % 7}"
    plan = store.plans.save(Plan.model_validate({
        "goal": f"deploy {version} to {env}", "requested_by": REQUESTERS[n % 46],
        "steps": [{"id": step, "tool": "deploy", "depends_on": [STEPS[i - 1]] if i else [],
                   "description": f"{step} {version} on {env}",
                   "params": {"environment": env, "version": version}}
                  for i, step in enumerate(STEPS)]}))
    run = Run.for_plan(plan, PlanTargets({}), created_at=clock.now)
    run.environments = [env]
    run = store.runs.create(run)
    store.audit.record("planned", actor=run.requested_by, run_id=run.id, plan_id=plan.id)
    outcome = OUTCOMES[n % len(OUTCOMES)]
    if outcome is RunStatus.CANCELLED:
        store.runs.request_cancel(run.id, user=run.requested_by)
        return run.id
    store.runs.approve(run.id, face="cli", user="UAPPROVER", plan_version=1, plan_hash=plan.hash,
                       policy=policy)
    entry = store.queue.read("bench", block=0.001)
    store.locks.acquire(None, [env], run_id=run.id, worker="bench", ttl=600)
    claimed = store.leases.claim(run.id, worker="bench", lease=600)
    if claimed is not None:  # what a worker leaves: 8 steps, each on 3 hosts, with output
        executed(claimed, env)
        store.leases.save_as_owner(claimed, worker="bench")
    clock.now += 60
    store.runs.transition(run.id, outcome)
    store.audit.record("run_finished", actor="bench", run_id=run.id, status=outcome.value)
    store.history.record(None, run.id, [deploy_of(run, env, n, outcome, clock.now)])
    store.locks.release(None, [env], run_id=run.id)
    store.leases.release(run.id, worker="bench")
    if entry:
        store.queue.ack(entry[0])
    return run.id


def executed(run: Run, env: str) -> None:
    """Apply the events of a real 8-step, 3-host run (as the executor emits them)."""
    hosts = [f"{env}-{h}" for h in (1, 2, 3)]
    for step in STEPS:
        for event in fan_out_events(run.id, step, hosts):
            run.apply(event)
        for result in run.steps[step].hosts.values():
            result.tail = TAIL
        run.apply(Event(kind=EventKind.STEP_FINISHED, run_id=run.id, step_id=step,
                        status="succeeded"))


def deploy_of(run: Run, env: str, n: int, outcome: RunStatus, at: float) -> Deploy:
    version = f"v2.{n % 50}.{n % 7}"
    return Deploy(run_id=run.id, environment=env, version=version, outcome=outcome,
                  requested_by=run.requested_by, approvers=["UAPPROVER"], started_at=at - 60,
                  finished_at=at, goal=run.goal,
                  hosts={f"{env}-{h}": version for h in (1, 2)})


def clone(store: Store, template: list[str], start: int, total: int) -> list[str]:
    """Runs ``start``..``total`` as copies of the ``template`` runs (seeded through the
    store API), written with the same keys and shapes in pipelines of 500: on a loaded
    machine the API seeds a few dozen runs a second, and 100,000 would take hours."""
    models = [_template(store, run_id) for run_id in template]
    ids: list[str] = []
    for first in range(start, total, 500):
        with store.r.pipeline(transaction=False) as pipe:
            for n in range(first, min(first + 500, total)):
                at = time.time() - SPREAD * (total - n) / total
                ids.append(_write_copy(store, pipe, models[n % len(models)], at))
            pipe.execute()
    return ids


def _template(store: Store, run_id: str) -> dict[str, Any]:
    run = store.runs.get(run_id)
    return {"run": run, "plan": store.plans.get(run.plan_id),
            "audit": [json.loads(i) for i in store.r.lrange(store.keys.run_audit(run_id), 0, -1)],
            "deploys": [d for env in ENVS
                        for d in store.history.recent(None, env, limit=HISTORY_READ)
                        if d.run_id == run_id]}


def _write_copy(store: Store, pipe: Any, model: dict[str, Any], at: float) -> str:
    keys, run, plan = store.keys, model["run"], model["plan"]
    shift = at - run.created_at
    new_plan = plan.model_copy(update={"id": new_id("plan"), "created_at": at})
    new_run = run.model_copy(update={
        "id": new_id("run"), "plan_id": new_plan.id, "created_at": at,
        "started_at": run.started_at and run.started_at + shift,
        "finished_at": run.finished_at and run.finished_at + shift})
    pipe.set(keys.plan(new_plan.id, 1), new_plan.model_dump_json())
    pipe.set(keys.plan_latest(new_plan.id), 1)
    pipe.set(keys.run(new_run.id), new_run.model_dump_json())
    pipe.zadd(keys.runs(), {new_run.id: at})
    pipe.zadd(keys.run_ids(), {new_run.id: 0})
    for entry in model["audit"]:
        copy = {**entry, "ref": new_id("aud"), "at": repr(float(entry["at"]) + shift),
                "run_id": new_run.id, "plan_id": new_plan.id if entry["plan_id"] else ""}
        pipe.xadd(keys.audit(), copy)
        pipe.rpush(keys.run_audit(new_run.id), json.dumps(copy))
    for deploy in model["deploys"]:
        moved = deploy.model_copy(update={"run_id": new_run.id,
                                          "started_at": deploy.started_at + shift,
                                          "finished_at": deploy.finished_at + shift})
        env = deploy.environment
        pipe.zadd(keys.history(None, env), {moved.model_dump_json(): moved.finished_at})
        pipe.zadd(keys.history_facts(None, env), {fact_member(moved): moved.finished_at})
        pipe.set(keys.history_recorded(new_run.id), "1")
    return str(new_run.id)


def seed_schedules(store: Store, count: int = 30) -> None:
    book, now = store.schedules, utc_now()
    for n in range(count):
        book.create(Schedule(spec=f"every day at {n % 24:02d}:00", cron=f"0 {n % 24} * * *",
                             request=f"deploy v2.{n}.0 to staging", created_by="U001",
                             created_at=now, armed_at=now))


def home_reader(services: Services) -> Callable[[], Any]:
    """Everything the App Home reads for one user (``bot.slack.home.home_data``), with the
    Slack parts it does not read left out."""
    bot = SimpleNamespace(store=services.store, services=services,
                          directory=SimpleNamespace(groups_of=lambda user: []))
    return lambda: home_data(bot, "U001")  # type: ignore[arg-type]


def rows(store: Store, services: Services, some: str) -> list[tuple[str, Any, Any]]:
    client, now = store.r, time.time()
    return [
        ("runs (newest 20)", lambda: store.runs.recent(limit=20), None),
        ("audit (newest 200)", lambda: store.audit.entries(limit=200),
         lambda: client.xrange(store.keys.audit())),
        ("audit --run", lambda: store.audit.entries(run_id=some),
         lambda: [f for _, f in client.xrange(store.keys.audit())
                  if f[b"run_id"] == some.encode()]),
        ("App Home locks", store.locks.all,
         lambda: list(client.scan_iter(store.keys.lock(None, "*")))),
        ("runs show PREFIX", lambda: store.runs.find(short_id(some)), None),
        ("history production", lambda: store.history.recent(None, "production", limit=20), None),
        ("where", store.history.matrix, None),
        ("stats production", lambda: stats(
            store.history.facts_since(None, "production", now - 30 * DAY), environment="production",
            now=now, days=30), lambda: stats(
            store.history.since(None, "production", now - 30 * DAY), environment="production",
            now=now, days=30)),
        ("App Home (all data)", home_reader(services), None),
        ("schedules list", lambda: handle_schedule_command(
            ["list"], user="U001", user_groups=[], channel=None, services=services,
            now=utc_now()), None),
    ]


def report(store: Store, services: Services, ids: list[str], bytes_per_run: float) -> None:
    client, some = store.r, ids[len(ids) // 2]
    floor = median_ms(lambda: client.get("bench:nothing"), 200)
    print(f"one bare round trip: {floor * 1e3:.0f} µs")
    for name, now_, old in rows(store, services, some):
        took = median_ms(now_, 5)
        line = f"{name:<20} {took:8.2f} ms  = {took / floor:7.1f} round trips"
        if old is not None:
            before = median_ms(old, 1)
            line += f"   (before: {before:8.1f} ms, {before / took:,.0f}x slower)"
        print(line)
    window = stats(store.history.facts_since(None, "production", time.time() - 30 * DAY),
                   environment="production", now=time.time(), days=30)
    sample = stats(store.history.recent(None, "production", limit=HISTORY_READ),
                   environment="production", now=time.time(), days=30)
    print(f"deploy facts index: {client.zcard(store.keys.history_facts(None, 'production')):,} of "
          f"{client.zcard(store.keys.history(None, 'production')):,} production deploys")
    print(f"stats production, 30 days: {window.deploys:,} deploys ({window.per_day:.2f}/day) "
          f"read whole; the old newest-{HISTORY_READ} sample said {sample.deploys:,} "
          f"({sample.per_day:.2f}/day)")
    print(f"Redis bytes per run: {bytes_per_run:,.0f}; queue length: "
          f"{client.xlen(store.keys.queue())} (acknowledged entries are deleted)")
    started = time.perf_counter()
    found = StoreCheck(store).violations()
    print(f"check --store over {len(ids):,} runs: {time.perf_counter() - started:.1f} s, "
          f"{len(found)} violation(s)")


def trim(store: Store) -> None:
    """Retention over the older half: runs and audit entries per second, bytes freed."""
    used = int(store.r.info("memory")["used_memory"])
    with tempfile.TemporaryDirectory() as tmp:
        export = Path(tmp) / "archive.jsonl"
        started = time.perf_counter()
        done = Retention(store, older_than=SPREAD / 2, export=export, sink=False).run()
        took = time.perf_counter() - started
        size = export.stat().st_size
    runs = sum(done.runs.values())
    freed = used - int(store.r.info("memory")["used_memory"])
    print(f"retention: {runs:,} runs and {done.audit:,} audit entries exported and trimmed in "
          f"{took:.1f} s ({runs / took:,.0f} runs/s); archive {size / max(runs, 1):,.0f} "
          f"bytes per run; Redis freed {freed / max(runs, 1):,.0f} bytes per run")
    started = time.perf_counter()
    found = StoreCheck(store).violations()
    print(f"check --store after the trim: {time.perf_counter() - started:.1f} s, "
          f"{len(found)} violation(s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--through-api", type=int, default=1_000,
                        help="runs seeded through the store API; the rest are copies")
    args = parser.parse_args()
    with redis_url() as url:
        clock = Clock()
        store = Store.connect(url, clock=clock)
        store.r.flushdb()
        store.queue.ensure_group()
        policy = Policy()
        base = int(store.r.info("memory")["used_memory"])
        started = time.perf_counter()
        through_api = min(args.runs, args.through_api)
        ids = [seed_one(store, clock, n, args.runs, policy) for n in range(through_api)]
        seeded = time.perf_counter() - started
        ids += clone(store, ids, through_api, args.runs)
        used = int(store.r.info("memory")["used_memory"]) - base
        seed_schedules(store)
        clock.now = time.time()
        print(f"seeded {through_api:,} runs through the store API in {seeded:.0f} s "
              f"({through_api / seeded:,.0f} runs/s), {args.runs - through_api:,} more as "
              f"copies of them (total {time.perf_counter() - started:.0f} s)")
        services = build_services(load_config(EXAMPLES / "deckhand.yml"), store=store)
        report(store, services, ids, used / args.runs)
        trim(store)
        store.r.flushdb()


if __name__ == "__main__":
    main()
