"""What the CLI says about the Redis deckhand keeps its records in (``check``, start-up)."""

from __future__ import annotations

import logging

from rich.console import Console

from agents.settings import Settings
from agents.store import Store

log = logging.getLogger("deckhand.store")


def report_redis(console: Console, settings: Settings) -> int:
    """Print every finding about ``REDIS_URL``'s server; 1 if one of them is an error."""
    if settings.redis_url is None:
        console.print("REDIS_URL is not set: not checking a Redis server.", style="dim")
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


def warn_about_redis(store: Store) -> None:
    """Log, at start of ``serve`` and ``worker``, what could lose records."""
    for finding in store.health.findings():
        log.log(logging.ERROR if finding.level == "error" else logging.WARNING,
                "Redis %s: %s", store.where, finding.message)
