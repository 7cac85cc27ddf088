"""What changed between two versions of a plan: steps added, removed and changed, by step id.

A pure function over two Plans. Front ends render the result: ``PlanDiff.lines()`` gives one
marked line per change, so Slack (``bot.slack.blocks.diff_blocks``) and the terminal
(``bot.terminal.render.diff_text``) show the same thing, each in its own markup. Approvers of a new
version review these lines, not the whole plan again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from agents.plan.model import Plan, RollbackStep, Step

VALUE_LIMIT = 40


class Mark(StrEnum):
    ADDED = "+"
    REMOVED = "-"
    CHANGED = "~"


@dataclass(frozen=True)
class ParamChange:
    """One parameter of a step: ``None`` on a side means it was absent there."""

    key: str
    old: object | None
    new: object | None

    def describe(self) -> str:
        """E.g. ``version: v2.3.1 → v2.3.2``, ``force=true (new)``."""
        if self.old is None:
            return f"{self.key}={_value(self.new)} (new)"
        if self.new is None:
            return f"{self.key}={_value(self.old)} (dropped)"
        return f"{self.key}: {_value(self.old)} → {_value(self.new)}"


@dataclass(frozen=True)
class StepChange:
    """How one step (same id in both versions) changed."""

    id: str
    tool: tuple[str, str] | None = None
    params: tuple[ParamChange, ...] = ()
    deps_added: tuple[str, ...] = ()
    deps_removed: tuple[str, ...] = ()
    other: tuple[str, ...] = ()
    """Names of other fields that changed (description, success)."""
    success: tuple[str, str] | None = None
    """The step's extra success criteria before and after, when they changed."""

    def describe(self) -> str:
        """Every change of the step, ``; ``-separated."""
        parts = [f"tool: {self.tool[0]} → {self.tool[1]}"] if self.tool else []
        parts += [p.describe() for p in self.params]
        if self.deps_added or self.deps_removed:
            deps = [f"+{d}" for d in self.deps_added] + [f"−{d}" for d in self.deps_removed]
            parts.append(f"after: {' '.join(deps)}")
        parts += [f"{name} changed" for name in self.other if name != "success"]
        if self.success:
            parts.append(f"success: {self.success[0] or 'tool only'} → "
                         f"{self.success[1] or 'tool only'}")
        return "; ".join(parts)


@dataclass(frozen=True)
class DiffLine:
    """One change for display: a mark, the step it is about ("" for the plan) and a text."""

    mark: Mark
    step: str
    text: str
    rollback: bool = False


@dataclass(frozen=True)
class PlanDiff:
    """The difference between version ``old_version`` and ``new_version`` of one plan."""

    old_version: int
    new_version: int
    goal: tuple[str, str] | None = None
    added: tuple[Step, ...] = ()
    removed: tuple[Step, ...] = ()
    changed: tuple[StepChange, ...] = ()
    rollback_added: tuple[RollbackStep, ...] = ()
    rollback_removed: tuple[RollbackStep, ...] = ()
    rollback_changed: tuple[StepChange, ...] = ()
    rollback_reordered: bool = False
    reordered: bool = field(default=False)
    """Same steps, listed in another order (no effect on execution, which follows deps)."""
    made_by: tuple[str, str] | None = None
    """What made each version (prompt@version · model, or the playbook), when they differ."""

    @property
    def empty(self) -> bool:
        """True when the plans do not differ, not even in the order steps are listed in
        (whatever made them)."""
        return not self.changes and not self.reordered

    @property
    def changes(self) -> int:
        """How many changes to goal, steps and rollback: the diff's size."""
        return len(self._content_lines())

    def summary(self) -> str:
        """Counts, e.g. ``2 added, 1 removed, 1 changed`` (rollback steps included)."""
        counts = [(len(self.added) + len(self.rollback_added), "added"),
                  (len(self.removed) + len(self.rollback_removed), "removed"),
                  (len(self.changed) + len(self.rollback_changed), "changed")]
        text = ", ".join(f"{n} {what}" for n, what in counts if n)
        if self.goal:
            text = f"goal changed{', ' + text if text else ''}"
        return text or ("steps reordered" if self.reordered else "no changes")

    def lines(self) -> list[DiffLine]:
        """What made the new version if that changed, then every change, plan steps first,
        then rollback steps."""
        made = [DiffLine(Mark.CHANGED, "", f"made by: {self.made_by[0]} → {self.made_by[1]}")
                ] if self.made_by else []
        return made + self._content_lines()

    def _content_lines(self) -> list[DiffLine]:
        out = [DiffLine(Mark.CHANGED, "", f"goal: {self.goal[0]!r} → {self.goal[1]!r}")
               ] if self.goal else []
        out += [DiffLine(Mark.ADDED, s.id, _step_text(s)) for s in self.added]
        out += [DiffLine(Mark.REMOVED, s.id, _step_text(s)) for s in self.removed]
        out += [DiffLine(Mark.CHANGED, c.id, c.describe()) for c in self.changed]
        out += [DiffLine(Mark.ADDED, r.id, _step_text(r), rollback=True)
                for r in self.rollback_added]
        out += [DiffLine(Mark.REMOVED, r.id, _step_text(r), rollback=True)
                for r in self.rollback_removed]
        out += [DiffLine(Mark.CHANGED, c.id, c.describe(), rollback=True)
                for c in self.rollback_changed]
        if self.rollback_reordered:
            out.append(DiffLine(Mark.CHANGED, "", "rollback order changed", rollback=True))
        return out


