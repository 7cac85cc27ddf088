"""What a config change changes in each environment's policy: who may approve, how many,
self-approval, freezes, break-glass, limits, locks and hosts.

Each side is computed through ``eligibility`` for a deploy to the environment (every
environment sharing one of its hosts governs it too), so what is compared is the answer
approvers would get, not the YAML: moving a host into another environment, or emptying a
rule into the default, shows up where it bites. For ``deckhand policy diff`` and the audit
entry of a SIGHUP reload.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from agents.plan.targets import covering
from agents.policy.eligibility import PlanSubject, eligibility, of_scopes
from agents.policy.freeze import FreezeWindow
from agents.policy.rules import UNSCOPED, Policy
from tools.inventory import Inventory

NO_ENVIRONMENT = "(no environment)"
"""The row for changes outside every environment (local commands, ad-hoc hosts)."""

LABELS = {"who": "who may approve", "named": "approvers by name",
          "needed": "approvals needed", "self_approval": "self-approval allowed",
          "governed_by": "rules",
          "confirm": "typed confirmation required",
          "unattended": "unattended schedules allowed", "approval_ttl": "approval valid for",
          "lock": "when locked", "after": "promoted after", "freezes": "freeze windows",
          "break_glass": "break-glass granted by", "limits": "limits", "hosts": "hosts"}


@dataclass(frozen=True)
class Change:
    field: str
    old: Any
    new: Any

    def describe(self, *, fresh: bool = False) -> str:
        """``fresh``: the environment is new, so only the new value is said."""
        label = LABELS.get(self.field, self.field)
        if fresh:
            value = ", ".join(map(str, self.new)) if isinstance(self.new, list) else self.new
            return f"{label}: {_text(value)}"
        if isinstance(self.old, list) and isinstance(self.new, list):
            added = [x for x in self.new if x not in self.old]
            removed = [x for x in self.old if x not in self.new]
            parts = ([f"added {', '.join(map(str, added))}"] if added else []) + \
                    ([f"removed {', '.join(map(str, removed))}"] if removed else [])
            return f"{label}: {'; '.join(parts)}"
        return f"{label}: {_text(self.old)} → {_text(self.new)}"


@dataclass(frozen=True)
class EnvDiff:
    environment: str
    status: str
    """``added``, ``removed``, ``changed`` or ``unchanged``."""
    changes: tuple[Change, ...]

    def lines(self) -> list[str]:
        if self.status in ("added", "removed"):
            head = f"{self.environment}: {self.status}"
            return [head, *(f"  {c.describe(fresh=True)}" for c in self.changes)]
        return [f"{self.environment}:", *(f"  {c.describe()}" for c in self.changes)]


@dataclass(frozen=True)
class PolicyDiff:
    environments: tuple[EnvDiff, ...]

    @property
    def changed(self) -> bool:
        return any(e.status != "unchanged" for e in self.environments)

    def lines(self) -> list[str]:
        """Every changed environment and what changed in it (nothing when nothing did)."""
        return [line for e in self.environments if e.status != "unchanged"
                for line in e.lines()]

    def summary(self) -> list[str]:
        """One line per changed environment (the audit entry of a reload)."""
        return [f"{e.environment}: {e.status}" + (
            f" ({'; '.join(c.describe() for c in e.changes)})" if e.changes else "")
                for e in self.environments if e.status != "unchanged"]


def policy_diff(old: tuple[Policy, Inventory], new: tuple[Policy, Inventory]) -> PolicyDiff:
    """What changes for each environment (and for changes outside every environment)."""
    names = list(dict.fromkeys([*old[1].environments, *new[1].environments]))
    out = [_env_diff(name, old, new) for name in names]
    out.append(_env_diff(NO_ENVIRONMENT, old, new))
    return PolicyDiff(tuple(out))


def view(environment: str, policy: Policy, inventory: Inventory) -> dict[str, Any] | None:
    """What approvers of a deploy to ``environment`` face under this config (None: there
    is no such environment)."""
    if environment == NO_ENVIRONMENT:
        answer = eligibility(of_scopes([UNSCOPED]), policy)
        hosts: list[str] = []
        envs: list[str] = []
    elif environment in inventory.environments:
        hosts = list(inventory.environments[environment].hosts)
        envs = list(dict.fromkeys([environment, *covering(hosts, inventory)]))
        reach = {e: [h for h in inventory.environments[e].hosts if h in hosts] for e in envs}
        answer = eligibility(PlanSubject(envs, reach, "", envs), policy)
    else:
        return None
    # Freezes and limits of every environment sharing a host apply too (eligibility's
    # freeze and limit checks read the same covering set), so they show here as well.
    rule, windows = answer.rule, _windows(policy.freeze, environment, envs)
    limits = "; ".join(policy.limits[e].describe(e) for e in envs if e in policy.limits)
    return {"who": answer.who(), "named": answer.candidates(),
            "needed": rule.min_approvals,
            "self_approval": rule.self_approval,
            "governed_by": [_unlined(line.source) for line in answer.lines],
            "confirm": rule.confirm, "unattended": rule.unattended,
            "approval_ttl": rule.approval_ttl, "lock": rule.lock,
            "after": policy.previous_stage(environment), "freezes": windows,
            "break_glass": _glass(policy) if windows else None,
            "limits": limits or None, "hosts": hosts}


def _env_diff(name: str, old: tuple[Policy, Inventory], new: tuple[Policy, Inventory]
              ) -> EnvDiff:
    before, after = view(name, *old), view(name, *new)
    if before is None and after is not None:
        return EnvDiff(name, "added", _changes(_empty(after), after))
    if after is None and before is not None:
        return EnvDiff(name, "removed", ())
    changes = _changes(before or {}, after or {})
    return EnvDiff(name, "changed" if changes else "unchanged", changes)


def _unlined(source: str) -> str:
    """A rule's source without its line numbers: moving a rule within its file changes
    nothing a diff should report."""
    return LINE_NUMBER.sub(r"\1", source)


LINE_NUMBER = re.compile(r"(\.ya?ml):\d+")


def _changes(before: dict[str, Any], after: dict[str, Any]) -> tuple[Change, ...]:
    return tuple(Change(key, before.get(key), after[key]) for key in after
                 if before.get(key) != after[key])


def _empty(fields: dict[str, Any]) -> dict[str, Any]:
    """The "before" of an added environment: lists empty, the rest unset."""
    return {k: [] if isinstance(v, list) else None for k, v in fields.items()}


def _windows(windows: list[FreezeWindow], environment: str, covering: list[str]) -> list[str]:
    """The windows that freeze a deploy to ``environment``: its own, and those of the
    ``covering`` environments that share one of its hosts (said so)."""
    out = []
    for window in windows:
        via = [e for e in window.environments if e in covering]
        if environment in window.environments:
            out.append(_window(window))
        elif via:
            out.append(f"{_window(window)} (via {', '.join(via)}: shares a host)")
    return out


def _window(window: FreezeWindow) -> str:
    if window.cron is not None:
        when = f"cron {window.cron!r} for {window.hours:g} h ({window.timezone})"
    else:
        assert window.start is not None and window.end is not None  # noqa: S101 - validated
        when = f"{window.start.isoformat()} to {window.end.isoformat()} ({window.timezone})"
    return f"{when}: {window.reason}"


def _glass(policy: Policy) -> str:
    glass = policy.break_glass
    return ", ".join([*glass.users, *glass.groups]) or "nobody"


def _text(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g} s"
    return str(value)
