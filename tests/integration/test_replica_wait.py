"""Failover edges of the replication gate, with a real primary, replica and three sentinels
and real sshd hosts: a start right after a failover waits (bounded) for the promoted
primary's replica instead of failing, and says so in the record; a replica stopped mid-run
holds the next rollout batch back, but not the rollback (README, "Workers and durability").
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from agents.config import load_config
from agents.engine.worker import Worker, WorkerOptions
from agents.run.record import RunStatus, StepStatus
from agents.run.unreplicated import replica_wait_line
from agents.services import build_services
from agents.store import Store
from tests.fixtures.builders import make_plan
from tests.fixtures.polling import wait_until
from tests.fixtures.redis_sentinel import SentinelGroup
from tests.fixtures.sshd import SSHFleet
from tests.integration.test_replicated_starts import host_config, marks
from tests.integration.test_store import submit


def _audited(store: Store, run_id: str, action: str) -> list[Any]:
    return [e.details.get("status") for e in store.audit.entries(run_id=run_id)
            if e.action == action]


def test_a_start_right_after_a_failover_waits_for_the_new_replica(
        tmp_path: Path, sentinel_group: SentinelGroup, sshd_hosts: SSHFleet) -> None:
    """The primary dies, Sentinel promotes the replica, and the old primary comes back as
    the new primary's replica: connected, but its full sync waits on the new primary's
    diskless-sync delay (Redis's default: 5 s), so no WAIT is acknowledged meanwhile. An
    approved run's first mutating start waits for it — bounded, said in the record and in
    `runs show` — and starts once the replica has its record, instead of failing "not
    started" at the first WAIT."""
    group = sentinel_group
    store = Store.connect(group.url)
    store.replicate_timeout, store.replica_wait = 0.3, 30.0
    config = host_config(tmp_path, sshd_hosts)
    services = build_services(config, store=store)
    plan = make_plan([{"id": "one", "tool": "mark",
                       "params": {"environment": "staging", "label": "one"}}],
                     rollback=[{"id": "undo", "tool": "undo", "params": {"environment": "staging"}}])
    run = submit(services, plan)  # approved before the failover, and on the replica
    replica = redis.Redis(port=group.replica_port, socket_timeout=1)
    wait_until(lambda: b'"status":"queued"' in (replica.get(store.keys.run(run.id)) or b""),
               timeout=10, what="the replica to have the queued run")
    group.kill_primary()
    wait_until(lambda: group.current_primary() == group.replica_port, timeout=30,
               what="Sentinel to promote the replica")
    group.rejoin_old_primary()
    wait_until(lambda: group.replica_states(group.replica_port) == ["wait_bgsave"],
               timeout=10, what="the old primary to connect to the promoted one (syncing)")
    worker = Worker(services, store, name="w", options=WorkerOptions(block=0.1))
    thread = threading.Thread(target=worker.step)
    thread.start()
    try:
        held = wait_until(lambda: (lambda r: r if r.replica_wait else None)(
            store.runs.get(run.id)), timeout=5,
            what="the start to wait for the syncing replica, in the record")
        assert group.replica_states(group.replica_port) == ["wait_bgsave"]  # still syncing
        assert marks(tmp_path) == []  # nothing started while it waits
        assert held.replica_wait.what == "the start of one on 1 host(s)"
        assert held.replica_wait.until - held.replica_wait.since == pytest.approx(30.0, abs=1)
        line = replica_wait_line(held)  # what the live table and `runs show` print
        assert line and line.startswith("waiting for a Redis replica to confirm the start of "
                                        "one on 1 host(s) (since ")
    finally:
        thread.join(30)
    final = store.runs.get(run.id)
    assert final.status is RunStatus.SUCCEEDED, final.reason
    assert marks(tmp_path) == ["one"]  # started once, after the replica confirmed
    assert group.replica_states(group.replica_port) == ["online"]  # it had synced
    assert final.replica_wait is None and replica_wait_line(final) is None
    assert _audited(store, run.id, "replica_wait")[:2] == ["waiting", "confirmed"]


def _two_host_config(tmp_path: Path, fleet: SSHFleet) -> Path:
    """Staging is two sshd hosts rolled out one per batch; `switch` points a host's
    `current` at `new` and holds until the test says go; `back` points it at `old`."""
    hosts = {}
    for name, real in (("web-a", "staging-1"), ("web-b", "prod-1")):
        work = tmp_path / name
        work.mkdir()
        (work / "current").symlink_to("old")
        hosts[name] = fleet.inventory_host(real, vars={"dir": str(work)})
    data = {
        "inventory": {"known_hosts": str(fleet.known_hosts), "hosts": hosts,
                      "environments": {"staging": {"hosts": list(hosts),
                                                   "rollout": {"batch_size": 1}}}},
        "tools": {
            "switch": {"description": "switch current to the new release, then hold",
                       "command": "ln -sfn new {host.dir}/current; touch {host.dir}/switched; "
                                  "for i in $(seq 1 600); do [ -e {vars.go} ] && exit 0; "
                                  "sleep 0.05; done; exit 1",
                       "target": "environment", "mutates": True, "rollback": "back",
                       "timeout": 60},
            "back": {"description": "switch current back to the old release",
                     "command": "ln -sfn old {host.dir}/current", "target": "environment",
                     "mutates": True}},
        "vars": {"go": str(tmp_path / "go")},
    }
    path = tmp_path / "deckhand.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_replica_stopped_mid_rollout_holds_batch_two_back_but_not_the_rollback(
        tmp_path: Path, sentinel_group: SentinelGroup, sshd_hosts: SSHFleet) -> None:
    """Batch 1 switched web-a; the replica is SIGSTOPped before batch 2. Batch 2 waits its
    bound and does not start (web-b never changes); the rollback waits as long, then goes
    ahead unconfirmed: web-a is back on the old release, the run rolled back, and the
    record names the writes no replica confirmed."""
    group = sentinel_group
    store = Store.connect(group.url)
    store.replicate_timeout = store.replica_wait = 0.4
    config = load_config(_two_host_config(tmp_path, sshd_hosts))
    services = build_services(config, store=store)
    plan = make_plan([{"id": "switch", "tool": "switch", "params": {"environment": "staging"}}],
                     rollback=[{"id": "back", "tool": "back",
                                "params": {"environment": "staging"}}])
    run = submit(services, plan)
    worker = Worker(services, store, name="w", options=WorkerOptions(block=0.1))
    thread = threading.Thread(target=worker.step)
    thread.start()
    try:
        wait_until((tmp_path / "web-a" / "switched").exists, what="batch 1 to switch web-a")
        group.pause_replica()
        (tmp_path / "go").touch()
        wait_until(lambda: store.runs.get(run.id).status.terminal, timeout=30,
                   what="the run to end")
    finally:
        thread.join(30)
        group.resume_replica()
    for name in ("web-a", "web-b"):
        assert os.readlink(tmp_path / name / "current") == "old", name
    assert not (tmp_path / "web-b" / "switched").exists()  # batch 2 never started
    raw = json.loads(redis.Redis(port=group.primary_port).get(store.keys.run(run.id)) or "{}")
    assert raw["status"] == "rolled_back", raw.get("reason")
    assert "not started: replication to a Redis replica timed out" in raw["steps"]["switch"][
        "hosts"]["web-b"]["error"]
    final = store.runs.get(run.id)
    assert {h: r.status for h, r in final.rollback["back"].hosts.items()} == {
        "web-a": StepStatus.SUCCEEDED}
    assert final.meta["unreplicated"] == [
        "rollback: the start of back on 1 host(s)", "rollback: the process group of back on "
        "web-a", "end (rolled_back)"]
    assert _audited(store, run.id, "replica_wait") == [
        "waiting", "timed_out",  # batch 2
        "waiting", "timed_out", "unconfirmed",  # the rollback batch: it goes ahead
        "waiting", "timed_out", "unconfirmed"]  # and its process group
