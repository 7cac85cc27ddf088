"""Plans as YAML: the editable part of a plan out, an edited text back in as a new version.

Slack's Modify modal and the terminal's editor share these, so both accept the same edits
and refuse them with the same messages.
"""

from __future__ import annotations

import yaml
from pydantic import ValidationError

from agents.plan.model import Plan


def plan_to_yaml(plan: Plan) -> str:
    """The editable part of a plan (goal, steps, rollback) as YAML."""
    body = plan.model_dump(include={"goal", "steps", "rollback"}, mode="json",
                           exclude_none=True)
    return yaml.safe_dump(body, sort_keys=False, allow_unicode=True)


def plan_from_yaml(plan: Plan, text: str, *, edited_by: str | None = None) -> Plan:
    """A new version of ``plan`` from edited YAML; ValueError says what is wrong.

    ``edited_by`` is recorded in the planner info, so every footer names who changed it.
    """
    try:
        body = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"invalid YAML: {exc}") from exc
    if not isinstance(body, dict):
        raise ValueError("the plan must be a mapping with goal, steps and rollback")
    unknown = set(body) - {"goal", "steps", "rollback"}
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}: only goal, steps and rollback "
                         f"can be edited")
    if edited_by is not None:
        body["planner"] = plan.planner.model_copy(update={"edited_by": edited_by}).model_dump()
    try:
        return plan.revised(**body)
    except ValidationError as exc:
        raise ValueError(_short_validation(exc)) from exc


def _short_validation(exc: ValidationError) -> str:
    return "\n".join(f"  - {'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
