"""deploy/compose.yml's Redis and Sentinel services, run as processes on loopback (no
container engine): failover, a full restart of every member (the current primary last: the
sentinels must not promote the member whose data is older than the failover), a second
failover, and no acknowledged write lost on the way.

Each member runs the compose file's own entrypoint script with the compose file's own
environment. Only what a container engine would provide differs: every hostname is
127.0.0.1, every member gets a free port, each volume is a directory, the secret is a file,
and Sentinel's timings are shortened (down-after 1.5 s) so the test takes seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from agents.store.connect import connect_client
from tests.fixtures.polling import wait_until
from tests.fixtures.sample import free_port

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "deploy" / "compose.yml"
DATA_NODES = ("redis-primary", "redis-replica")
SENTINELS = ("sentinel-1", "sentinel-2", "sentinel-3")
PASSWORD = "compose-test-password-0123"
FAST = {"DOWN_AFTER_MS": "1500", "FAILOVER_TIMEOUT_MS": "5000"}  # > a loaded CI stall


@dataclass
class Member:
    name: str
    argv: list[str]
    env: dict[str, str]
    port: int
    proc: subprocess.Popen[bytes] | None = None

    def start(self, log: Path) -> None:
        with log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, env=self.env, stdout=out, stderr=out)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(15)

    def client(self) -> redis.Redis:
        password = PASSWORD if self.name in DATA_NODES else None
        return redis.Redis(port=self.port, password=password, socket_timeout=1)


@dataclass
class Stack:
    root: Path
    members: dict[str, Member] = field(default_factory=dict)

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{self.members[s].port}" for s in SENTINELS)
        return f"redis+sentinel://:{PASSWORD}@{hosts}/deckhand/0"

    def start(self, names: tuple[str, ...] = DATA_NODES + SENTINELS) -> None:
        for name in names:  # compose's order: sentinels depend on the data nodes
            self.members[name].start(self.root / f"{name}.log")

    def stop_all(self) -> None:
        for member in self.members.values():
            member.stop()

    def primary(self) -> str | None:
        """The member every sentinel names as primary (None while they disagree)."""
        answers = set()
        for name in SENTINELS:
            try:
                address = self.members[name].client().sentinel_get_master_addr_by_name(
                    "deckhand")
            except redis.RedisError:
                return None
            answers.add(int(address[1]) if address else None)
        if len(answers) != 1:
            return None
        port = answers.pop()
        return next((m.name for m in self.members.values() if m.port == port), None)

    def role(self, name: str) -> str | None:
        try:
            return str(self.members[name].client().role()[0].decode())
        except redis.RedisError:
            return None

    def settled(self, primary: str, replica: str | None) -> bool:
        """Every sentinel names ``primary``, which is a primary; ``replica`` follows it, and
        every sentinel could promote it (so the next failover can happen)."""
        if self.primary() != primary or self.role(primary) != "master":
            return False
        if replica is None:
            return True
        try:
            info = self.members[replica].client().info("replication")
        except redis.RedisError:
            return False
        return bool(info.get("master_link_status") == "up"
                    and int(info.get("master_port", 0)) == self.members[primary].port
                    and all(self.promotable(s, replica, primary) for s in SENTINELS))

    def promotable(self, sentinel: str, replica: str, primary: str) -> bool:
        """``sentinel`` knows ``replica`` as a healthy replica of ``primary``. A sentinel
        learns of replicas from the primary's INFO, every 10 s: a primary killed before
        that leaves no replica to promote (-failover-abort-no-good-slave), which is what a
        loaded machine's slower start once made this test wait 45 s for."""
        try:
            known = self.members[sentinel].client().sentinel_slaves("deckhand")
        except redis.RedisError:
            return False
        return any(r["port"] == self.members[replica].port and r["flags"] == "slave"
                   and r.get("master-link-status") == "ok" and r["slave-priority"] > 0
                   and r.get("master-port") == self.members[primary].port for r in known)

    def sentinels_know_each_other(self) -> bool:
        try:
            return all(len(self.members[s].client().sentinel_sentinels("deckhand")) == 2
                       for s in SENTINELS)
        except redis.RedisError:  # a 1 s socket timeout on a loaded machine: ask again
            return False

    def log(self) -> str:
        return "\n".join(f"== {p.name}\n{p.read_text()[-1500:]}" for p in self.root.glob("*.log"))


def _members(root: Path) -> dict[str, Member]:
    services: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())["services"]
    ports = {name: free_port() for name in DATA_NODES + SENTINELS}
    default = {name: 26379 if name in SENTINELS else 6379 for name in ports}
    secret = root / "redis_password"
    secret.write_text(PASSWORD)
    members = {}
    for name, port in ports.items():
        service = services[name]
        env = {key: _local(str(value), ports, default)
               for key, value in service["environment"].items()}
        env.update(REDIS_PORT=str(port), SENTINEL_PORT=str(port), REDIS_BIND="127.0.0.1",
                   REDIS_PASSWORD_FILE=str(secret), DATA_DIR=str(_volume(root, service)),
                   SENTINEL_WAIT="10", PATH=os.environ["PATH"])
        if name in SENTINELS:
            env.update(FAST)
        argv = [_script_path(arg, service) for arg in service["entrypoint"]]
        members[name] = Member(name, argv, env, port)
    return members


