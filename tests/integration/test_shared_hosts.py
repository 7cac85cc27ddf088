"""A host two services share (docs/services.md 2.3, 2.5), on real sshd hosts and a real
Redis: a run touching it needs both services' approvers and owners, either's freeze
blocks it, and it holds a host lock, so a second run touching the machine waits (or is
refused) while the other service's runs on its other hosts go ahead. A run that does not
touch the shared host answers to its own service alone.

api lists prod-1 (``api-1``) and prod-3 (``box``) in production; web lists prod-2
(``web-1``) and prod-3 (``shop``): one machine under two names, one marker directory.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from agents.engine.worker import Worker, WorkerOptions
from agents.errors import ApprovalRefused, FreezeRefused
from agents.org import Org, load_org
from agents.run.record import Run, RunStatus, Verdict
from agents.services import Services, build_services
from agents.store import Store
from bot.cli import main
from tests.fixtures.polling import wait_until
from tests.fixtures.sshd import SSHFleet

LEASE = 6.0
"""The holding api worker's lease: its heartbeat (every second) renews the host lock."""
TUESDAY = datetime(2026, 11, 24, 12, tzinfo=UTC).timestamp()
IN_WEBS_FREEZE = datetime(2030, 1, 1, 12, tzinfo=UTC).timestamp()
MACHINES = {"api": {"box": "prod-3", "api-1": "prod-1"},  # box first: batch 1
            "web": {"web-1": "prod-2", "shop": "prod-3"}}


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def service_doc(name: str, tmp_path: Path, fleet: SSHFleet, policy: dict[str, Any],
                owners: list[str], rollout: dict[str, Any] | None = None) -> dict[str, Any]:
    hosts = {host: fleet.inventory_host(machine, vars={"dir": str(tmp_path / "hosts" / machine)})
             for host, machine in MACHINES[name].items()}
    return {
        "tools": {
            "deploy": {"description": "put a version on every host of an environment",
                       "command": f"mkdir -p {{host.dir}} && echo {name}-{{version}} > "
                                  f"{{host.dir}}/version",
                       "target": "environment", "mutates": True, "rollback": "undo",
                       "params": {"version": {"pattern": r"^v\d+$"}}},
            "undo": {"description": "undo", "command": "rm -f {host.dir}/version",
                     "target": "environment", "mutates": True}},
        "playbooks": [{"name": "ship", "match": [r"^ship (?P<version>v\d+)$"],
                       "goal": "ship {version}",
                       "steps": [{"id": "ship", "tool": "deploy",
                                  "params": {"environment": "production",
                                             "version": "{version}"}}],
                       "rollback": [{"id": "undo", "tool": "undo",
                                     "params": {"environment": "production"}}]}],
        "inventory": {"hosts": hosts, "environments": {"production": {
            "hosts": list(MACHINES[name]), **({"rollout": rollout} if rollout else {})}}},
        "owners": {"users": owners},
        "policy": policy,
    }


