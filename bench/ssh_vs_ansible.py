"""SSH execution speed: deckhand against Ansible, on the same real sshd hosts, in one run.

1. Per-step overhead. The same 8-step plan (8 light shell commands, one after another, on
   one host) runs through deckhand (Executor + pooled SSHRunner) and through
   ansible-playbook (``shell`` tasks; OpenSSH with ControlPersist and pipelining, Ansible's
   fastest common setup). Both run warm (connection already open) and are timed end to
   end. Per-step overhead = (T[8 steps] - T[1 step] - own time of steps 2..8) / 7, which
   leaves out fixed costs such as ansible-playbook starting up. Target: deckhand >= 10x less.
2. deckhand's per-command overhead on a warm connection: median of ``run("true")``.
   Target: < 15 ms.

Fan-out to many hosts (cold and warm, against plain parallel ssh and Ansible) is
``bench/fanout.py``.

Ansible is not a project dependency. Install it for the bench only, e.g.
``python -m venv /opt/bench-ansible && /opt/bench-ansible/bin/pip install ansible-core``,
then pass ``--ansible-playbook /opt/bench-ansible/bin/ansible-playbook`` (or put it on PATH).

Run: python -m bench.ssh_vs_ansible [--reps 20] [--ansible-reps 5] [--ansible-playbook PATH]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import yaml

from agents.config import Config, load_config
from agents.plan.model import Plan
from agents.run.executor import Executor, ExecutorDeps
from agents.run.record import Run, RunStatus
from tests.fixtures.sshd import SSHFleet, start_fleet
from tools.runners.pool import RunnerPool


def commands(workdir: Path) -> list[str]:
    """The 8 steps: the kind of light commands a deploy is made of."""
    d = workdir / "bench-app"
    return [f"test -d {workdir}", "echo deploying v1.2.3", f"mkdir -p {d}/releases",
            f"printf '%s\\n' v1.2.3 > {d}/VERSION", f"cat {d}/VERSION", f"ls {d}",
            "uname -sr", "date -u +%FT%TZ"]


# -- deckhand -----------------------------------------------------------------------------


def write_config(root: Path, fleet: SSHFleet, cmds: list[str]) -> Config:
    """A deckhand config: tools step1..8 (the commands) on the one bench host."""
    tools: dict[str, Any] = {
        f"step{i + 1}": {"description": f"bench step {i + 1}", "command": cmd,
                         "target": "group:bench", "timeout": 60}
        for i, cmd in enumerate(cmds)}
    names = list(fleet.hosts)
    data = {"tools": tools, "inventory": {
        "known_hosts": str(fleet.known_hosts),
        "hosts": {n: fleet.inventory_host(n) for n in names},
        "groups": {"bench": [names[0]]}}}
    path = root / "deckhand.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_config(path)


def chain(n: int) -> Plan:
    steps = [{"id": f"s{i + 1}", "tool": f"step{i + 1}",
              "depends_on": [f"s{i}"] if i else []} for i in range(n)]
    return Plan.model_validate({"goal": f"{n} steps", "steps": steps})


def execute(executor: Executor, plan: Plan) -> Run:
    run = executor.execute(plan)
    if run.status is not RunStatus.SUCCEEDED:
        raise SystemExit(f"deckhand run failed: {run.reason}")
    return run


def timed(action: Any) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def deckhand_walls(executor: Executor, reps: int) -> tuple[float, float]:
    """Median wall time of the 1-step and the 8-step plan, connection warm."""
    execute(executor, chain(8))  # warm up: connect, and fill the caches
    one = [timed(lambda: execute(executor, chain(1))) for _ in range(reps)]
    eight = [timed(lambda: execute(executor, chain(8))) for _ in range(reps)]
    return statistics.median(one), statistics.median(eight)


def warm_command_overhead(pool: RunnerPool, config: Config, reps: int) -> float:
    runner = pool.for_host(config.inventory.hosts[config.inventory.groups["bench"][0]])
    runner.run("true", timeout=10)
    return statistics.median(runner.run("true", timeout=10).duration for _ in range(reps))


# -- ansible ------------------------------------------------------------------------------


def ansible_config(root: Path, fleet: SSHFleet, names: list[str], *, forks: int = 5) -> None:
    """inventory.ini (group ``bench``: ``names``) and ansible.cfg in ``root``: OpenSSH with
    ControlPersist and pipelining, host keys checked against the fleet's known_hosts."""
    (root / "inventory.ini").write_text("[bench]\n" + "".join(
        f"{n} ansible_host=127.0.0.1 ansible_port={fleet.hosts[n].port} "
        f"ansible_user={fleet.user} ansible_ssh_private_key_file={fleet.user_key} "
        f"ansible_python_interpreter=/usr/bin/python3\n" for n in names))
    ssh_args = (f"-o ControlMaster=auto -o ControlPersist=300s -o StrictHostKeyChecking=yes "
                f"-o UserKnownHostsFile={fleet.known_hosts}")
    (root / "ansible.cfg").write_text(textwrap.dedent(f"""\
        [defaults]
        inventory = {root}/inventory.ini
        host_key_checking = True
        gathering = explicit
        stdout_callback = default
        forks = {forks}
        [ssh_connection]
        pipelining = True
        control_path_dir = {root}/cp
        ssh_args = {ssh_args}
        """))


