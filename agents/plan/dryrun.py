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
    why: dict[str, str] = field(default_factory=dict)
    """Why each unchecked step is: its tool has no check, or it needs an unchecked output."""

    def nothing_to_check(self) -> list[str]:
        """One line per step the dry run could not check, saying why."""
        return [f"{step}: nothing to check ({self.why.get(step, 'no check:')})"
                for step in self.unchecked]


def dry_plan(plan: Plan, catalog: Catalog) -> DryPlan:
    """``plan`` as a dry run (see the module docstring)."""
    tools = dict(catalog.tools)
    dropped: dict[str, list[str]] = {}  # step -> what it depended on, for its dependents
    why: dict[str, str] = {}
    steps: list[Step] = []
    for step in plan.steps:
        depends_on = _through(step.depends_on, dropped)
        tool = catalog.get(step.tool)
        if tool.gate is None and (tool.check is None or _needs_dropped(step, dropped)):
            dropped[step.id] = depends_on
            why[step.id] = (f"tool {tool.name} has no check: in the config" if tool.check is None
                            else "it needs the output of a step that was not checked")
            continue
        if tool.gate is None:
            tools.setdefault(tool.name + CHECK_SUFFIX, _check_tool(tool))
        name = step.tool if tool.gate is not None else tool.name + CHECK_SUFFIX
        steps.append(step.model_copy(update={"tool": name, "depends_on": depends_on,
                                             "success": None}))
    body = plan.model_copy(update={"goal": f"[dry run] {plan.goal}", "steps": steps,
                                   "rollback": []})
    return DryPlan(body, Catalog(tools), list(dropped), why)


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


def verdict(status: str, *, checked: int, unchecked: list[str]) -> str:
    """The last word of a dry run, never to be mistaken for a deploy's "SUCCEEDED":
    nothing checked, checks passed, or checks failed — and always that nothing changed."""
    if checked == 0:
        return (f"DRY RUN: NOTHING CHECKED — none of the {len(unchecked)} step(s) has a "
                f"check: in the config; nothing was run or changed")
    skipped = f", {len(unchecked)} with nothing to check" if unchecked else ""
    if status == "succeeded":
        return f"DRY RUN: CHECKS PASSED ({checked} checked{skipped}) — nothing was changed"
    return (f"DRY RUN: CHECKS {status.replace('_', ' ').upper()} ({checked} checked{skipped})"
            f" — nothing was changed")
