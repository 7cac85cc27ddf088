"""Fan-out to hundreds of hosts: deckhand against plain parallel ssh and Ansible (issue 23).

For each N of ``--hosts`` (100,200,500): N sshd on loopback, one per host (the tests'
fixture), one known_hosts file listing them all, and one step -- ``sleep 1`` -- on every
host in one batch (``batch_size: 100%``, ``max_parallel: N``; a mutating tool, so deckhand
checks every host is reachable first, as for a deploy). Measured in the same run:

  deckhand run    the command as an operator types it, ``deckhand run fan --yes``, in a new
                  process (imports, config, store, plan, every connection, the step, the
                  summary): on the embedded store (REDIS_URL unset), and with REDIS_URL on
                  a redis-server (if one is installed); when it first connected to a host
                  after launch (an audit hook on ``socket.connect``). Its ratio to plain
                  ssh cold is the headline figure (issue 31: ssh pays its start-up too)
  deckhand cold   a fresh RunnerPool: connections opened (paced), then the step
  deckhand warm   the same plan again on the same pool
  ssh cold        ``xargs -P N ssh`` (BatchMode, StrictHostKeyChecking=yes, the same
                  known_hosts and key), with the key exchange paramiko uses
                  (curve25519) and with OpenSSH's default (post-quantum, slower)
  ssh warm        the same through ControlMaster connections opened beforehand
  ansible         ansible-playbook, ``forks`` N, OpenSSH with ControlPersist and
                  pipelining: cold (no control sockets yet), warm (a second play); only
                  when ansible-playbook is found (``--ansible-playbook``, $ANSIBLE_PLAYBOOK,
                  else PATH; otherwise "ansible not found, skipped"), N up to ``--ansible-max``

Printed: wall time; the ratio to plain ssh (cold to cold, warm to ControlMaster; Ansible's
too); wall / the slowest host (the same step alone on one host, warm); when hosts started
the command (first / median / last, from the run start); this process's peak threads and
RSS, and RSS per connected host; connection-setup CPU per host (this process's CPU in the
cold run less the warm run, / N; for ssh, the clients' CPU the same way).

Then ``--shared`` hosts (100) behind ONE sshd with OpenSSH's default ``MaxStartups
10:30:100``: deckhand cold with its default pacing (hosts deployed, setups retried, drops
sshd logged) against plain ``xargs -P`` ssh (hosts lost).

Every sshd shares this machine's cores with deckhand and ssh, so the figures are relative:
compare the ratios, not the seconds. Ansible is not a project dependency: install
ansible-core in a venv of its own and pass ``--ansible-playbook PATH`` (or put it on PATH).

Run: python -m bench.fanout [--hosts 100,200,500] [--reps 1] [--seconds 1] [--shared 100]
     [--ansible-playbook PATH] [--ansible-max 500]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agents.config import Config, load_config
from agents.plan.model import Plan
from agents.run.executor import Executor, ExecutorDeps
from agents.run.record import Event, EventKind, Run, RunStatus
from bench.ssh_vs_ansible import ansible_config, find_ansible, play
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.sshd import SSHFleet, start_fleet, start_shared_sshd
from tools.runners.pool import RunnerPool


@dataclass
class Figures:
    """One measured way of running the step on every host."""

    wall: float
    cpu: float = 0.0
    threads: int = 0
    rss_mb: float = 0.0
    starts: list[float] = field(default_factory=list)
    failed: int = 0


# -- sampling this process ----------------------------------------------------------------


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@contextmanager
def sampled(into: Figures) -> Iterator[None]:
    """Peak thread count and RSS of this process while the block runs (every 20 ms)."""
    stop = threading.Event()

    def sample() -> None:
        while True:
            into.threads = max(into.threads, threading.active_count())
            into.rss_mb = max(into.rss_mb, rss_mb())
            if stop.wait(0.02):
                return

    sampler = threading.Thread(target=sample, name="bench-sampler", daemon=True)
    sampler.start()
    try:
        yield
    finally:
        stop.set()
        sampler.join()


# -- deckhand -----------------------------------------------------------------------------


def write_config(root: Path, fleet: SSHFleet, seconds: float) -> Config:
    names = list(dict.fromkeys(fleet.hosts))
    data = {"tools": {"fan": {"description": "the fanned-out step",
                              "command": f"sleep {seconds:g}", "target": "environment",
                              "mutates": True, "timeout": 600}},
            "inventory": {"known_hosts": str(fleet.known_hosts),
                          "hosts": {n: fleet.inventory_host(n) for n in names},
                          "environments": {
                              "fleet": {"hosts": names, "rollout": {
                                  "batch_size": "100%", "max_parallel": len(names)}},
                              "solo": {"hosts": names[:1]}}},
            "policy": {"require_rollback": False},
            "playbooks": [{"name": "fan", "match": ["^fan$"], "goal": "fan out",
                           "steps": [{"id": "only", "tool": "fan",
                                      "params": {"environment": "fleet"}}]}]}
    path = root / "deckhand.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_config(path)


def plan_for(environment: str) -> Plan:
    return Plan.model_validate({"goal": "fan out", "steps": [
        {"id": "only", "tool": "fan", "params": {"environment": environment}}]})


def deckhand_run(executor: Executor, environment: str, *, check: bool = True) -> Figures:
    started = time.perf_counter()
    figures = Figures(0.0)

    def on_start(event: Event, run: Run) -> None:
        if event.kind is EventKind.HOST_STARTED:
            figures.starts.append(time.perf_counter() - started)

    cpu = time.process_time()
    with sampled(figures):
        run = executor.execute(plan_for(environment), listeners=[on_start])
    figures.wall, figures.cpu = time.perf_counter() - started, time.process_time() - cpu
    figures.failed = sum(1 for h in run.steps["only"].hosts.values()
                         if h.status.value != "succeeded")
    if check and run.status is not RunStatus.SUCCEEDED:
        raise SystemExit(f"deckhand run failed: {run.reason}")
    return figures


def deckhand_cold_warm(config: Config) -> tuple[Figures, Figures, float, float]:
    """(cold, warm, slowest single host, RSS per connected host in MB)."""
    pool = RunnerPool(inventory=config.inventory)
    executor = Executor(ExecutorDeps(config.catalog, config.inventory, pool.for_host))
    try:
        before = rss_mb()
        cold = deckhand_run(executor, "fleet")
        per_host = (rss_mb() - before) / len(config.inventory.hosts)
        warm = deckhand_run(executor, "fleet")
        solo = max(deckhand_run(executor, "solo").wall for _ in range(3))
    finally:
        pool.close()
    return cold, warm, solo, per_host


# -- the deckhand command ----------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
LAUNCH = """
import os, sys, time
ports = set(os.environ["DH_BENCH_PORTS"].split(","))
def first_connect(event, args):
    if event == "socket.connect" and ports and isinstance(args[1], tuple) \\
            and str(args[1][1]) in ports:
        ports.clear()
        cpu = os.times()
        sys.stderr.write(f"first-connect {time.time():.6f} {cpu.user + cpu.system:.6f}\\n")