def write_org(tmp_path: Path, fleet: SSHFleet, *, web_lock: str = "wait",
              api_lock_hosts: bool = False) -> Path:
    """api holds for a go/no-go after its first batch (box), so a test can look while it
    holds its locks; web freezes on 1 January 2030."""
    api = service_doc("api", tmp_path, fleet, {"environments": {"production": {
        "approvers": {"users": ["alice", "bob", "carol"]}, "lock": "wait",
        "lock_hosts": api_lock_hosts}}},
        ["alice", "carol"], {"batch_size": 1, "judgment": {"after_batches": [1]}})
    web = service_doc("web", tmp_path, fleet, {
        "environments": {"production": {"approvers": {"users": ["bob", "carol", "dave"]},
                                        "lock": web_lock}},
        "limits": {"production": {"runs_per_hour": 5}},
        "freeze": [{"environments": ["production"], "reason": "the sale",
                    "start": "2030-01-01T00:00:00", "end": "2030-01-02T00:00:00"}]},
        ["bob", "carol"])
    (tmp_path / "services").mkdir(exist_ok=True)
    for name, doc in (("api", api), ("web", web)):
        (tmp_path / "services" / f"{name}.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    path = tmp_path / "deckhand.yml"
    path.write_text(yaml.safe_dump({
        "services": {"api": "services/api.yml", "web": "services/web.yml"},
        "inventory": {"known_hosts": str(fleet.known_hosts)}}, sort_keys=False))
    return path


def on_redis(org: Org, redis_url: str, now: float) -> tuple[Store, Services, Services]:
    clock = Clock(now)
    store = Store.connect(redis_url, clock=clock)
    store.r.flushdb()
    api, web = (build_services(org.services[n], store=store) for n in ("api", "web"))
    api.clock = web.clock = clock
    return store, api, web


def request(services: Services, text: str, *, by: str, limit: list[str] | None = None) -> Run:
    plan = services.make_plan(text, requested_by=by, face="cli", limit=limit)
    services.store.plans.save(plan)
    return services.store.runs.create(Run.for_plan(plan, services.targets(plan)))


def approve(services: Services, run: Run, user: str) -> Run:
    return services.store.runs.approve(run.id, face="cli", user=user,
                                       plan_version=run.plan_version, plan_hash=run.plan_hash,
                                       policy=services.config.policy)


def worker(services: Services, name: str, lease: float = 30.0) -> Worker:
    return Worker(services, services.store, name=name,
                  options=WorkerOptions(block=0.1, lease=lease))


def marker(tmp_path: Path, machine: str) -> str | None:
    found = tmp_path / "hosts" / machine / "version"
    return found.read_text().strip() if found.exists() else None


@pytest.fixture
def org(tmp_path: Path, sshd_hosts: SSHFleet) -> Org:
    return load_org(write_org(tmp_path, sshd_hosts))


def test_a_run_touching_the_shared_host_answers_to_both_services(
        org: Org, tmp_path: Path, redis_url: str, sshd_hosts: SSHFleet, client: redis.Redis,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    store, api, web = on_redis(org, redis_url, time.time())  # the CLI below counts from now
    run = request(api, "ship v1", by="erin")
    assert (run.service, run.environments, run.shared) == ("api", ["production"],
                                                           ["web/production"])
    assert run.reach["web/production"] == ["box"]
    for who, missing in (("alice", "web/production"), ("bob", "production (owners)"),
                         ("dave", "production")):
        with pytest.raises(ApprovalRefused, match=missing.replace("(", r"\(").replace(")", r"\)")):
            approve(api, run, who)
    assert store.runs.get(run.id).approvals == []
    assert approve(api, run, "carol").status is RunStatus.QUEUED  # in both services' rules

    alone = request(web, "ship v1", by="erin", limit=["web-1"])  # not the shared machine
    assert (alone.shared, alone.reach) == ([], {"production": ["web-1"]})
    assert approve(web, alone, "bob").status is RunStatus.QUEUED  # not an api owner

    monkeypatch.setenv("REDIS_URL", redis_url)
    path = str(org.path)
    assert client.zrange("dh:limits:web:production:carol", 0, -1) == [run.id.encode()]
    assert client.keys("dh:limits:api:*") == []  # counted where web's limit counts
    assert main(["policy", "explain", run.id, "--config", path, "--user", "carol"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    for layer in ("production: alice, bob, carol (1 needed) — services/api.yml:",
                  "production: alice, carol (1 needed) — owners: services/api.yml:",
                  "web/production: bob, carol, dave (1 needed) — web/production: "
                  "services/web.yml:", "policy.environments.production, touches box",
                  "web/production: bob, carol (1 needed) — web/production: owners: "
                  "services/web.yml:", "by name: carol",
                  "limit: 5 web/production run(s) per hour per person",
                  "carol approved 1 web/production run(s) in the last hour (limit 5)"):
        assert layer in out, (layer, out)

    assert main(["check", path]) == 0
    out = " ".join(capsys.readouterr().out.split())
    box = sshd_hosts.inventory_host("prod-3")
    assert f"shared host: api: host box (127.0.0.1:{box['port']}) is also in " \
           f"web/production" in out
    assert f"shared host: web: host shop (127.0.0.1:{box['port']}) is also in " \
           f"api/production" in out
    store.r.flushdb()


def test_either_services_freeze_blocks_only_runs_touching_the_shared_host(
        org: Org, redis_url: str) -> None:
    store, api, web = on_redis(org, redis_url, IN_WEBS_FREEZE)
    with pytest.raises(FreezeRefused, match="web/production: the sale"):
        api.make_plan("ship v1", requested_by="erin", face="cli")
    run = request(api, "ship v1", by="erin", limit=["api-1"])  # api's other host: no freeze
    assert run.shared == [] and approve(api, run, "alice").status is RunStatus.QUEUED

    api.clock.now = TUESDAY  # approved before the freeze, started during it: not started
    early = request(api, "ship v2", by="erin")
    approve(api, early, "carol")
    api.clock.now = IN_WEBS_FREEZE
    assert worker(api, "w-api").process(early.id) is None
    ended = store.runs.get(early.id)
    assert ended.status is RunStatus.CANCELLED and "web/production: the sale" in ended.reason
    assert store.locks.hosts() == []
    store.r.flushdb()


def test_a_second_run_touching_the_shared_host_waits_while_webs_other_hosts_deploy(
        org: Org, tmp_path: Path, redis_url: str, client: redis.Redis,
        holder: Holder) -> None:
    store, api, web = on_redis(org, redis_url, TUESDAY)
    box_id = org.services["api"].inventory.hosts["box"].lock_id
    held = holder.hold(store, api)
    assert [(i.environment, i.run_id) for i in store.locks.hosts()] == [(box_id, held.id)]
    key = f"dh:hostlock:{box_id}"  # the heartbeat renews it with the environment's lock
    wait_until(lambda: 0 < client.pttl(key) < (LEASE - 1) * 1000, what="the lease to run")
    wait_until(lambda: client.pttl(key) > (LEASE - 0.5) * 1000, what="a heartbeat renewal")

    waits = request(web, "ship v2", by="erin")  # web/production: web-1 and shop (= box)
    approve(web, waits, "carol")
    assert worker(web, "w-web").process(waits.id) is None
    assert store.runs.get(waits.id).status is RunStatus.QUEUED
    assert client.lrange(f"dh:hostlockq:{box_id}", 0, -1) == [waits.id.encode()]
    assert client.get("dh:lock:web:production") is None  # all or none: web's lock free

    other = request(web, "ship v3", by="erin", limit=["web-1"])
    approve(web, other, "bob")  # not an api owner: api's rules do not apply
    done = worker(web, "w-web").process(other.id)
    assert done is not None and done.status is RunStatus.SUCCEEDED
    assert marker(tmp_path, "prod-2") == "web-v3"
    assert (marker(tmp_path, "prod-3"), marker(tmp_path, "prod-1")) == ("api-v1", None)
    assert store.locks.host(box_id).run_id == held.id

    holder.release()
    assert store.runs.get(held.id).status is RunStatus.SUCCEEDED
    assert marker(tmp_path, "prod-1") == "api-v1"
    assert client.lrange(f"dh:hostlockq:{box_id}", 0, -1) == []  # woken onto the queue
    web_worker = worker(web, "w-web")
    wait_until(lambda: web_worker.step(block=0.1) and store.runs.get(waits.id).status.terminal,
               what="the waiting web run to be woken and run")
    assert store.runs.get(waits.id).status is RunStatus.SUCCEEDED
    assert (marker(tmp_path, "prod-3"), marker(tmp_path, "prod-2")) == ("web-v2", "web-v2")
    assert client.keys("dh:hostlock*") == [] and client.keys("dh:lock:*") == []
    store.r.flushdb()


def test_a_second_run_touching_the_shared_host_is_refused_when_a_rule_says_refuse(
        tmp_path: Path, sshd_hosts: SSHFleet, redis_url: str, client: redis.Redis,
        holder: Holder) -> None:
    org = load_org(write_org(tmp_path, sshd_hosts, web_lock="refuse", api_lock_hosts=True))
    store, api, web = on_redis(org, redis_url, TUESDAY)
    hosts = org.services["api"].inventory.hosts
    box_id = hosts["box"].lock_id
    held = holder.hold(store, api)
    assert {i.environment for i in store.locks.hosts()} == {box_id, hosts["api-1"].lock_id}

    refused = request(web, "ship v2", by="erin")
    approve(web, refused, "carol")
    assert worker(web, "w-web").process(refused.id) is None
    ended = store.runs.get(refused.id)
    assert ended.status is RunStatus.FAILED
    assert f"host {box_id} is locked by {held.id}" in (ended.reason or "")
    assert client.lrange(f"dh:hostlockq:{box_id}", 0, -1) == []
    assert marker(tmp_path, "prod-2") is None  # nothing of web's ran

    holder.release()
    assert store.runs.get(held.id).status is RunStatus.SUCCEEDED
    assert client.keys("dh:hostlock*") == []
    store.r.flushdb()


class Holder:
    """Starts an api run that holds box (and its locks) at a go/no-go, and lets it go."""

    def __init__(self) -> None:
        self.started: list[tuple[Store, Services, Run, threading.Thread]] = []

    def hold(self, store: Store, api: Services) -> Run:
        run = request(api, "ship v1", by="erin")
        approve(api, run, "carol")
        thread = threading.Thread(target=worker(api, "w-api", lease=LEASE).process,
                                  args=(run.id,), daemon=True)
        thread.start()
        self.started.append((store, api, run, thread))
        held: Run = wait_until(lambda: (r := store.runs.get(run.id)).awaiting and r,
                               what="the api run to hold for a go/no-go after box")
        return held

    def release(self) -> None:
        for store, api, run, thread in self.started:
            if thread.is_alive():
                store.judgments.decide(run.id, Verdict.CONTINUE, user="carol", via="cli",
                                       policy=api.config.policy)
                thread.join(timeout=60)
            assert not thread.is_alive()
        self.started.clear()


@pytest.fixture
def holder() -> Iterator[Holder]:
    found = Holder()
    try:
        yield found
    finally:
        with contextlib.suppress(Exception):  # a failed test's run must not outlive it
            found.release()
