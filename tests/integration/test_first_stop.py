"""The first Stop wins, and nothing new starts once it is acknowledged (issue 39.4): real
redis-server, real sshd hosts, a real worker.

Twenty Stops at once — through `deckhand stop` and through the door every face uses — give
one stop: one ``cancel_requested`` audit entry, nineteen "already stopping (stopped by …)"
answers, each told to its asker. A stop acknowledged at a batch boundary (the batch's own
command asks for it and ends) holds the next batch: no host starts after it, asserted on the
hosts' start markers against the moment the stop was recorded.
"""

from __future__ import annotations

import shlex
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from agents.config import Config, load_config
from agents.engine.control import Control, steer
from agents.engine.worker import Worker, WorkerOptions
from agents.errors import AlreadyStopping
from agents.run.record import RunStatus
from agents.services import build_services
from agents.store import Store
from bot.cli import main
from tests.fixtures.builders import make_plan
from tests.fixtures.polling import wait_until
from tests.fixtures.sshd import SSHFleet
from tests.integration.test_store import submit

ROOT = Path(__file__).resolve().parents[2]
HOSTS = ("prod-1", "prod-2", "prod-3")
WAIT_FOR_GO = "for i in $(seq 1 600); do [ -e {vars.go} ] && exit 0; sleep 0.05; done; exit 1"
STOPPERS = 20


def _config(tmp_path: Path, fleet: SSHFleet, command: str) -> Config:
    for name in HOSTS:
        (tmp_path / "hosts" / name).mkdir(parents=True)
    tools = {
        "ship": {"description": "put a version on a host", "command": command,
                 "target": "environment", "mutates": True, "rollback": "undo", "timeout": 60,
                 "params": {"version": {"pattern": r"^v\d+\.\d+\.\d+$"}}},
        "undo": {"description": "put the host back", "target": "environment",
                 "mutates": True, "command": "echo undo >> {host.dir}/changes"}}
    data = {"inventory": {
                "known_hosts": str(fleet.known_hosts),
                "hosts": {n: fleet.inventory_host(n, vars={"dir": str(tmp_path / "hosts" / n)})
                          for n in HOSTS},
                "environments": {"production": {"hosts": list(HOSTS),
                                                "rollout": {"batch_size": 1}}}},
            "tools": tools, "vars": {"go": str(tmp_path / "go")},
            "policy": {"environments": {"production": {
                "approvers": {"users": ["alice", "bob", "carol"]}, "self_approval": False}}}}
    path = tmp_path / "deckhand.yml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


def _plan() -> Any:
    return make_plan([{"id": "ship", "tool": "ship",
                       "params": {"environment": "production", "version": "v2.0.0"}}],
                     rollback=[{"id": "undo", "tool": "undo",
                                "params": {"environment": "production"}}])


def _changes(tmp_path: Path, host: str) -> list[str]:
    path = tmp_path / "hosts" / host / "changes"
    return path.read_text().split() if path.exists() else []


def _started_at(tmp_path: Path, host: str) -> float | None:
    """When the host's command started (its own clock: this machine's), if it did."""
    path = tmp_path / "hosts" / host / "started"
    return float(path.read_text()) if path.exists() else None


