"""An organisation of many services (issue 40, docs/services.md section 4), each figure
beside the one-service figure of the same run.

Generates a main config with ``services:`` naming N service files shaped like
examples/deckhand.yml (its tools, playbooks and policy; 3 environments × 5 hosts, the hosts
only named) and the same with one service, seeds a redis-server with history for every
(service, environment), open runs, locks and schedules, and prints:

1. ``load_org``: cold (a fresh process, imports excluded) and warm (median, in process).
2. ``deckhand check`` through the CLI in a fresh process: cold (no verdict cache) and warm.
3. ``where --json``'s read: ``History.matrix`` over every (service, environment).
4. ``home_data`` for an owner of three services.
5. A signed ``/deploy`` ack over loopback HTTP, p50/p99 (as bench/slack_ack.py).

Budgets: load and check < 1 s, where and the Home < 100 ms, the ack < 100 ms.

Run: python -m bench.services_scale [--services 200] [--reps 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pydantic import SecretStr

from agents.history.deploys import Deploy
from agents.org import Org, load_org
from agents.plan.model import Plan
from agents.plan.targets import resolve
from agents.run.record import Run, RunStatus
from agents.schedules.model import Schedule
from agents.services import build_services
from agents.settings import Settings
from agents.store import Store
from bench.slack_ack import SECRET, percentile
from bench.timing import median_ms
from bot.slack.home import home_data
from bot.slack.runtime import BotRuntime
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.sample import free_port
from tests.fixtures.slack_standin import Signer, SlackStandin

ROOT = Path(__file__).resolve().parents[1]
ENVIRONMENTS = ("dev", "staging", "production")
HOSTS_PER_ENV = 5
OWNER = "UOWNER"
OWNED = 3


def service_name(index: int) -> str:
    return f"svc-{index:03d}"


def write_org(root: Path, count: int) -> Path:
    """A main config naming ``count`` service files (each with its own tools file)."""
    example = (ROOT / "examples" / "deckhand.yml").read_text()
    tools = (ROOT / "examples" / "tools.yml").read_text()
    playbooks = example[example.index("\nplaybooks:") + 1:]
    root.mkdir(parents=True, exist_ok=True)
    (root / "services").mkdir(exist_ok=True)
    names = [service_name(i) for i in range(count)]
    main = ["state_dir: state", "services:", *(f"  {n}: services/{n}/service.yml" for n in names)]
    (root / "deckhand.yml").write_text("\n".join(main) + "\n")
    for index, name in enumerate(names):
        folder = root / "services" / name
        folder.mkdir(exist_ok=True)
        (folder / "tools.yml").write_text(tools)
        (folder / "service.yml").write_text(_service(name, index, playbooks))
    return root / "deckhand.yml"


def _service(name: str, index: int, playbooks: str) -> str:
    hosts = [f"{name}-{env}-{i}" for env in ENVIRONMENTS for i in range(1, HOSTS_PER_ENV + 1)]
    lines = [
        "vars:", '  app: "{config_dir}/app"', '  artifacts: "{state_dir}/artifacts"',
        '  data: "{state_dir}/data"', '  notify_log: "{state_dir}/notifications.log"',
        '  prometheus: "http://127.0.0.1:9"', '  github_repo: "acme/app"',
        '  github_api: "http://127.0.0.1:9"',
        "tools: tools.yml",
        "inventory:", "  hosts:",
        *(f"    {h}: {{address: {h}.example.internal}}" for h in hosts),
        "  environments:",
        *(f"    {env}: {{hosts: [{', '.join(h for h in hosts if f'-{env}-' in h)}]}}"
          for env in ENVIRONMENTS),
        "policy:", "  promotion: [staging, production]", "  require_rollback: true",
        "  environments:",
        "    dev: {approvers: {anyone: true}, unattended: true}",
        "    staging: {approvers: {anyone: true}, unattended: true}",
        "    production: {approvers: {anyone: true}, min_approvals: 1, self_approval: true}",
        "history: {version_tool: status}",
    ]
    if index < OWNED:
        lines.append(f"owners: {{users: [{OWNER}]}}")
    return "\n".join(lines) + "\n" + playbooks


def seed(store: Store, org: Org) -> dict[str, int]:
    """History for every (service, environment); a schedule with an approved plan for
    every service; an open run holding a lock for every tenth and each owned service."""
    store.r.flushdb()
    now = time.time()
    counts = {"deploys": 0, "runs": 0, "locks": 0, "schedules": 0}
    for index, (name, config) in enumerate(org.services.items()):
        key = config.key
        for env_index, env in enumerate(ENVIRONMENTS):
            for n in range(3):  # three deploys each: previous/current resolve
                run_id = f"run-{name}-{env}-{n}"
                at = now - 86_400 * (3 - n) - env_index * 60
                store.history.record(key, run_id, [Deploy(
                    run_id=run_id, environment=env, version=f"v1.{index}.{n}",
                    outcome=RunStatus.SUCCEEDED, requested_by="USEED", started_at=at - 30,
                    finished_at=at,
                    hosts=dict.fromkeys(config.inventory.environments[env].hosts,
                                        f"v1.{index}.{n}"))])
                counts["deploys"] += 1
        plan = _plan(store, org, name, requested_by="UREQ")
        store.schedules.create(Schedule(
            spec="every day at 02:00", cron="0 2 * * *", request="deploy v9.9.9",
            service=key, created_by="USEED", created_at=datetime.now(UTC),
            armed_at=datetime.now(UTC), auto=True, approved_plan_id=plan.id,
            approved_plan_hash=plan.hash))
        counts["schedules"] += 1
        if index % 10 == 0 or index < OWNED:
            config = org.services[name]
            run = store.runs.create(Run.for_plan(
                plan, resolve(plan, config.catalog, config.inventory),
                status=RunStatus.AWAITING_APPROVAL))
            store.locks.acquire(key, ["production"], run_id=run.id, worker="bench", ttl=3600)
            counts["runs"] += 1
            counts["locks"] += 1
    return counts


def _plan(store: Store, org: Org, name: str, *, requested_by: str) -> Plan:
    config = org.services[name]
    book = next(b for b in config.playbooks if b.name == "deploy")
    plan = book.instantiate({"version": "v9.9.9"}, requested_by=requested_by)
    return store.plans.save(plan.model_copy(update={"service": config.key}))


def start_ms(main: Path) -> float:
    """A start's ``load_org`` once in a fresh interpreter, its imports done first."""
    code = ("import time, sys; from agents.org import load_org; t = time.perf_counter(); "
            "load_org(sys.argv[1], playbooks=False, cache=True); "
            "print((time.perf_counter() - t) * 1000)")
    out = subprocess.run([sys.executable, "-c", code, str(main)], env=_env(), check=True,
                         capture_output=True, text=True).stdout
    return float(out.strip())


