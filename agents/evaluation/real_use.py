"""Plan quality from real use: what people and runs did with the plans each planner made.

Read from run records and the plan versions they went through: approved unchanged, modified
(and by how many plan-diff lines), rejected, replanned during execution, failed, rolled back.
Runs are grouped by the provenance of their first plan version (:data:`GROUP_BY`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import pairwise

from agents.errors import NotFound
from agents.plan import Plan, PlannerInfo
from agents.plan_diff import diff_plans
from agents.runs import Run, RunStatus

GROUP_BY: dict[str, Callable[[PlannerInfo], str]] = {
    "planner": lambda info: info.name,
    "model": lambda info: info.model or "-",
}
"""The columns runs are grouped by, from the first plan version's provenance. Another key
the plan records (a prompt version, say) is one more line here."""

FAILED = frozenset({RunStatus.FAILED, RunStatus.ROLLBACK_FAILED, RunStatus.INTERRUPTED})
PlanLookup = Callable[[str, int], Plan]
"""(plan id, version) -> that plan version; NotFound when it is gone."""


@dataclass
class Quality:
    """Counts of runs whose first plan came from one group (a run may count in several)."""

    group: dict[str, str]
    runs: int = 0
    approved_unchanged: int = 0
    modified: int = 0
    modified_lines: int = 0
    """Plan-diff lines over every modification (hand edits and Modify requests)."""
    rejected: int = 0
    replanned: int = 0
    failed: int = 0
    rolled_back: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    """Runs by final status."""

    @property
    def lines_per_modified(self) -> float:
        return self.modified_lines / self.modified if self.modified else 0.0

    def add(self, run: Run, versions: list[Plan]) -> None:
        edits = [(old, new) for old, new in pairwise(versions) if not _replanned(old, new)]
        self.runs += 1
        self.modified += bool(edits)
        self.modified_lines += sum(len(diff_plans(old, new).lines()) for old, new in edits)
        self.replanned += len(edits) < len(versions) - 1
        self.rejected += run.status is RunStatus.REJECTED
        self.approved_unchanged += _approved(run) and not edits
        self.failed += run.status in FAILED
        self.rolled_back += run.status is RunStatus.ROLLED_BACK
        self.outcomes[run.status.value] = self.outcomes.get(run.status.value, 0) + 1


def quality(runs: Iterable[Run], plan_of: PlanLookup) -> list[Quality]:
    """Quality per group over ``runs``; runs whose plan is gone are skipped."""
    groups: dict[tuple[str, ...], Quality] = {}
    for run in runs:
        versions = _versions(run, plan_of)
        if not versions:
            continue
        key = tuple(column(versions[0].planner) for column in GROUP_BY.values())
        groups.setdefault(key, Quality(dict(zip(GROUP_BY, key, strict=True)))).add(run, versions)
    return [groups[key] for key in sorted(groups)]


def _versions(run: Run, plan_of: PlanLookup) -> list[Plan]:
    found = []
    for version in dict.fromkeys(run.plan_versions or [run.plan_version]):
        try:
            found.append(plan_of(run.plan_id, version))
        except NotFound:
            continue
    return found


def _replanned(old: Plan, new: Plan) -> bool:
    """A version the planner made during execution. A hand edit copies the planner info
    (note included) and adds ``edited_by``, so it never counts as a replan."""
    made_by_planner = (new.planner.model_copy(update={"edited_by": None})
                       != old.planner.model_copy(update={"edited_by": None}))
    return made_by_planner and new.planner.note.startswith("replanned")


def _approved(run: Run) -> bool:
    return bool(run.approvals) or run.started_at is not None