sys.addaudithook(first_connect)
sys.argv = ["deckhand", *sys.argv[1:]]
from bot.launch import main
sys.exit(main())
"""
"""``deckhand`` (its console entry, ``bot.launch``) with an audit hook that notes when it
first connects to one of the hosts: the time from launch to the first SSH connection."""


PYCACHE = Path(tempfile.gettempdir()) / "deckhand-bench-pycache"


def command_env() -> dict[str, str]:
    """The command's environment: no REDIS_URL (the caller adds one), and bytecode caches
    like an installed deckhand's (kept apart from the checkout, even where the shell sets
    PYTHONDONTWRITEBYTECODE: compiling every module on each launch is no one's start-up)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("REDIS_URL", "PYTHONDONTWRITEBYTECODE")}
    return env | {"PYTHONPATH": str(ROOT), "PYTHONPYCACHEPREFIX": str(PYCACHE)}


def compile_once() -> None:
    """Fill the bytecode cache the commands use (what ``pip install`` does)."""
    subprocess.run([sys.executable, "-c", "import bot.cli, bot.terminal.console, fakeredis"],
                   env=command_env(), cwd=ROOT, check=True)


@dataclass
class Command:
    """One ``deckhand run fan --yes``: wall time, and launch to the first host connection."""

    wall: float
    first_connect: float
    first_cpu: float
    """This process's CPU time until then, all its threads (less sensitive to load than wall)."""