def test_twenty_concurrent_stops_make_one_stop_and_the_rest_hear_who_stopped_it(
        tmp_path: Path, store: Store, redis_url: str, sshd_hosts: SSHFleet,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    config = _config(tmp_path, sshd_hosts, "echo {version} >> {host.dir}/changes; "
                                           "touch {host.dir}/started; " + WAIT_FOR_GO)
    services = build_services(config, store=store)
    run_id = submit(services, _plan(), by="alice", approvers=("bob",)).id
    worker = Worker(services, store, name="w", options=WorkerOptions(block=0.1))
    thread = threading.Thread(target=worker.step)
    thread.start()
    barrier = threading.Barrier(STOPPERS)
    answers: list[Any] = [None] * STOPPERS

    def stop(index: int) -> None:
        user = ("alice", "bob", "carol")[index % 3]
        barrier.wait()
        if index % 2:  # `deckhand stop RUN`: its exit code
            answers[index] = main(["stop", run_id, "--user", user,
                                   "--config", str(config.path)])
            return
        try:  # the door every face uses (Slack's buttons, MCP, the terminal's keys)
            steer(config.policy, Control.STOP, run_id, runs=store.runs, audit=store.audit,
                  user=user, via="button")
            answers[index] = "stopped"
        except AlreadyStopping as exc:
            answers[index] = exc

    try:
        wait_until((tmp_path / "hosts" / "prod-1" / "started").exists, what="batch 1 to start")
        stoppers = [threading.Thread(target=stop, args=(i,)) for i in range(STOPPERS)]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join(60)
    finally:
        (tmp_path / "go").touch()
        thread.join(60)
    audit = store.audit.entries(run_id=run_id)
    (first,) = [e for e in audit if e.action == "cancel_requested"]  # one, with its face
    winners = [i for i, a in enumerate(answers) if a in ("stopped", 0)]
    assert len(winners) == 1, answers
    assert first.details["via"] == ("cli" if winners[0] % 2 else "button")
    assert first.actor == ("alice", "bob", "carol")[winners[0] % 3]
    told = [a for a in answers if isinstance(a, AlreadyStopping)]
    assert all(a.by == first.actor for a in told)
    assert sorted(a for a in answers if isinstance(a, int)) == [0] * (winners[0] % 2) + [3] * (
        STOPPERS // 2 - winners[0] % 2)  # the CLI's later stops: exit 3, one line each
    said = capsys.readouterr().out
    assert " ".join(said.split()).count(f"already stopping (stopped by {first.actor})") == \
        STOPPERS // 2 - winners[0] % 2
    refused = [e for e in audit if e.action == "stop_refused"]
    assert len(refused) == STOPPERS - 1
    assert all(f"already stopping (stopped by {first.actor})" in e.details["rule"]
               for e in refused)
    final = store.runs.get(run_id)
    assert final.status is RunStatus.CANCELLED
    assert final.reason == f"cancelled: cancelled by {first.actor}"
    assert [_changes(tmp_path, h) for h in HOSTS] == [["v2.0.0", "undo"], [], []]
    assert store.runs.cancel_requested(run_id) is None  # the request ended with the run


@pytest.mark.parametrize("asker", ["prod-1", "prod-3"], ids=["boundary", "last-batch"])
def test_a_stop_acknowledged_at_a_batch_boundary_holds_the_next_batch(
        tmp_path: Path, store: Store, redis_url: str, sshd_hosts: SSHFleet, asker: str) -> None:
    """A host's own command runs `deckhand stop RUN` and ends as soon as it returns: the
    worker's next move is to start the next batch, well within its heartbeat's second
    (before issue 39 it did, and the rollout ran on to success). Nothing may start after
    the stop; and a stop acknowledged while the last batch ran still rolls back."""
    script = shlex.quote(str(tmp_path / "stop.sh"))
    config = _config(tmp_path, sshd_hosts, "date +%s.%N > {host.dir}/started; "
                                           "echo {version} >> {host.dir}/changes; "
                                           f"if [ {{host.name}} = {asker} ]; then sh {script}; fi")
    services = build_services(config, store=store)
    run_id = submit(services, _plan(), by="alice", approvers=("bob",)).id
    said, returned = tmp_path / "stop.out", tmp_path / "returned"
    (tmp_path / "stop.sh").write_text(
        f"REDIS_URL={shlex.quote(redis_url)} PYTHONPATH={shlex.quote(str(ROOT))} "
        f"{shlex.quote(sys.executable)} -m bot.cli stop {run_id} --user alice "
        f"--config {shlex.quote(str(config.path))} > {shlex.quote(str(said))} 2>&1\n"
        f"date +%s.%N > {shlex.quote(str(returned))}\n")
    worker = Worker(services, store, name="w", options=WorkerOptions(block=0.1))
    thread = threading.Thread(target=worker.step)
    thread.start()
    thread.join(120)
    assert not thread.is_alive()
    final = store.runs.get(run_id)
    assert final.status is RunStatus.CANCELLED, final.reason
    assert final.reason == "cancelled: cancelled by alice" and "stopping" in said.read_text()
    (stop,) = [e for e in store.audit.entries(run_id=run_id) if e.action == "cancel_requested"]
    assert (stop.actor, stop.details["via"]) == ("alice", "cli")
    ran = HOSTS[:HOSTS.index(asker) + 1]  # up to the one that asked; each undone
    assert [_changes(tmp_path, h) for h in HOSTS] == [
        ["v2.0.0", "undo"] if h in ran else [] for h in HOSTS]
    assert [_started_at(tmp_path, h) is not None for h in HOSTS] == [h in ran for h in HOSTS]
    started = [t for h in HOSTS if (t := _started_at(tmp_path, h)) is not None]
    assert all(t < stop.at for t in started)  # every start came before the stop landed
    if returned.exists():  # (unless the kill of the asking command came first)
        assert all(t < float(returned.read_text()) for t in started)
    assert set(final.steps["ship"].hosts) == set(ran)  # not even announced elsewhere
