"""Ask the hosts themselves which version they serve, to confirm the recorded history.

The operator names a read-only tool (``history.version_tool``, e.g. ``status``) and a
pattern that finds the version in its output. Every host of an environment is asked in
parallel; a host that cannot answer is reported as unreachable, never as "as recorded", and
one whose answer holds no version says so (``problem``), never a bare "unknown".
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from agents.errors import PlanError
from agents.history.deploys import HistorySettings
from tools.catalog import Catalog
from tools.errors import DeckhandError
from tools.inventory import Host, Inventory
from tools.runners.pool import RunnerPool

MAX_PARALLEL = 16


@dataclass(frozen=True)
class Observed:
    host: str
    version: str | None
    """None: the host answered without a version, or did not answer (see ``problem``)."""
    problem: str | None = None


class VersionProbe:
    """Runs the configured version tool on hosts and reads their versions."""

    def __init__(self, settings: HistorySettings, catalog: Catalog, inventory: Inventory,
                 runners: RunnerPool, config_vars: dict[str, object]):
        if settings.version_tool is None:
            raise PlanError("no history.version_tool is configured: name a read-only tool "
                            "that prints a host's version (e.g. status)")
        tool = catalog.get(settings.version_tool)
        if tool.mutates:
            raise PlanError(f"history.version_tool {tool.name} changes hosts; it must be "
                            f"read-only")
        self.settings, self.tool, self.catalog = settings, tool, catalog
        self.inventory, self.runners, self.config_vars = inventory, runners, config_vars

    def observe(self, environment: str) -> list[Observed]:
        hosts = self.inventory.hosts_of(self.tool.target, environment)
        with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, max(len(hosts), 1))) as pool:
            return list(pool.map(lambda h: self._ask(h, environment), hosts))

    def _ask(self, host: Host, environment: str) -> Observed:
        params = {"environment": environment} if "environment" in self.tool.params else {}
        host_vars = {"name": host.name, "address": host.address, **host.vars}
        try:
            command = self.catalog.render(self.tool, params, host_vars=host_vars,
                                          config_vars=dict(self.config_vars))
            result = self.runners.for_host(host).run(command, timeout=self.tool.timeout)
        except DeckhandError as exc:
            return Observed(host.name, None, f"cannot ask: {exc}")
        if not result.ok:
            return Observed(host.name, None, f"{self.tool.name} exited {result.exit_code}")
        version = self.settings.read_version(result.tail)
        if version is None:  # an answer that could not be read is a problem, never silence
            last = next((line.strip() for line in reversed(result.tail.splitlines())
                         if line.strip()), "")
            return Observed(host.name, None, (
                f"{self.tool.name} answered, but history.version_pattern "
                f"'{self.settings.version_pattern}' found no version in its output"
                + (f" (its last line: {last[:200]!r})" if last else " (it printed nothing)")))
        return Observed(host.name, version)
