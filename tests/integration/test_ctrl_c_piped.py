"""Ctrl-C on `deckhand run … 2>&1 | tee log`, as a terminal sends it: SIGINT to the whole
foreground process group, so `tee` dies with deckhand and every later write of deckhand's
is a broken pipe. The outcome must be the tty's: what runs is killed, the rollback runs,
the run is recorded, then deckhand exits 1.

Real processes throughout: the `deckhand` entry point (``bot.launch``, what the console
script calls) and a real `tee` in one process group of their own, deploying over real sshd
hosts; the end state is read off the hosts (the `current` symlink, no process left) and the
store (Redis with REDIS_URL; the run's file in the state directory without it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agents.config import load_config
from agents.run.record import RunStatus, StepStatus
from agents.services import build_services
from agents.store import Store
from tests.fixtures.polling import wait_until
from tests.fixtures.sshd import SSHFleet
from tests.integration.test_store import submit

ROOT = Path(__file__).resolve().parents[2]
HOSTS = {"web-a": "staging-1", "web-b": "prod-1"}
"""Inventory name → sshd host of the session's fleet."""


def _config(tmp_path: Path, fleet: SSHFleet) -> Path:
    """Staging is two sshd hosts; `ship` switches each host's `current` from `old` to `new`
    about 5 s after it starts, or once the test creates `go` (killable until then); `back`
    points it at `old` again."""
    hosts = {}
    for name, real in HOSTS.items():
        work = tmp_path / name
        work.mkdir()
        (work / "current").symlink_to("old")
        hosts[name] = fleet.inventory_host(real, vars={"dir": str(work)})
    data = {
        "inventory": {"known_hosts": str(fleet.known_hosts), "hosts": hosts,
                      "environments": {"staging": {"hosts": list(HOSTS)}}},
        "tools": {
            "switch": {"description": "start, wait, then switch current to the new release",
                       "command": "touch {host.dir}/started; i=0; while [ $i -lt 100 ] && "
                                  "[ ! -e {vars.go} ]; do sleep 0.05; i=$((i+1)); done; "
                                  "ln -sfn new {host.dir}/current",
                       "target": "environment", "mutates": True, "rollback": "back"},
            "back": {"description": "switch current back to the old release",
                     "command": "ln -sfn old {host.dir}/current; "
                                "echo back {host.name} >> {vars.log}",
                     "target": "environment", "mutates": True}},
        "vars": {"log": str(tmp_path / "log.txt"), "go": str(tmp_path / "go")},
        "playbooks": [{"name": "ship", "match": ["^ship$"], "goal": "ship it to staging",
                       "steps": [{"id": "switch", "tool": "switch",
                                  "params": {"environment": "staging"}}],
                       "rollback": [{"id": "back", "tool": "back",
                                     "params": {"environment": "staging"}}]}],
    }
    path = tmp_path / "deckhand.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class Pipeline:
    """`deckhand run ship --yes 2>&1 | tee log` (or ``argv``'s command) in a process group
    of its own."""

    def __init__(self, tmp_path: Path, config: Path, redis_url: str | None,
                 argv: tuple[str, ...] = ("run", "ship", "--yes")) -> None:
        env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"} | {
            "PYTHONPATH": str(ROOT), "COLUMNS": "200", "DECKHAND_STATE_DIR": str(tmp_path / "state")}
        if redis_url:
            env["REDIS_URL"] = redis_url
        self.env = env
        self.deckhand = subprocess.Popen(
            [sys.executable, "-m", "bot.launch", *argv, "--config", str(config)],
            env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, process_group=0)
        assert self.deckhand.stdout is not None
        self.tee = subprocess.Popen(["tee", str(tmp_path / "tee.log")], stdin=self.deckhand.stdout,
                                    stdout=subprocess.DEVNULL, process_group=self.deckhand.pid)
        self.deckhand.stdout.close()  # tee alone reads the pipe: once it dies, writes fail

    def ctrl_c(self) -> None:
        """What a terminal does on Ctrl-C: SIGINT to the foreground process group."""
        os.killpg(self.deckhand.pid, signal.SIGINT)

    def close(self) -> None:
        for proc in (self.deckhand, self.tee):
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


@pytest.fixture
def started(tmp_path: Path, sshd_hosts: SSHFleet,
            request: pytest.FixtureRequest) -> Iterator[Pipeline]:
    redis_url = request.getfixturevalue("redis_url") if request.param else None
    pipeline = Pipeline(tmp_path, _config(tmp_path, sshd_hosts), redis_url)
    try:
        wait_until(lambda: all((tmp_path / n / "started").exists() for n in HOSTS),
                   what="both hosts' switch to start")
        yield pipeline
    finally:
        pipeline.close()


