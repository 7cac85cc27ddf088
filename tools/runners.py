"""Picks the runner for a host: local subprocesses, or SSH (connections pooled per host)."""

from __future__ import annotations

import threading

from tools.inventory import Host
from tools.local import LocalRunner
from tools.runner import Runner


class RunnerPool:
    """One runner per host, reused across steps and runs. ``close()`` releases connections."""

    def __init__(self, *, known_hosts: str | None = None):
        self.known_hosts = known_hosts
        self._local = LocalRunner()
        self._remote: dict[str, Runner] = {}
        self._lock = threading.Lock()

    def for_host(self, host: Host) -> Runner:
        if host.connection == "local":
            return self._local
        with self._lock:
            runner = self._remote.get(host.name)
            if runner is None:
                runner = self._remote[host.name] = self._ssh_runner(host)
            return runner

    def _ssh_runner(self, host: Host) -> Runner:
        from tools.errors import SSHConnectError

        raise SSHConnectError(f"{host.name}: SSH is not available in this build")

    def close(self) -> None:
        with self._lock:
            runners, self._remote = list(self._remote.values()), {}
        for runner in runners:
            close = getattr(runner, "close", None)
            if close is not None:
                close()
