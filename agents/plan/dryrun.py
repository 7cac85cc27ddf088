"""Dry runs: what a plan would do, checked on the real hosts without changing them.

A tool may declare ``check:`` — a command, with the same parameters, that verifies it could
run (``--dry-run``, ``terraform plan``, ``kubectl diff``). A dry run is the same plan with
every step replaced by its tool's check (gates stay gates: they only read), executed by the
ordinary executor without approval and without environment locks, and never rolled back
(nothing changed). A step whose tool has no check is shown as "not checked"; so is one that
needs the output of a step that was not checked. Nothing else runs: a tool without a check
(a notification, say) is never executed by a dry run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.plan.model import Plan, Step
from tools.catalog import OUTPUT_REF, Catalog, Tool

CHECK_SUFFIX = "__check"
LABEL = "DRY RUN — nothing was changed"


@dataclass
class DryPlan:
    plan: Plan
    """The plan to execute: checks and gates only, no rollback."""
    catalog: Catalog
    """The catalog plus one read-only ``TOOL__check`` tool per checked tool."""
    unchecked: list[str] = field(default_factory=list)
    """Steps of the original plan that the dry run cannot check."""


def dry_plan(plan: Plan, catalog: Catalog) -> DryPlan:
    """``plan`` as a dry run (see the module docstring)."""
    tools = dict(catalog.tools)
    dropped: dict[str, list[str]] = {}  # step -> what it depended on, for its dependents
    steps: list[Step] = []
    for step in plan.steps:
        depends_on = _through(step.depends_on, dropped)
        tool = catalog.get(step.tool)
        if tool.gate is None and (tool.check is None or _needs_dropped(step, dropped)):
            dropped[step.id] = depends_on
            continue
        if tool.gate is None:
            tools.setdefault(tool.name + CHECK_SUFFIX, _check_tool(tool))
        name = step.tool if tool.gate is not None else tool.name + CHECK_SUFFIX
        steps.append(step.model_copy(update={"tool": name, "depends_on": depends_on,
                                             "success": None}))
    body = plan.model_copy(update={"goal": f"[dry run] {plan.goal}", "steps": steps,
                                   "rollback": []})
    return DryPlan(body, Catalog(tools), list(dropped))


def _check_tool(tool: Tool) -> Tool:
    return tool.model_copy(update={"name": tool.name + CHECK_SUFFIX, "command": tool.check,
                                   "check": None, "mutates": False, "rollback": None,
                                   "retries": 0, "description": f"check: {tool.description}"})


def _through(depends_on: list[str], dropped: dict[str, list[str]]) -> list[str]:
    """Dependencies with dropped steps replaced by what they depended on (order kept).

    ``dropped`` values are already resolved this way (steps come in plan order)."""
    out: dict[str, None] = {}
    for dep in depends_on:
        for kept in dropped.get(dep, [dep]):
            out.setdefault(kept, None)
    return list(out)


def _needs_dropped(step: Step, dropped: dict[str, list[str]]) -> bool:
    for value in step.params.values():
        found = OUTPUT_REF.match(value) if isinstance(value, str) else None
        if found and found.group(1) in dropped:
            return True
    return False