def _leftovers(tmp_path: Path) -> list[str]:
    """Command lines of live processes working on a host directory of this test."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
        if f"{tmp_path}/web-" in line and "ln -sfn new" in line:
            found.append(line)
    return found


def _assert_hosts_back(tmp_path: Path, pipeline: Pipeline) -> None:
    assert pipeline.deckhand.wait(60) == 1  # a cancelled run: not a signal, not a crash
    assert pipeline.tee.wait(10) == -signal.SIGINT  # tee did die with the Ctrl-C
    wait_until(lambda: not _leftovers(tmp_path), timeout=5,
               what="no switch command left on a host")  # none left to switch later
    for name in HOSTS:
        assert os.readlink(tmp_path / name / "current") == "old", name
    assert sorted((tmp_path / "log.txt").read_text().split("\n")[:-1]) == [
        "back web-a", "back web-b"]  # the rollback visited both hosts, once each


@pytest.mark.parametrize("started", [True], indirect=True, ids=["redis"])
def test_ctrl_c_to_the_group_of_a_piped_run_rolls_back_and_records(
        tmp_path: Path, store: Store, started: Pipeline) -> None:
    started.ctrl_c()
    _assert_hosts_back(tmp_path, started)
    (run,) = store.runs.recent(limit=5)
    assert run.status is RunStatus.CANCELLED, run.reason
    assert {h: r.status for h, r in run.rollback["back"].hosts.items()} == dict.fromkeys(
        HOSTS, StepStatus.SUCCEEDED)
    audit = [(e.action, e.details.get("status")) for e in store.audit.entries(run_id=run.id)]
    assert ("rollback_finished", "succeeded") in audit


@pytest.mark.parametrize("started", [False], indirect=True, ids=["embedded"])
def test_ctrl_c_to_the_group_of_a_piped_run_without_redis(tmp_path: Path,
                                                          started: Pipeline) -> None:
    started.ctrl_c()
    _assert_hosts_back(tmp_path, started)
    # the in-process store ended with deckhand: its record is the state directory's
    (line,) = (tmp_path / "state" / "runs.jsonl").read_text().splitlines()
    kept = json.loads(line)
    assert kept["run"]["status"] == "cancelled", kept["run"]["reason"]
    assert {h: r["status"] for h, r in kept["run"]["rollback"]["back"]["hosts"].items()} == \
        dict.fromkeys(HOSTS, "succeeded")
    assert [(e["action"], e["details"].get("status")) for e in kept["audit"]
            if e["action"] == "run_finished"] == [("run_finished", "cancelled")]
    shown = subprocess.run(  # and `runs show` reads it there, with no REDIS_URL
        [sys.executable, "-m", "bot.launch", "runs", "show", kept["id"], "--json",
         "--config", str(tmp_path / "deckhand.yml")], env=started.env, cwd=ROOT,
        capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["status"] == "cancelled"


def test_ctrl_c_to_a_piped_worker_drains_its_run_to_the_end(
        tmp_path: Path, store: Store, sshd_hosts: SSHFleet, redis_url: str) -> None:
    """The other process that runs steps: `deckhand worker 2>&1 | tee log`, Ctrl-C to the
    group mid-run. A worker drains — it finishes the run in hand, then exits 0 — and the dead
    pipe under its "draining" line changes nothing of that."""
    config = _config(tmp_path, sshd_hosts)
    services = build_services(load_config(config), store=store)
    run = submit(services, services.make_plan("ship", requested_by="alice", face="cli"))
    pipeline = Pipeline(tmp_path, config, redis_url, argv=("worker", "--name", "piped"))
    try:
        wait_until(lambda: all((tmp_path / n / "started").exists() for n in HOSTS),
                   what="both hosts' switch to start")
        pipeline.ctrl_c()
        assert pipeline.tee.wait(10) == -signal.SIGINT
        (tmp_path / "go").touch()  # the run in hand may end now
        assert pipeline.deckhand.wait(60) == 0  # drained, not killed by its own output
    finally:
        pipeline.close()
    final = store.runs.get(run.id)
    assert final.status is RunStatus.SUCCEEDED, final.reason
    for name in HOSTS:
        assert os.readlink(tmp_path / name / "current") == "new", name
