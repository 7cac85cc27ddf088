"""What deckhand reports is what is true on the hosts, when a connection drops mid-command.

A host whose connection dropped while a mutating command ran may have been changed: it is
rolled back like the others, and nothing the command left behind lands after the rollback.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from agents.run.executor import Executor, ExecutorDeps
from agents.run.record import Event, EventKind, Run, RunStatus
from tests.fixtures.builders import make_plan
from tests.fixtures.polling import wait_until
from tests.fixtures.sshd import SSHFleet, descendants, process_gone
from tools.catalog import Catalog, ParamSpec, Tool
from tools.inventory import Inventory
from tools.runners.pool import RunnerPool

HOSTS = ("prod-1", "prod-2", "prod-3")


def _session_processes(fleet: SSHFleet, name: str) -> list[int]:
    """sshd's per-connection processes for host ``name`` (not the commands they run)."""
    listener = fleet[name].proc
    assert listener is not None
    return [p for p in descendants(listener.pid)
            if Path(f"/proc/{p}/comm").read_text().strip() == "sshd"]


def test_a_host_whose_connection_drops_mid_deploy_is_rolled_back(
        sshd_hosts: SSHFleet, tmp_path: Path) -> None:
    dirs = {n: tmp_path / n for n in HOSTS}
    for d in dirs.values():
        d.mkdir()
    inventory = sshd_hosts.inventory(
        {n: {"vars": {"dir": str(dirs[n])}} for n in HOSTS})
    inventory = Inventory.model_validate({
        **inventory.model_dump(), "environments": {"production": {"hosts": list(HOSTS)}}})
    catalog = Catalog({
        "change": Tool(name="change", description="a slow change",
                       command="echo ready; sleep 2.37; echo new > {host.dir}/state",
                       target="environment", mutates=True, rollback="undo",
                       params={"environment": ParamSpec(enum=["production"])}),
        "undo": Tool(name="undo", description="undo it", target="environment",
                     command="rm -f {host.dir}/state; echo undone >> {host.dir}/undo.log",
                     mutates=True, params={"environment": ParamSpec(enum=["production"])})})
    dropped: list[int] = []

    def drop_prod_2(event: Event, run: Run) -> None:
        if event.kind is EventKind.STEP_OUTPUT and event.host == "prod-2" and not dropped:
            dropped.extend(_session_processes(sshd_hosts, "prod-2"))
            for pid in dropped:  # the connection dies; the command itself keeps running
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    pool = RunnerPool(inventory=inventory)
    try:
        executor = Executor(ExecutorDeps(catalog, inventory, pool.for_host))
        plan = make_plan([{"id": "deploy", "tool": "change",
                           "params": {"environment": "production"}}],
                         rollback=[{"id": "undo", "tool": "undo",
                                    "params": {"environment": "production"}}])
        run = executor.execute(plan, listeners=[drop_prod_2])
    finally:
        pool.close()
    assert dropped, "the test never cut prod-2's connection"
    assert run.status is RunStatus.ROLLED_BACK, run.reason
    assert "prod-2" in run.changed_hosts  # it may have run there: rollback visited it
    assert (dirs["prod-2"] / "undo.log").exists()
    # whatever was left running on prod-2 is gone, and never lands after the rollback
    wait_until(lambda: all(process_gone(p) for p in _leftovers(sshd_hosts)), timeout=15,
               what="prod-2's orphaned command to be gone")
    assert not any((d / "state").exists() for d in dirs.values())


def _leftovers(fleet: SSHFleet) -> list[int]:
    listener = fleet["prod-2"].proc
    assert listener is not None
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
            and _cmdline(p) == "sleep 2.37 "]  # this test's command, nobody else's


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