def deckhand_command(config: Path, fleet: SSHFleet, redis_url: str | None) -> Command:
    """The whole command, cold, as an operator runs it: a new process (imports, config, the
    store -- embedded, or Redis at ``redis_url`` --, plan, approval with --yes, every
    connection, the step, the summary)."""
    env = command_env() | ({"REDIS_URL": redis_url} if redis_url else {})
    env |= {"DH_BENCH_PORTS": ",".join(str(h.port) for h in fleet.hosts.values())}
    launched = time.time()
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", LAUNCH, "run", "fan", "--yes", "--config",
                           str(config)], env=env, cwd=ROOT, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=1800, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"deckhand run failed ({done.returncode}):\n{done.stdout[-2000:]}"
                         f"\n{done.stderr[-2000:]}")
    marks = [line.split()[1:] for line in done.stderr.splitlines()
             if line.startswith("first-connect ")]
    if not marks:
        return Command(wall, float("nan"), float("nan"))
    return Command(wall, float(marks[0][0]) - launched, float(marks[0][1]))


# -- plain ssh ----------------------------------------------------------------------------


def ssh_options(fleet: SSHFleet) -> list[str]:
    return ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
            "-o", f"UserKnownHostsFile={fleet.known_hosts}", "-i", str(fleet.user_key),
            "-o", "ConnectTimeout=60"]


def xargs_ssh(fleet: SSHFleet, ports: list[int], remote: list[str],
              extra: tuple[str, ...] = ()) -> Figures:
    """``xargs -P N ssh -p PORT …`` over ``ports``; a host that fails prints one line."""
    command = ["xargs", "-P", str(len(ports)), "-I{}", "sh", "-c",
               'ssh -p "$0" "$@" 2>/dev/null || echo failed', "{}",
               *ssh_options(fleet), *extra, f"{fleet.user}@127.0.0.1", *remote]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, input="".join(f"{p}\n" for p in ports), text=True,
                          capture_output=True, timeout=1800)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return Figures(wall, cpu=cpu, failed=done.stdout.count("failed"))


SAME_KEX = ("-o", "KexAlgorithms=curve25519-sha256")
"""The key exchange paramiko agrees on. OpenSSH 9's default (sntrup761x25519, post-quantum)
costs each client and sshd ~70 ms more CPU here, so plain ssh is measured both ways."""


def ssh_cold_warm(fleet: SSHFleet, root: Path,
                  seconds: float) -> tuple[Figures, Figures, Figures]:
    """(cold with OpenSSH's default key exchange, cold with paramiko's, ControlMaster)."""
    ports = [h.port for h in fleet.hosts.values()]
    step = ["sleep", f"{seconds:g}"]
    cold = xargs_ssh(fleet, ports, step)
    same_kex = xargs_ssh(fleet, ports, step, SAME_KEX)
    masters = root / "cm"
    masters.mkdir(exist_ok=True)
    path = ("-o", f"ControlPath={masters}/%p")
    xargs_ssh(fleet, ports, [], (*path, "-o", "ControlMaster=yes", "-o",
                                 "ControlPersist=600", "-f", "-N"))
    try:
        warm = xargs_ssh(fleet, ports, step, (*path, "-o", "ControlMaster=no"))
    finally:
        xargs_ssh(fleet, ports, [], (*path, "-O", "exit"))
    return cold, same_kex, warm


# -- ansible ------------------------------------------------------------------------------


def ansible_cold_warm(playbook: str, fleet: SSHFleet, root: Path,
                      seconds: float) -> tuple[float, float]:
    home = root / "ansible"
    home.mkdir(exist_ok=True)
    names = list(fleet.hosts)
    ansible_config(home, fleet, names, forks=len(names))
    book = home / "fan.yml"
    book.write_text(yaml.safe_dump([{"hosts": "bench", "gather_facts": False, "tasks": [
        {"name": "fan", "shell": f"sleep {seconds:g}"}]}], sort_keys=False))
    cold = timed(lambda: play(playbook, home, book))
    warm = timed(lambda: play(playbook, home, book))
    return cold, warm


