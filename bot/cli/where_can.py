"""``deckhand run "where can I deploy api"``: a question, answered, never planned
(docs/services.md 2.1): each of the service's environments, whether a freeze blocks it
now, who approves it, and whether the asker may."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console
from rich.table import Table

from agents.policy.freeze import frozen
from agents.services import Services


def answer_where(console: Console, services: Services, *, user: str) -> int:
    """Print the answer for the service ``services`` is focused on; exit status 0."""
    config = services.config
    now = datetime.fromtimestamp(services.clock(), UTC)
    table = Table(title=f"Where {config.name} can be deployed", title_justify="left")
    for column in ("environment", "hosts", "now", "approvers", f"{user} may approve"):
        table.add_column(column)
    for name, env in config.inventory.environments.items():
        blocked = frozen(config.policy.freeze, [name], now)
        rule = config.policy.for_env(name)
        table.add_row(name, str(len(env.hosts)),
                      f"frozen: {blocked.reason}" if blocked else "open",
                      rule.approvers.describe(),
                      "yes" if config.policy.may_approve(user, [], [name]) else "no")
    console.print(table)
    if not config.inventory.environments:
        console.print(f"{config.name} has no environments in its inventory.")
    return 0