def ansible_env(root: Path) -> dict[str, str]:
    return {**os.environ, "ANSIBLE_CONFIG": str(root / "ansible.cfg"),
            "ANSIBLE_HOME": str(root / "home"), "ANSIBLE_NOCOLOR": "1"}


def play(playbook_bin: str, root: Path, book: Path) -> None:
    """Run one playbook with the config in ``root``; SystemExit with its output if it fails."""
    done = subprocess.run([playbook_bin, str(book)], env=ansible_env(root), cwd=root,
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"ansible-playbook failed:\n{done.stdout[-3000:]}{done.stderr}")


def ansible_setup(root: Path, fleet: SSHFleet, cmds: list[str]) -> dict[str, Path]:
    ansible_config(root, fleet, [next(iter(fleet.hosts))])
    books = {}
    for n in (1, 8):
        tasks = [{"name": f"step {i + 1}", "shell": cmd} for i, cmd in enumerate(cmds[:n])]
        path = root / f"play{n}.yml"
        path.write_text(yaml.safe_dump([{"hosts": "bench", "gather_facts": False,
                                         "tasks": tasks}], sort_keys=False))
        books[f"play{n}"] = path
    return books


def ansible_walls(playbook_bin: str, root: Path, books: dict[str, Path],
                  reps: int) -> tuple[float, float]:
    play(playbook_bin, root, books["play8"])  # warm up: ControlMaster connection, module caches
    one = [timed(lambda: play(playbook_bin, root, books["play1"])) for _ in range(reps)]
    eight = [timed(lambda: play(playbook_bin, root, books["play8"])) for _ in range(reps)]
    return statistics.median(one), statistics.median(eight)


# -- the run ------------------------------------------------------------------------------


def own_time(cmds: list[str], reps: int) -> list[float]:
    """Each command's own time, run locally with a fresh shell (median)."""
    return [statistics.median(timed(lambda c=cmd: subprocess.run(
        ["/bin/sh", "-c", c], check=True, capture_output=True)) for _ in range(reps))
            for cmd in cmds]


def per_step(one: float, eight: float, own: list[float]) -> float:
    return (eight - one - sum(own[1:])) / 7


def find_ansible(given: str | None) -> str | None:
    if given:
        return given if Path(given).exists() else None
    return shutil.which("ansible-playbook")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--ansible-reps", type=int, default=5)
    parser.add_argument("--ansible-playbook", default=None, help="path of ansible-playbook")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="deckhand-bench-ssh-"))
    print("starting an sshd host on loopback ...", flush=True)
    fleet = start_fleet(root / "fleet", ["bench-0"])
    try:
        return report(args, root, fleet)
    finally:
        fleet.stop()
        shutil.rmtree(root, ignore_errors=True)


def report(args: argparse.Namespace, root: Path, fleet: SSHFleet) -> int:
    workdir = fleet.hosts["bench-0"].dir
    cmds = commands(workdir)
    config = write_config(root, fleet, cmds)
    pool = RunnerPool(inventory=config.inventory)
    executor = Executor(ExecutorDeps(config.catalog, config.inventory, pool.for_host))
    try:
        own = own_time(cmds, args.reps)
        d_one, d_eight = deckhand_walls(executor, args.reps)
        warm = warm_command_overhead(pool, config, max(args.reps * 10, 100))
    finally:
        pool.close()
    d_step = per_step(d_one, d_eight, own)
    print(f"\nthe steps' own time (local sh -c): {sum(own) * 1000:.1f} ms for all 8")
    print(f"deckhand  8-step plan: {d_eight * 1000:7.1f} ms   1-step: {d_one * 1000:7.1f} ms"
          f"   per-step overhead: {d_step * 1000:6.2f} ms")
    playbook = find_ansible(args.ansible_playbook)
    if playbook is None:
        print("ansible-playbook not found: install ansible-core in a bench venv and pass "
              "--ansible-playbook PATH (see this file's docstring); skipping the comparison")
    else:
        a_one, a_eight = ansible_walls(playbook, root, ansible_setup(root, fleet, cmds),
                                       args.ansible_reps)
        a_step = per_step(a_one, a_eight, own)
        print(f"ansible   8-step play: {a_eight * 1000:7.1f} ms   1-step: {a_one * 1000:7.1f} ms"
              f"   per-step overhead: {a_step * 1000:6.2f} ms")
        print(f"ratio: ansible per-step overhead / deckhand's = {a_step / d_step:.1f}x "
              f"(target >= 10x)")
    print(f"\ndeckhand per-command time on a warm connection (run('true'), median): "
          f"{warm * 1000:.2f} ms (target < 15 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