def timed(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


# -- one fleet size -----------------------------------------------------------------------


def median_by(runs: list[Figures]) -> Figures:
    return sorted(runs, key=lambda f: f.wall)[len(runs) // 2]


def spread(starts: list[float]) -> str:
    if not starts:
        return "-"
    return (f"{min(starts):.1f} / {statistics.median(starts):.1f} / {max(starts):.1f} s")


def deckhand_commands(reps: int, config: Path, fleet: SSHFleet,
                      redis_url: str | None) -> Command:
    """The median of ``reps`` commands (by wall time; first connection: its own median)."""
    runs = [deckhand_command(config, fleet, redis_url) for _ in range(reps)]
    wall = statistics.median(c.wall for c in runs)
    return Command(wall, statistics.median(c.first_connect for c in runs),
                   statistics.median(c.first_cpu for c in runs))


def measure(args: argparse.Namespace, n: int, playbook: str | None,
            redis_url: str | None) -> None:
    root = Path(tempfile.mkdtemp(prefix="dh-fanout-"))
    print(f"\n== {n} hosts: starting {n} sshd on loopback ...", flush=True)
    fleet = start_fleet(root / "fleet", [f"h{i:03d}" for i in range(n)])
    try:
        config = write_config(root, fleet, args.seconds)
        command = deckhand_commands(args.reps, root / "deckhand.yml", fleet, None)
        shared = (deckhand_commands(args.reps, root / "deckhand.yml", fleet, redis_url)
                  if redis_url else None)
        runs = [deckhand_cold_warm(config) for _ in range(args.reps)]
        cold = median_by([r[0] for r in runs])
        warm = median_by([r[1] for r in runs])
        solo = statistics.median(r[2] for r in runs)
        per_host = statistics.median(r[3] for r in runs)
        plain = [ssh_cold_warm(fleet, root, args.seconds) for _ in range(args.reps)]
        s_default, s_cold, s_warm = (median_by([p[i] for p in plain]) for i in range(3))
        for label, figures in (("embedded store", command), ("REDIS_URL", shared)):
            if figures is not None:
                print(f"  deckhand run ({label}) {figures.wall:6.2f} s = "
                      f"{figures.wall / s_cold.wall:.2f}x plain ssh (same kex), "
                      f"{figures.wall / s_default.wall:.2f}x plain ssh (OpenSSH's default "
                      f"kex); first SSH connection {figures.first_connect:.2f} s after launch "
                      f"({figures.first_cpu:.2f} s of CPU)")
        report(n, cold, warm, solo, per_host, s_cold, s_warm)
        print(f"  (plain ssh cold with OpenSSH's default key exchange {s_default.wall:.2f} s, "
              f"failed {s_default.failed}: deckhand cold {cold.wall / s_default.wall:.2f} of it)")
        if playbook is not None and n <= args.ansible_max:
            a_cold, a_warm = ansible_cold_warm(playbook, fleet, root, args.seconds)
            print(f"  ansible cold {a_cold:6.2f} s = {a_cold / s_cold.wall:.2f}x plain ssh "
                  f"({a_cold / command.wall:.1f}x the deckhand command)   warm {a_warm:6.2f} s "
                  f"= {a_warm / s_warm.wall:.2f}x ssh ControlMaster "
                  f"({a_warm / warm.wall:.1f}x deckhand warm)")
        elif playbook is not None:
            print(f"  ansible: skipped above --ansible-max {args.ansible_max} hosts")
    finally:
        fleet.stop()
        shutil.rmtree(root, ignore_errors=True)


def report(n: int, cold: Figures, warm: Figures, solo: float, per_host: float,
           s_cold: Figures, s_warm: Figures) -> None:
    setup_cpu = (cold.cpu - warm.cpu) / n * 1000
    ssh_setup_cpu = (s_cold.cpu - s_warm.cpu) / n * 1000
    print(f"  slowest host alone {solo:.2f} s")
    print(f"  deckhand cold {cold.wall:6.2f} s  x{cold.wall / solo:.2f} of slowest host, "
          f"{cold.wall / s_cold.wall:.2f} of plain ssh (same kex)   starts {spread(cold.starts)}")
    print(f"  deckhand warm {warm.wall:6.2f} s  x{warm.wall / solo:.2f} of slowest host, "
          f"{warm.wall / s_warm.wall:.2f} of ssh ControlMaster   starts {spread(warm.starts)}")
    print(f"  plain ssh cold (same kex) {s_cold.wall:6.2f} s (failed {s_cold.failed})   "
          f"ControlMaster {s_warm.wall:6.2f} s (failed {s_warm.failed})")
    print(f"  deckhand: peak threads {max(cold.threads, warm.threads)} "
          f"({(max(cold.threads, warm.threads)) / n:.2f}/host), peak RSS "
          f"{max(cold.rss_mb, warm.rss_mb):.0f} MB, {per_host * 1024:.0f} KB per connected host")
    print(f"  connection-setup CPU per host: deckhand {setup_cpu:.1f} ms (cold {cold.cpu:.2f} s,"
          f" warm {warm.cpu:.2f} s); ssh clients {ssh_setup_cpu:.1f} ms")


# -- a shared sshd with MaxStartups ----------------------------------------------------------


def shared_case(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="dh-fanout-shared-"))
    names = [f"s{i:03d}" for i in range(args.shared)]
    print(f"\n== {args.shared} hosts behind one sshd with MaxStartups 10:30:100", flush=True)
    fleet = start_shared_sshd(root / "fleet", names)
    daemon = fleet[names[0]]
    try:
        config = write_config(root, fleet, args.seconds)
        pool = RunnerPool(inventory=config.inventory)
        executor = Executor(ExecutorDeps(config.catalog, config.inventory, pool.for_host))
        try:
            figures = deckhand_run(executor, "fleet", check=False)
        finally:
            pool.close()
        stats, drops = pool.setup_stats, daemon.drops()
        print(f"  deckhand: {args.shared - figures.failed}/{args.shared} hosts ran the step in "
              f"{figures.wall:.2f} s; setups {stats.attempts} for {stats.connections} "
              f"connections, {stats.retries} retried, {stats.failures} given up; sshd "
              f"dropped {drops}")
        plain = xargs_ssh(fleet, [daemon.port] * args.shared, ["sleep", f"{args.seconds:g}"],
                          SAME_KEX)
        print(f"  plain xargs -P ssh: {args.shared - plain.failed}/{args.shared} hosts ran it "
              f"in {plain.wall:.2f} s; sshd dropped {daemon.drops() - drops}")
    finally:
        fleet.stop()
        shutil.rmtree(root, ignore_errors=True)


def start_redis() -> RedisServer | None:
    """A redis-server on loopback for ``deckhand run`` with REDIS_URL (the shared store an
    operator's terminal uses), or None (that case skipped) when there is none."""
    if shutil.which("redis-server") is None:
        print("redis-server not found: `deckhand run` is measured on the embedded store only")
        return None
    server = RedisServer(Path(tempfile.mkdtemp(prefix="dh-fanout-redis-")))
    server.start()
    return server


def raise_fd_limit() -> None:
    """Each host costs this process a socket (and ssh a process): lift the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="100,200,500", help="fleet sizes, e.g. 100,200")
    parser.add_argument("--reps", type=int, default=1, help="runs per figure (median)")
    parser.add_argument("--seconds", type=float, default=1.0, help="the step: sleep SECONDS")
    parser.add_argument("--shared", type=int, default=100,
                        help="hosts behind the MaxStartups sshd (0 skips that case)")
    parser.add_argument("--ansible-playbook", default=os.environ.get("ANSIBLE_PLAYBOOK"),
                        help="path of ansible-playbook (default $ANSIBLE_PLAYBOOK, else PATH)")
    parser.add_argument("--ansible-max", type=int, default=500,
                        help="largest fleet to run Ansible on (it is slow)")
    args = parser.parse_args()
    sizes = [int(n) for n in args.hosts.split(",") if n.strip()]
    raise_fd_limit()
    playbook = find_ansible(args.ansible_playbook)
    if playbook is None:
        print("ansible not found, skipped (install ansible-core in a venv of its own and pass "
              "--ansible-playbook PATH or set $ANSIBLE_PLAYBOOK)")
    compile_once()
    redis = start_redis()
    try:
        for n in sizes:
            measure(args, n, playbook, redis.url if redis else None)
    finally:
        if redis is not None:
            redis.stop()
    if args.shared:
        shared_case(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
