"""Picks the runner for a host: local subprocesses, or SSH (connections pooled per host)."""

from __future__ import annotations

import logging
import threading
import time
from functools import cached_property
from typing import TYPE_CHECKING

from tools.errors import SSHConnectError
from tools.inventory import Host, Inventory, SSHSettings
from tools.runners.base import Runner
from tools.runners.local import LocalRunner
from tools.runners.pacing import HandshakePacer, SetupStats

if TYPE_CHECKING:  # paramiko is imported with the first SSH host (~0.05 s of every start)
    from tools.runners.known_hosts import KnownHosts
    from tools.runners.ssh import SSHOptions, SSHRunner

log = logging.getLogger("deckhand.ssh")


class RunnerPool:
    """One runner per host, reused across steps and runs. ``close()`` releases connections.

    SSH runners share one parsed known_hosts (``host_keys``) and one ``pacer`` for
    connection setup (``inventory.ssh``: setups at once, retries of dropped ones). A host
    with a ``jump`` host reaches it through the jump host's pooled connection, so
    ``inventory`` is needed to find it. A connection unused for ``idle_close`` seconds is
    closed by one reaper thread; the next command reconnects.
    """

    def __init__(self, *, known_hosts: str | None = None, inventory: Inventory | None = None,
                 ssh_options: SSHOptions | None = None, ssh: SSHSettings | None = None):
        if known_hosts is None and inventory is not None:
            known_hosts = inventory.known_hosts
        self.known_hosts = known_hosts
        self.inventory = inventory
        self.settings = ssh or (inventory.ssh if inventory is not None else SSHSettings())
        self._ssh_options = ssh_options
        self._host_keys: KnownHosts | None = None
        self._keys_lock = threading.Lock()
        self.pacer = HandshakePacer(self.settings)
        self._local = LocalRunner()
        self._remote: dict[str, SSHRunner] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._reaper: threading.Thread | None = None

    @property
    def host_keys(self) -> KnownHosts:
        """The one parsed known_hosts every SSH runner shares (made on first use, once)."""
        with self._keys_lock:
            if self._host_keys is None:
                from tools.runners.known_hosts import KnownHosts

                self._host_keys = KnownHosts(self.known_hosts)
            return self._host_keys

    @cached_property
    def ssh_options(self) -> SSHOptions:
        from tools.runners.ssh import SSHOptions

        return self._ssh_options or SSHOptions(connect_timeout=self.settings.connect_timeout)

    @property
    def setup_stats(self) -> SetupStats:
        """Connection setups so far: connections, attempts, retries, failures."""
        return self.pacer.stats

    def for_host(self, host: Host) -> Runner:
        """The runner for ``host``; SSH runners connect lazily, on their first command."""
        if host.connection == "local":
            return self._local
        return self.ssh_runner(host)

    def ssh_runner(self, host: Host) -> SSHRunner:
        """The pooled SSH runner for ``host`` (and, through ``via``, its jump hosts)."""
        with self._lock:
            runner = self._ssh(host, ())
            self._start_reaper()
            return runner

    def _ssh(self, host: Host, chain: tuple[str, ...]) -> SSHRunner:
        from tools.runners.ssh import SSHRunner

        runner = self._remote.get(host.name)
        if runner is None:
            via = self._ssh(self._jump_of(host, chain), (*chain, host.name)) \
                if host.jump else None
            runner = SSHRunner(host, known_hosts=self.host_keys, via=via,
                               options=self.ssh_options, pacer=self.pacer)
            self._remote[host.name] = runner
        return runner

    def _jump_of(self, host: Host, chain: tuple[str, ...]) -> Host:
        if host.jump in (*chain, host.name):
            loop = " -> ".join((*chain, host.name, str(host.jump)))
            raise SSHConnectError(f"jump hosts form a loop: {loop}")
        if self.inventory is None or host.jump not in self.inventory.hosts:
            raise SSHConnectError(f"host {host.name} is reached through jump host "
                                  f"{host.jump!r}, which this runner pool does not know "
                                  f"(build it with RunnerPool(inventory=...))")
        jump = self.inventory.hosts[host.jump]
        if jump.connection != "ssh":
            raise SSHConnectError(f"jump host {jump.name} of {host.name} is not an SSH host")
        return jump

    # -- closing connections -------------------------------------------------------------

    def close_idle(self, now: float | None = None) -> list[str]:
        """Close every connection unused for ``idle_close`` seconds; the names of the hosts
        closed. A jump host's stays open while a host behind it is connected (its tunnel
        is not a command); it goes on a later call, once those hosts are closed."""
        now = time.monotonic() if now is None else now
        with self._lock:
            runners = list(self._remote.values())
        carrying = {id(r.via) for r in runners if r.via is not None and r.connected}
        return [r.host.name for r in runners
                if id(r) not in carrying and r.close_if_idle(now, self.settings.idle_close)]

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            runners, self._remote = list(self._remote.values()), {}
        for runner in runners:
            runner.close()

    def _start_reaper(self) -> None:
        """One thread for the whole pool, started with its first SSH runner (under _lock)."""
        if self._reaper is not None or not self.settings.idle_close or self._closed.is_set():
            return
        self._reaper = threading.Thread(target=self._reap, name="ssh-idle", daemon=True)
        self._reaper.start()

    def _reap(self) -> None:
        every = min(max(self.settings.idle_close / 4, 1.0), 60.0)
        while not self._closed.wait(every):
            closed = self.close_idle()
            if closed:
                log.info("closed %d idle SSH connection(s): %s", len(closed),
                         ", ".join(closed[:10]) + (" …" if len(closed) > 10 else ""))
