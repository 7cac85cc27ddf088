"""What a plan touches: each step's effective environments and hosts, resolved once.

Validation, promotion order, approval policy, locks, the executor and every display read
this one resolution, so a parameter default, a host group or a rollback step can never
touch an environment that some other check did not see.

A step's environments are every environment that lists a host it touches, not only the one
it names: ``staging: [stg-1, prod-1]`` deploys prod-1, so production's approvers, counts,
freezes, lock and promotion order govern it too (the strictest rule that covers a host).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from agents.plan.limit import narrowed
from agents.plan.model import Plan, RollbackStep, Step
from tools.catalog import OUTPUT_REF, Catalog, Tool
from tools.inventory import LOCAL_HOST_NAME, Inventory

UNSCOPED = "(no environment)"
"""The policy scope of mutating steps outside every environment (``local`` commands, ad-hoc
host groups) and of plans that name no environment: ``policy.unscoped`` if configured,
else every configured rule at once (the strictest), never "anyone" by omission."""


@dataclass(frozen=True)
class StepTargets:
    """Where one step runs: environment names and host names (``local`` for this machine)."""

    environments: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    mutates: bool = True  # unknown tools count as mutating: fail closed
    undo: bool = False  # the tool is another tool's rollback
    outside: bool = True  # runs on a host no environment lists (``local``, ad-hoc groups)

    @property
    def changes(self) -> tuple[str, ...]:
        """Environments this step changes as a forward step (what promotion counts)."""
        return self.environments if self.mutates and not self.undo else ()

    def describe(self) -> str:
        """``production: prod-1, prod-2`` or ``local`` for tables and Slack."""
        hosts = ", ".join(self.hosts) or "?"
        return f"{', '.join(self.environments)}: {hosts}" if self.environments else hosts


@dataclass(frozen=True)
class PlanTargets:
    """Every step's targets (rollback included), and what the plan as a whole touches."""

    steps: Mapping[str, StepTargets]
    reach: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """For each environment touched, which of its hosts the plan touches: why its rules
    apply (``production: (prod-1,)`` for a staging deploy that includes prod-1); also for
    each of ``shared``, the hosts through which it is reached."""
    shared: tuple[str, ...] = ()
    """Other services' environments whose rules apply because the plan touches a host
    they list too (``web/production``; docs/services.md 2.3): policy scopes, never locked,
    promoted or recorded as this service's environments."""

    @property
    def environments(self) -> list[str]:
        """Every environment any step (rollback included) can touch, in first-use order."""
        return _unique(e for t in self.steps.values() for e in t.environments)

    @property
    def hosts(self) -> list[str]:
        return _unique(h for t in self.steps.values() for h in t.hosts)

    @property
    def unscoped(self) -> bool:
        """Whether the ``unscoped`` policy rule applies: a mutating step outside every
        environment, or a plan that names no environment at all."""
        mutating_outside = any(t.mutates and t.outside for t in self.steps.values())
        return mutating_outside or not self.environments

    @property
    def scopes(self) -> list[str]:
        """Policy scopes: the environments, the shared ones, plus UNSCOPED when that rule
        applies."""
        return [*self.environments, *self.shared, *([UNSCOPED] if self.unscoped else [])]

    def of(self, step_id: str) -> StepTargets:
        return self.steps.get(step_id, StepTargets())

    def summary(self) -> str:
        """One line for displays: environments and hosts, or what runs locally."""
        envs = ", ".join(self.environments) or "none"
        return f"environments {envs} · hosts {', '.join(self.hosts) or 'none'}"


def resolve(plan: Plan, catalog: Catalog, inventory: Inventory) -> PlanTargets:
    """Targets of every step of ``plan`` (duplicate ids: the first step wins)."""
    undo = catalog.undo_tools
    out: dict[str, StepTargets] = {}
    for step in plan.all_steps:
        if step.id not in out:
            out[step.id] = step_targets(step, catalog, inventory, undo=undo, limit=plan.limit)
    reach, shared = _reach(out, inventory), _shared(out, inventory)
    return PlanTargets(out, {**reach, **shared}, tuple(shared))


def step_targets(step: Step | RollbackStep, catalog: Catalog, inventory: Inventory, *,
                 undo: Iterable[str | None] = (), limit: Sequence[str] = ()) -> StepTargets:
    """Targets of one step: explicit params, then the tool's defaults, then its target;
    narrowed to ``limit`` (hosts, groups, environments) when there is one."""
    tool = catalog.tools.get(step.tool)
    if tool is None:
        return StepTargets()
    envs, hosts = _where(tool, catalog.with_defaults(tool, dict(step.params)), inventory)
    if limit and hosts != (LOCAL_HOST_NAME,):
        hosts = tuple(narrowed(hosts, limit, inventory))
    listed = {h for e in inventory.environments.values() for h in e.hosts}
    outside = not envs or any(h not in listed for h in hosts)
    return StepTargets(envs, hosts, mutates=tool.mutates, undo=tool.name in set(undo),
                       outside=outside)


def environment_of(tool: Tool, params: Mapping[str, object]) -> str | None:
    """The environment an environment-targeted tool runs on, given its full params."""
    value = params.get("environment")
    if tool.target != "environment" or not isinstance(value, str):
        return None
    return None if OUTPUT_REF.match(value) else value


def _where(tool: Tool, params: Mapping[str, object],
           inventory: Inventory) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if tool.target == "environment":
        env = environment_of(tool, params)
        found = inventory.environments.get(env or "")
        hosts = tuple(found.hosts if found else ())
        named = (env,) if env else ()
        return tuple(_unique([*named, *covering(hosts, inventory)])), hosts
    if tool.target.startswith("group:"):
        hosts = tuple(inventory.groups.get(tool.target[6:], ()))
        return covering(hosts, inventory), hosts
    return (), (LOCAL_HOST_NAME,)


def covering(hosts: Iterable[str], inventory: Inventory) -> tuple[str, ...]:
    """Every environment that lists one of ``hosts`` (inventory order)."""
    wanted = set(hosts)
    return tuple(name for name, e in inventory.environments.items() if wanted & set(e.hosts))


def _reach(steps: Mapping[str, StepTargets], inventory: Inventory
           ) -> dict[str, tuple[str, ...]]:
    touched = {h for t in steps.values() for h in t.hosts}
    envs = _unique(e for t in steps.values() for e in t.environments)
    return {env: tuple(h for h in found.hosts if h in touched)
            for env in envs for found in [inventory.environments.get(env)] if found is not None}


def _shared(steps: Mapping[str, StepTargets], inventory: Inventory
            ) -> dict[str, tuple[str, ...]]:
    """Each other service's scope reached through a shared host, and those hosts."""
    out: dict[str, list[str]] = {}
    for host in _unique(h for t in steps.values() for h in t.hosts):
        for scope in inventory.shared.get(host, ()):
            out.setdefault(scope, []).append(host)
    return {scope: tuple(hosts) for scope, hosts in out.items()}


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))