def _local(value: str, ports: dict[str, int], default: dict[str, int]) -> str:
    """A compose value with every member's host[:port] turned into 127.0.0.1[:free port]."""
    for name, port in ports.items():
        value = value.replace(f"{name}:{default[name]}", f"127.0.0.1:{port}")
    return "127.0.0.1" if value in ports else value


def _volume(root: Path, service: dict[str, Any]) -> Path:
    """The directory standing in for the service's /data volume."""
    volume = next(v.split(":")[0] for v in service["volumes"] if v.split(":")[1] == "/data")
    path = root / "volumes" / volume
    path.mkdir(parents=True, exist_ok=True)
    return path


def _script_path(arg: str, service: dict[str, Any]) -> str:
    """An entrypoint argument with the scripts' bind mount mapped back into deploy/."""
    for volume in service["volumes"]:
        source, target = volume.split(":")[:2]
        if source.startswith("./") and arg.startswith(target + "/"):
            return str(COMPOSE.parent / source / arg[len(target) + 1:])
    return arg


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    group = Stack(tmp_path)
    group.members = _members(tmp_path)
    yield group
    group.stop_all()


def _settle(stack: Stack, primary: str, replica: str | None, what: str) -> None:
    try:
        wait_until(lambda: stack.settled(primary, replica), timeout=45, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{stack.log()}") from None


def _write(stack: Stack, key: str) -> None:
    client = connect_client(stack.url)  # a fresh client: finds the primary via Sentinel
    try:
        client.set(key, "1")
        assert client.get(key) == b"1"
        # replication is asynchronous: a key the next kill must not lose is on a replica
        # first, as deckhand's own writes are (WAIT), when one is connected
        if int(client.info("replication").get("connected_slaves", 0)):
            assert client.wait(1, 10000) >= 1, f"{key} never reached the replica"
    finally:
        client.close()


def _start_without_the_primary(stack: Stack, primary: str) -> None:
    """Start every member but ``primary``: the sentinels find it down and try a failover,
    but refuse the member that has not synced since it started (its data is older than the
    last failover) instead of promoting it."""
    stack.start(tuple(n for n in DATA_NODES + SENTINELS if n != primary))
    events = ("-failover-abort-no-good-slave", "+switch-master")
    # Sentinel publishes each of its events on a channel of the event's name
    channels = [wait_until(partial(_subscribed, stack.members[name], events), timeout=30,
                           what=f"{name} to take subscriptions") for name in SENTINELS]

    def published() -> list[str]:
        found = [c.get_message(timeout=0.1) for c in channels]
        return [m["channel"].decode() for m in found if m and m["type"] == "message"]

    try:
        seen = wait_until(published, timeout=45, what="the sentinels to attempt a failover")
    finally:
        for channel in channels:
            channel.close()
    assert "+switch-master" not in seen, f"a stale member was promoted\n{stack.log()}"
    assert stack.primary() == primary and stack.role("redis-primary") == "slave"


def _subscribed(member: Member, channels: tuple[str, ...]) -> Any:
    try:
        channel = member.client().pubsub()  # type: ignore[no-untyped-call]
        channel.subscribe(*channels)
        return channel
    except redis.RedisError:
        return None


def test_failover_full_restart_and_a_second_failover(stack: Stack) -> None:
    stack.start()
    _settle(stack, "redis-primary", "redis-replica", "the first boot to settle")
    wait_until(stack.sentinels_know_each_other, timeout=30, what="sentinels to find each other")
    _write(stack, "before")

    stack.members["redis-primary"].stop(signal.SIGKILL)  # 1: the primary dies
    _settle(stack, "redis-replica", None, "the replica promoted")
    _write(stack, "after-failover")

    stack.stop_all()  # 2: every member restarts, the current primary last
    _start_without_the_primary(stack, "redis-replica")
    stack.start(("redis-replica",))
    _settle(stack, "redis-replica", "redis-primary", "the old primary back as a replica")
    _write(stack, "after-restart")
    assert stack.role("redis-primary") == "slave"  # no second primary with old data

    stack.members["redis-replica"].stop(signal.SIGKILL)  # 3: the new primary dies
    _settle(stack, "redis-primary", None, "the second failover")
    _write(stack, "after-second-failover")
    client = connect_client(stack.url)
    try:
        assert client.mget(["before", "after-failover", "after-restart"]) == [b"1"] * 3
    finally:
        client.close()
