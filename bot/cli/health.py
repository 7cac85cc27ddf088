"""What the CLI says about the Redis deckhand keeps its records in (``check``, start-up)."""

from __future__ import annotations

import logging
from pathlib import Path

from rich.console import Console

from agents.config import Config
from agents.settings import Settings
from agents.store import Health, Store
from agents.store.checkpoints import signing_key
from agents.store.feed import SINK_JOB
from agents.store.local_server import LocalServer, find_binary, in_process_reason

log = logging.getLogger("deckhand.store")


def report_redis(console: Console, settings: Settings, state_dir: Path | None = None) -> int:
    """Print every finding about ``REDIS_URL``'s server; 1 if one of them is an error.
    Without it, which store the state directory ``state_dir`` gives (nothing is started)."""
    if settings.redis_url is None:
        console.print(embedded_store_line(settings, state_dir), markup=False,
                      highlight=False, soft_wrap=True)
        return 0
    store = Store.connect(settings.redis_url.get_secret_value())
    findings = store.health.findings()
    for finding in findings:
        style = "red" if finding.level == "error" else "yellow"
        console.print(f"Redis {store.where}: {finding}", style=style, markup=False)
    if not findings:
        console.print(f"Redis {store.where}: safe for deploy records.", style="green",
                      markup=False)
    return 1 if any(f.level == "error" for f in findings) else 0


def embedded_store_line(settings: Settings, state_dir: Path | None) -> str:
    """Without REDIS_URL: the state directory's server (and whether it runs), or why the
    store is in-process."""
    binary = find_binary(settings.redis_server)
    reason = in_process_reason(state_dir, binary, mode=settings.embedded_store)
    if reason is not None or state_dir is None:
        return (f"store: in-process, so no history between commands: {reason}; or set "
                f"REDIS_URL")
    running = LocalServer(state_dir, binary or Path()).running()
    return (f"store: REDIS_URL is not set: {binary} for {state_dir / 'redis'} "
            f"({'running' if running else 'started by the next command that needs it'}); "
            f"history is kept between commands on this machine (set REDIS_URL for "
            f"processes on several machines)")


def warn_about_redis(health: Health) -> None:
    """Log, at start of ``serve`` and ``worker``, what could lose records."""
    for finding in health.findings():
        log.log(logging.ERROR if finding.level == "error" else logging.WARNING,
                "Redis %s: %s", health.where, finding.message)


def report_audit_key(console: Console, settings: Settings) -> None:
    """Whether the audit chain's checkpoints are signed: without a key, anyone who can
    write Redis can rebuild the chain and ``audit verify`` cannot tell."""
    key = signing_key(settings.audit_key)
    if key is not None:
        console.print(f"audit chain: checkpoints signed with key {key.id} (from "
                      f"DECKHAND_AUDIT_KEY_FILE)", markup=False, highlight=False, soft_wrap=True)
        return
    console.print("audit chain: unsigned — it is only as strong as access to Redis (anyone "
                  "who can write it can rebuild the chain); set DECKHAND_AUDIT_KEY_FILE to "
                  "a key kept outside Redis (`openssl rand -hex 32 > FILE`) to sign "
                  "checkpoints", style="yellow", markup=False, highlight=False, soft_wrap=True)


def report_audit_sink(console: Console, config: Config, settings: Settings) -> None:
    """With ``audit.sink`` and REDIS_URL: how many entries the sink has not taken yet, and
    which process ships them (none: nothing is being shipped)."""
    if config.audit.sink is None or settings.redis_url is None:
        return
    store = Store.connect(settings.redis_url.get_secret_value())
    lag, holder = store.feed.lag(), store.locks.job(SINK_JOB)
    shipper = f"shipped by {holder.worker}" if holder else \
        "no shipper running (start `deckhand worker` or `deckhand audit ship`)"
    console.print(f"audit sink: {lag} entries not yet shipped; {shipper}",
                  style="yellow" if holder is None and lag else None, markup=False,
                  highlight=False, soft_wrap=True)