def diff_plans(old: Plan, new: Plan) -> PlanDiff:
    """How ``new`` differs from ``old`` (normally two versions of one plan).

    Steps are matched by id: a renamed step shows as one removed and one added.
    """
    before, after = {s.id: s for s in old.steps}, {s.id: s for s in new.steps}
    rb_before, rb_after = {r.id: r for r in old.rollback}, {r.id: r for r in new.rollback}
    common_rb = [r for r in rb_after if r in rb_before]
    return PlanDiff(
        old_version=old.version, new_version=new.version,
        goal=(old.goal, new.goal) if old.goal != new.goal else None,
        added=tuple(s for i, s in after.items() if i not in before),
        removed=tuple(s for i, s in before.items() if i not in after),
        changed=_changed(before, after),
        rollback_added=tuple(r for i, r in rb_after.items() if i not in rb_before),
        rollback_removed=tuple(r for i, r in rb_before.items() if i not in rb_after),
        rollback_changed=_changed(rb_before, rb_after),
        rollback_reordered=common_rb != [r for r in rb_before if r in rb_after],
        reordered=[i for i in after if i in before] != [i for i in before if i in after],
        made_by=_made_by(old, new),
    )


def _made_by(old: Plan, new: Plan) -> tuple[str, str] | None:
    """Both versions' makers, when a different prompt (or its version) or model made them.
    A hand edit keeps its version's maker, so it never shows here."""
    before, after = old.planner.provenance(), new.planner.provenance()
    return (before, after) if before != after else None


def _changed(before: dict[str, Step] | dict[str, RollbackStep],
             after: dict[str, Step] | dict[str, RollbackStep]) -> tuple[StepChange, ...]:
    changes = (_step_change(before[i], step) for i, step in after.items() if i in before)
    return tuple(c for c in changes if c is not None)


def _step_change(old: Step | RollbackStep, new: Step | RollbackStep) -> StepChange | None:
    old_deps = list(getattr(old, "depends_on", []))
    new_deps = list(getattr(new, "depends_on", []))
    other = tuple(name for name in ("description", "success")
                  if getattr(old, name, None) != getattr(new, name, None))
    change = StepChange(
        id=new.id,
        tool=(old.tool, new.tool) if old.tool != new.tool else None,
        params=_param_changes(old.params, new.params),
        deps_added=tuple(d for d in new_deps if d not in old_deps),
        deps_removed=tuple(d for d in old_deps if d not in new_deps),
        other=other, success=_success_change(old, new))
    same = StepChange(id=new.id)
    return None if change == same else change


def _success_change(old: Step | RollbackStep, new: Step | RollbackStep
                    ) -> tuple[str, str] | None:
    before, after = _criteria(old), _criteria(new)
    return (before, after) if before != after else None


def _criteria(step: Step | RollbackStep) -> str:
    success = step.success if isinstance(step, Step) else None
    return success.describe() if success else ""


def _param_changes(old: Mapping[str, object], new: Mapping[str, object]
                   ) -> tuple[ParamChange, ...]:
    keys = [*old, *(k for k in new if k not in old)]
    return tuple(ParamChange(k, old.get(k), new.get(k)) for k in keys
                 if old.get(k) != new.get(k))


def _step_text(step: Step | RollbackStep) -> str:
    params = " ".join(f"{k}={_value(v)}" for k, v in step.params.items())
    deps = getattr(step, "depends_on", [])
    after = f" after {', '.join(deps)}" if deps else ""
    checks = _criteria(step)
    return f"{step.tool} {params}".strip() + after + (f" (success: {checks})" if checks else "")


def _value(value: object) -> str:
    text = str(value)
    return text if len(text) <= VALUE_LIMIT else text[: VALUE_LIMIT - 1] + "…"