CHECK = """
import contextlib, io, sys, time
import matplotlib  # check's charts line imports it: a cost that does not grow with services
from bot.cli import main
started, cpu = time.perf_counter(), time.process_time()
with contextlib.redirect_stdout(io.StringIO()):
    code = main(["check", sys.argv[1]])
print(code, (time.perf_counter() - started) * 1000, (time.process_time() - cpu) * 1000)
"""


def check_ms(main: Path) -> tuple[float, float, float]:
    """``deckhand check`` (no REDIS_URL: the config only) in a fresh process: the command
    after its imports (wall, CPU), and the whole process's wall time."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHECK, str(main)], env=_env(),
                          capture_output=True, text=True)
    wall = (time.perf_counter() - started) * 1000
    code, took, cpu = done.stdout.split()[-3:] if done.returncode == 0 else ("?", "0", "0")
    if code not in ("0", "1"):  # 1: a gate's Prometheus is away (not the subject here)
        raise SystemExit(f"check failed: {done.stdout}{done.stderr}")
    return float(took), wall, float(cpu)


def cpu_ms(work: Callable[[], object], repeat: int) -> float:
    """Median CPU milliseconds of ``work`` (what the code costs, however busy the machine)."""
    times = []
    for _ in range(repeat):
        started = time.process_time()
        work()
        times.append((time.process_time() - started) * 1000)
    return statistics.median(times)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DECKHAND_STATE_DIR")}
    return {**env, "PYTHONPATH": str(ROOT)}


@dataclass
class Figures:
    first_start: float
    start: float
    warm_load: float
    full_load: float
    cold_check: float
    warm_check: float
    check_wall: float
    cold_check_cpu: float
    warm_check_cpu: float
    warm_load_cpu: float
    where: float
    where_rows: int
    home: float
    home_services: int
    ack_p50: float
    ack_p99: float


def measure(main: Path, redis_url: str, reps: int, acks: int) -> Figures:
    state = main.parent / "state"  # where the config cache goes (agents.config_cache)
    firsts = []
    for _ in range(max(1, reps // 2)):
        shutil.rmtree(state, ignore_errors=True)
        firsts.append(start_ms(main))
    colds, warms = [], []
    for _ in range(max(1, reps // 2)):
        shutil.rmtree(state, ignore_errors=True)
        colds.append(check_ms(main))
    for _ in range(max(1, reps // 2)):
        warms.append(check_ms(main))
    start = statistics.median(start_ms(main) for _ in range(max(1, reps // 2)))
    warm_load = median_ms(lambda: load_org(main, playbooks=False, cache=True), reps)
    warm_cpu = cpu_ms(lambda: load_org(main, playbooks=False, cache=True), reps)
    full = median_ms(lambda: load_org(main), max(1, reps // 2))
    org = load_org(main)
    store = Store.connect(redis_url)
    seed(store, org)
    rows = store.history.matrix()
    where = median_ms(lambda: json.dumps([w.model_dump(mode="json")
                                          for w in store.history.matrix()]), reps * 4)
    standin = SlackStandin()
    settings = Settings(SLACK_BOT_TOKEN=SecretStr("xoxb-bench"),
                        SLACK_SIGNING_SECRET=SecretStr(SECRET),
                        SLACK_API_URL=f"{standin.url}/api/")
    runtime = BotRuntime(build_services(org, settings, store=store), settings, workers=0)
    port = free_port()
    runtime.start_http(host="127.0.0.1", port=port)
    try:
        home = median_ms(lambda: home_data(runtime.bot, OWNER), reps * 4)
        signer = Signer(SECRET, f"http://127.0.0.1:{port}/slack/events")
        took = []
        for i in range(acks):
            status, _, seconds = signer.command("/deploy", "v2.3.1", user="UBENCH",
                                                trigger_id=f"scale-{i}",
                                                response_url=f"{standin.url}/response/s")
            assert status == 200
            took.append(seconds * 1000)
    finally:
        runtime.stop()
        standin.close()
    return Figures(statistics.median(firsts), start, warm_load, full,
                   statistics.median(c[0] for c in colds),
                   statistics.median(c[0] for c in warms),
                   statistics.median(c[1] for c in warms),
                   statistics.median(c[2] for c in colds),
                   statistics.median(c[2] for c in warms), warm_cpu, where, len(rows), home,
                   len(org.index.owned_by(OWNER)), statistics.median(took),
                   percentile(took, 99))


def report(count: int, many: Figures, one: Figures) -> None:
    def row(what: str, got: float, peer: float, budget: float) -> None:
        verdict = "ok" if got < budget else "OVER"
        print(f"{what:<34} {got:8.1f} ms  one service {peer:7.1f} ms  "
              f"({got / peer:5.1f}×; budget {budget:.0f} ms: {verdict})")

    print(f"{count} services × {len(ENVIRONMENTS)} environments × {HOSTS_PER_ENV} hosts "
          f"(where rows {many.where_rows} vs {one.where_rows}; Home owner of "
          f"{many.home_services} services; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores: wall times stretch with it, CPU times do not)")
    row("start load, new process, no cache", many.first_start, one.first_start, 1000)
    row("start load, new process, cached", many.start, one.start, 1000)
    row("start load, in process (median)", many.warm_load, one.warm_load, 1000)
    row("  (the same, CPU time)", many.warm_load_cpu, one.warm_load_cpu, 1000)
    row("load with playbook checks, no cache", many.full_load, one.full_load, 1000)
    row("deckhand check, no cache", many.cold_check, one.cold_check, 1000)
    row("  (the same, CPU time)", many.cold_check_cpu, one.cold_check_cpu, 1000)
    row("deckhand check, cached", many.warm_check, one.warm_check, 1000)
    row("  (the same, CPU time)", many.warm_check_cpu, one.warm_check_cpu, 1000)
    row("  (cached, the whole process)", many.check_wall, one.check_wall, 1000)
    row("where --json (History.matrix)", many.where, one.where, 100)
    row("home_data (owner of 3)", many.home, one.home, 100)
    row("/deploy ack p50", many.ack_p50, one.ack_p50, 100)
    row("/deploy ack p99", many.ack_p99, one.ack_p99, 100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=200)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--acks", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        redis = RedisServer(Path(tmp))
        redis.start()
        try:
            one = measure(write_org(Path(tmp) / "one", 1), redis.url, args.reps, args.acks)
            many = measure(write_org(Path(tmp) / "many", args.services), redis.url,
                           args.reps, args.acks)
        finally:
            redis.stop()
    report(args.services, many, one)


if __name__ == "__main__":
    main()
