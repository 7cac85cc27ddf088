"""Picks the runner for a host: local subprocesses, or SSH (connections pooled per host)."""

from __future__ import annotations

import threading

from tools.errors import SSHConnectError
from tools.inventory import Host, Inventory
from tools.runners.base import Runner
from tools.runners.local import LocalRunner
from tools.runners.ssh import SSHOptions, SSHRunner


class RunnerPool:
    """One runner per host, reused across steps and runs. ``close()`` releases connections.

    SSH hosts share nothing but the known_hosts file; a host with a ``jump`` host reaches
    it through the jump host's pooled connection, so ``inventory`` is needed to find it.
    """

    def __init__(self, *, known_hosts: str | None = None, inventory: Inventory | None = None,
                 ssh_options: SSHOptions | None = None):
        if known_hosts is None and inventory is not None:
            known_hosts = inventory.known_hosts
        self.known_hosts = known_hosts
        self.inventory = inventory
        self.ssh_options = ssh_options
        self._local = LocalRunner()
        self._remote: dict[str, SSHRunner] = {}
        self._lock = threading.Lock()

    def for_host(self, host: Host) -> Runner:
        """The runner for ``host``; SSH runners connect lazily, on their first command."""
        if host.connection == "local":
            return self._local
        return self.ssh_runner(host)

    def ssh_runner(self, host: Host) -> SSHRunner:
        """The pooled SSH runner for ``host`` (and, through ``via``, its jump hosts)."""
        with self._lock:
            return self._ssh(host, ())

    def _ssh(self, host: Host, chain: tuple[str, ...]) -> SSHRunner:
        runner = self._remote.get(host.name)
        if runner is None:
            via = self._ssh(self._jump_of(host, chain), (*chain, host.name)) \
                if host.jump else None
            runner = SSHRunner(host, known_hosts=self.known_hosts, via=via,
                               options=self.ssh_options)
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

    def close(self) -> None:
        with self._lock:
            runners, self._remote = list(self._remote.values()), {}
        for runner in runners:
            runner.close()
