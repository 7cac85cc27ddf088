"""``deckhand demo``: deploy the sample app twice in the terminal, with no servers needed.

1. ``deploy v2.3.1`` — tests, build and backup in parallel, staging, production: succeeds.
2. ``deploy v2.4.0-broken`` — the release fails its smoke test in staging, production is
   never touched, rollback returns staging to v2.3.1.
Then every host's HTTP endpoint is asked which version it serves.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.rule import Rule
from rich.table import Table

from agents.config import Config, load_config
from agents.run.record import RunStatus
from agents.services import Services, build_services
from agents.settings import Settings
from bot.terminal.console import ConsoleFlow

GOOD, BROKEN = "v2.3.1", "v2.4.0-broken"


def examples_dir() -> Path:
    """Where the sample config and app live (``DECKHAND_EXAMPLES`` overrides)."""
    override = os.environ.get("DECKHAND_EXAMPLES")
    return Path(override) if override else Path(__file__).resolve().parents[2] / "examples"


def copy_examples(dest: Path) -> Path:
    """Copy the sample config and app to ``dest``; returns the config file's path."""
    source = examples_dir()
    if not (source / "deckhand.yml").exists():
        raise FileNotFoundError(f"sample config not found in {source}; run from a checkout "
                                f"or set DECKHAND_EXAMPLES")
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns(".deckhand", "__pycache__"))
    path = dest / "deckhand.yml"
    path.write_text(_free_ports(path.read_text()))
    return path


def _free_ports(text: str) -> str:
    """The sample's fixed app ports (18181, …) replaced by free ones in the copy's file, so
    every command reading it — not only this process — agrees and another process holding
    the sample's port never collides with this copy."""
    def line(match: re.Match[str]) -> str:
        return f"{match.group(1)}port: {free_port()}"
    return re.sub(r"^(\s+[\w-]+:\s*\{.*)port: \d+", line, text, flags=re.MULTILINE)


def prepare_workspace(dest: Path) -> Config:
    """Copy the sample to ``dest`` (every host on a free port) and load its config."""
    return load_config(copy_examples(dest))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_servers(config: Config) -> None:
    """Stop the sample app on every host whose directory is on this machine."""
    stop = Path(str(config.vars["app"])) / "bin" / "stop.sh"
    for host in config.inventory.hosts.values():
        if "dir" in host.vars and Path(str(host.vars["dir"])).exists():
            subprocess.run([str(stop), str(host.vars["dir"])], check=False, timeout=30,
                           capture_output=True)


def app_port(host_vars: dict[str, Any]) -> int:
    """The port the sample app recorded in the host's directory, else the configured one."""
    recorded = Path(str(host_vars.get("dir", "/nonexistent"))) / "port"
    if recorded.is_file() and recorded.read_text().strip():
        return int(recorded.read_text().strip())
    return int(host_vars["port"])


@dataclass
class Probe:
    host: str
    status: int
    body: str


def probe(config: Config, path: str = "/version") -> list[Probe]:
    """Ask every host's app for ``path`` over HTTP."""
    out = []
    for host in config.inventory.hosts.values():
        url = f"http://127.0.0.1:{app_port(host.vars)}{path}"
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                out.append(Probe(host.name, reply.status, reply.read().decode().strip()))
        except urllib.error.HTTPError as exc:
            out.append(Probe(host.name, exc.code, exc.read().decode().strip()))
        except OSError as exc:
            out.append(Probe(host.name, 0, f"not answering ({exc})"))
    return out


def run_demo(console: Console, *, workdir: Path | None = None, keep: bool = False) -> int:
    """Run the two deploys; 0 when both ended as expected and every host serves v2.3.1.

    Everything it started (app servers, the workspace) is stopped and removed at the end,
    unless ``keep``: then it says where the servers are and how to stop them.
    """
    base = Path(tempfile.mkdtemp(prefix="deckhand-demo-", dir=workdir))
    config = prepare_workspace(base / "sample")
    # in-process without REDIS_URL: the demo's state directory is removed at its end
    services = build_services(config, Settings(DECKHAND_EMBEDDED_STORE="memory"))
    try:
        ok = _two_deploys(services, console)
        versions = _show_endpoints(config, console)
    finally:
        services.close()
        if keep:
            _kept(config, base, console)
        else:
            stop_servers(config)
            shutil.rmtree(base, ignore_errors=True)
    ok = ok and all(v.body == GOOD for v in versions)
    console.print("[bold green]Demo finished as expected.[/]" if ok else
                  "[bold red]Demo did not end as expected — see above.[/]")
    return 0 if ok else 1


def _two_deploys(services: Services, console: Console) -> bool:
    flow = ConsoleFlow(services, console, user=os.environ.get("USER", "demo"),
                       confirm=lambda word: _typed(console, word))
    expected = {GOOD: RunStatus.SUCCEEDED, BROKEN: RunStatus.ROLLED_BACK}
    ok = True
    for version, want in expected.items():
        console.print(Rule(f"/deploy {version}"))
        console.print("[dim](the demo approves automatically; `deckhand run` asks)[/]")
        run = flow.handle(f"deploy {version}", yes=True)
        ok = ok and run.status is want
    return ok


def _typed(console: Console, word: str) -> str:
    """The demo answers policy confirmations itself, and shows it."""
    console.print(f"[dim](policy asks to type {word!r} to confirm; the demo types it)[/]")
    return word


def _show_endpoints(config: Config, console: Console) -> list[Probe]:
    console.print(Rule("what the app answers now"))
    versions = probe(config)
    table = Table("host", "GET /version")
    for item in versions:
        table.add_row(item.host, f"{item.status} {item.body}")
    console.print(table)
    return versions


def _kept(config: Config, base: Path, console: Console) -> None:
    ports = ", ".join(f"{h.name}: {app_port(h.vars)}" for h in config.inventory.hosts.values())
    console.print(f"Kept the sample in {base} with its servers running ({ports}). Stop them "
                  f"with: for d in {config.state_dir}/hosts/*; do "
                  f"{config.vars['app']}/bin/stop.sh $d; done", highlight=False, soft_wrap=True)
