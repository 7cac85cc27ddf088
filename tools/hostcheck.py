"""Checking hosts before a deploy needs them: reachability, host key, authentication.

``check_hosts`` backs ``deckhand hosts check``; ``scan_host`` and ``trust_host`` back
``deckhand hosts trust``. Nothing here prints: callers render the rows.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tools.errors import SSHAuthError, SSHError, ToolError
from tools.inventory import Host, Inventory
from tools.runners.known_hosts import HostKeyInfo, KeyStatus, KnownHosts
from tools.runners.pool import RunnerPool
from tools.runners.ssh import SSHRunner, fetch_host_key

NOT_TRIED = "not tried"


@dataclass(frozen=True)
class HostCheck:
    """What connecting to one host showed. ``detail`` says what to do when it is not ok."""

    host: str
    target: str
    reachable: bool
    host_key: str
    auth: str
    detail: str = ""
    connect_ms: float | None = None
    latency_ms: float | None = None
    """Round trip of ``true`` on the open connection."""

    @property
    def ok(self) -> bool:
        return self.reachable and self.host_key in ("trusted", "-") and self.auth in ("ok", "-")


def hosts_to_check(inventory: Inventory, environment: str | None = None) -> list[Host]:
    """The hosts of ``environment`` (every host when None); ToolError if it is unknown."""
    if environment is None:
        return list(inventory.hosts.values())
    if environment not in inventory.environments:
        known = ", ".join(sorted(inventory.environments)) or "none"
        raise ToolError(f"unknown environment {environment!r} (known: {known})")
    return [inventory.hosts[name] for name in inventory.environments[environment].hosts]


def check_hosts(inventory: Inventory, environment: str | None = None, *,
                pool: RunnerPool | None = None, timeout: float = 10.0) -> list[HostCheck]:
    """Check every host of ``environment`` (or all hosts) in parallel, in inventory order."""
    hosts = hosts_to_check(inventory, environment)
    own_pool = pool is None
    pool = pool or RunnerPool(inventory=inventory)
    try:
        with ThreadPoolExecutor(max(1, min(16, len(hosts)))) as workers:
            return list(workers.map(lambda h: check_host(h, pool, timeout), hosts))
    finally:
        if own_pool:
            pool.close()


def check_host(host: Host, pool: RunnerPool, timeout: float) -> HostCheck:
    """Connect to ``host``: read its key, compare it with known_hosts, log in, run ``true``."""
    known = pool.host_keys
    if host.connection == "local":
        return HostCheck(host.name, "local", True, "-", "-", "runs on this machine")
    try:
        runner = pool.ssh_runner(host)
    except SSHError as exc:  # e.g. a jump host loop
        return HostCheck(host.name, host.label, False, "-", "-", str(exc))
    try:
        key = fetch_host_key(host, known_hosts=known, via=runner.via, timeout=timeout,
                             pacer=pool.pacer)
        status = known.status(host, key)
    except SSHError as exc:
        return HostCheck(host.name, runner.target, False, "-", "-", str(exc))
    if status is not KeyStatus.TRUSTED:
        return HostCheck(host.name, runner.target, True, status.value, NOT_TRIED,
                         _untrusted_detail(host, key, status, known.path))
    return _login(host.name, runner, timeout)


def _login(name: str, runner: SSHRunner, timeout: float) -> HostCheck:
    started = time.monotonic()
    try:
        runner.connect()
        connected = time.monotonic()
        result = runner.run("true", timeout=timeout)
    except SSHAuthError as exc:
        return HostCheck(name, runner.target, True, "trusted", "refused", str(exc))
    except SSHError as exc:
        return HostCheck(name, runner.target, True, "trusted", "-", str(exc))
    done = time.monotonic()
    detail = "" if result.ok else f"`true` ended with exit code {result.exit_code}"
    return HostCheck(name, runner.target, True, "trusted", "ok", detail,
                     (connected - started) * 1000, (done - connected) * 1000)


def _untrusted_detail(host: Host, key: HostKeyInfo, status: KeyStatus, path: Path) -> str:
    offered = f"offers {key.key_type} {key.fingerprint}"
    if status is KeyStatus.UNKNOWN:
        return f"{offered}, not in {path}: check it, then `deckhand hosts trust {host.name}`"
    name = KnownHosts.entry_name(host)
    return (f"{offered}, which differs from {path}: if the host was rebuilt, "
            f"`ssh-keygen -R '{name}' -f {path}` then `deckhand hosts trust {host.name}`")


def scan_host(inventory: Inventory, name: str, *, pool: RunnerPool | None = None,
              timeout: float = 10.0) -> tuple[Host, HostKeyInfo, KeyStatus]:
    """Fetch the key ``name`` offers and how it compares with known_hosts."""
    host = _ssh_host(inventory, name)
    own_pool = pool is None
    pool = pool or RunnerPool(inventory=inventory)
    try:
        known = pool.host_keys
        key = fetch_host_key(host, known_hosts=known, via=pool.ssh_runner(host).via,
                             timeout=timeout, pacer=pool.pacer)
        return host, key, known.status(host, key)
    finally:
        if own_pool:
            pool.close()


def trust_host(inventory: Inventory, host: Host, key: HostKeyInfo) -> Path:
    """Add ``key`` to the inventory's known_hosts for ``host``; returns the file's path.

    Callers show the fingerprint and ask first. A *changed* key is never replaced: the
    old one must be removed by hand, on purpose (ToolError says how).
    """
    known = KnownHosts(inventory.known_hosts)
    if known.status(host, key) is KeyStatus.CHANGED:
        raise ToolError(f"known_hosts {known.path} already has a different key for "
                        f"{KnownHosts.entry_name(host)}; remove it first with `ssh-keygen -R "
                        f"'{KnownHosts.entry_name(host)}' -f {known.path}`")
    if known.status(host, key) is KeyStatus.UNKNOWN:
        known.add(host, key)
    return known.path


def _ssh_host(inventory: Inventory, name: str) -> Host:
    host = inventory.hosts.get(name)
    if host is None:
        known = ", ".join(sorted(inventory.hosts)) or "none"
        raise ToolError(f"unknown host {name!r} (inventory hosts: {known})")
    if host.connection != "ssh":
        raise ToolError(f"host {name} runs locally (connection: local); it has no host key")
    return host
