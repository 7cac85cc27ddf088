"""``--limit HOST|GROUP``: a run narrowed to some hosts, within policy.

The limit is part of the plan (``Plan.limit``, in its hash when set), so approvers approve
exactly the hosts that will change, a worker that takes the run over keeps it, and a stale
approval cannot run a wider plan. It only ever removes hosts: policy, approvals and locks
are still those of every environment the plan names, and a limit that would leave a step
with no host is refused — a limit never skips a step, so it cannot skip staging before
production (promotion) or a check.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tools.inventory import Inventory


def allowed_hosts(limit: Sequence[str], inventory: Inventory) -> set[str]:
    """The hosts ``limit`` names: hosts by name, groups and environments by their members."""
    out: set[str] = set()
    for name in limit:
        if name in inventory.hosts:
            out.add(name)
        out.update(inventory.groups.get(name, []))
        env = inventory.environments.get(name)
        out.update(env.hosts if env else [])
    return out


def unknown_names(limit: Sequence[str], inventory: Inventory) -> list[str]:
    """Names in ``limit`` that are no host, group or environment (fail closed: refused)."""
    known = {*inventory.hosts, *inventory.groups, *inventory.environments}
    return [name for name in limit if name not in known]


def narrowed(hosts: Iterable[str], limit: Sequence[str], inventory: Inventory) -> list[str]:
    """``hosts`` within ``limit`` (all of them when there is no limit)."""
    if not limit:
        return list(hosts)
    allowed = allowed_hosts(limit, inventory)
    return [h for h in hosts if h in allowed]


def parse_limit(text: str | None) -> list[str]:
    """``"prod-1,web"`` → ``["prod-1", "web"]`` (Ansible's comma-separated form)."""
    return [part.strip() for part in (text or "").split(",") if part.strip()]


StepHosts = tuple[str, Sequence[str], Sequence[str]]
"""A step's id, its hosts without the limit, its hosts with it."""


def limit_problems(limit: Sequence[str], inventory: Inventory,
                   steps: Sequence[StepHosts]) -> list[tuple[str, str]]:
    """(step id, message) for unknown names and for each step ``limit`` leaves without a
    host. ``steps``: (id, its hosts without the limit, its hosts with it), remote only."""
    if not limit:
        return []
    out = [("", f"--limit {name!r}: no host, group or environment has that name")
           for name in unknown_names(limit, inventory)]
    if out:
        return out
    return [(step_id, f"--limit {','.join(limit)} leaves it no host (it runs on "
                      f"{', '.join(before)}): a limit narrows a run, it never skips a step")
            for step_id, before, after in steps if before and not after]
