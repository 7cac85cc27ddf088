"""Plan quality from real use: what became of the plans each prompt version and model made.

For every run, the plan the planner first proposed (version 1) names its maker — the LLM's
prompt version and model, or a playbook — and the run record says what people and execution
did with it: approved as it was, modified (Modify or a hand edit, both recorded as the
run's ``modified_versions``; sized by the plan diff against the last one), rejected,
replanned while running, and how it ended. Pure functions over records the store already
keeps; its two faces are ``bot.metrics`` (Prometheus) and ``deckhand eval --from-history``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from agents.plan.diff import diff_plans
from agents.plan.model import Plan
from agents.run.record import Run, RunStatus

OUTCOMES = ("planned", "approved_unchanged", "modified", "rejected", "replanned", "succeeded",
            "failed", "rolled_back")
"""What a run's first plan can come to (a run counts under every one that holds)."""
OTHER = "other"
FAILED = frozenset({RunStatus.FAILED, RunStatus.ROLLBACK_FAILED, RunStatus.INTERRUPTED})
PlanRef = tuple[str, int]
"""(plan id, version)."""
PlansAt = Callable[[list[PlanRef]], list[Plan | None]]
"""The plan at each ref, None where there is none (``Store.plans_at``)."""
_PAST_APPROVAL = frozenset({RunStatus.APPROVED, RunStatus.QUEUED, RunStatus.RUNNING,
                            RunStatus.ROLLING_BACK, RunStatus.SUCCEEDED, RunStatus.ROLLED_BACK,
                            *FAILED})


@dataclass(frozen=True, order=True)
class Maker:
    """What made a plan: ``llm`` with its prompt version and model, or ``playbook``."""

    planner: str
    prompt_version: str = ""
    model: str = ""

    @classmethod
    def of(cls, plan: Plan) -> Maker:
        info = plan.planner
        if info.model is None:
            return cls("playbook")
        return cls("llm", info.prompt_version or "unknown", info.model)


@dataclass(frozen=True)
class Fate:
    """What became of one run's first plan."""

    maker: Maker
    outcomes: frozenset[str]
    changes: int = 0
    """Size of the plan diff from the planner's plan to the last Modify (0: not modified)."""


def counted(run: Run) -> bool:
    """Whether a run says anything about its planner: dry runs and read-only answers
    (no approval round) do not."""
    return not run.meta.get("dry_run") and not run.meta.get("read_only")


def plans_needed(run: Run) -> list[PlanRef]:
    """The plan versions ``fate`` reads: the first, and the last one people modified."""
    first = run.plan_versions[0] if run.plan_versions else run.plan_version
    last = [max(run.modified_versions)] if run.modified_versions else []
    return [(run.plan_id, version) for version in [first, *last]]


def fate_from(run: Run, plans: Mapping[PlanRef, Plan | None]) -> Fate | None:
    """``fate`` with the plans of ``plans_needed`` looked up; None when the first is gone."""
    first, *modified = (plans.get(ref) for ref in plans_needed(run))
    return fate(run, first, modified[0] if modified else None) if first is not None else None


def fates(runs: Iterable[Run], plans_at: PlansAt) -> list[Fate]:
    """The fates of the counted ``runs``, their plans read in one ``plans_at`` call (runs
    whose first plan is gone are left out)."""
    kept = [run for run in runs if counted(run)]
    refs = list(dict.fromkeys(ref for run in kept for ref in plans_needed(run)))
    plans = dict(zip(refs, plans_at(refs), strict=True))
    return [one for run in kept if (one := fate_from(run, plans)) is not None]


def fate(run: Run, first: Plan, modified: Plan | None = None) -> Fate:
    """What became of ``first`` (the planner's plan of ``run``); ``modified``: the version
    of its last Modify or hand edit, if any (None when gone: modified, size unknown)."""
    outcomes = {"planned"}
    if run.modified_versions:
        outcomes.add("modified")
    elif _approved(run):
        outcomes.add("approved_unchanged")
    if run.status is RunStatus.REJECTED:
        outcomes.add("rejected")
    if run.replans > 0:
        outcomes.add("replanned")
    if run.status is RunStatus.SUCCEEDED:
        outcomes.add("succeeded")
    elif run.status in FAILED:
        outcomes.add("failed")
    elif run.status is RunStatus.ROLLED_BACK:
        outcomes.add("rolled_back")
    changes = diff_plans(first, modified).changes if modified is not None else 0
    return Fate(Maker.of(first), frozenset(outcomes), changes)


def _approved(run: Run) -> bool:
    """Whether people approved it: a status only approval leads to, a start (a replan may
    have asked again since), or approvals on a run cancelled in the queue."""
    return (run.status in _PAST_APPROVAL or run.started_at is not None
            or (run.status is RunStatus.CANCELLED and bool(run.approvals)))


@dataclass
class Tally:
    """Runs per outcome, and the summed diff size of the modified ones, for one maker."""

    outcomes: Counter[str] = field(default_factory=Counter)
    changes: int = 0

    @property
    def changes_per_modified(self) -> float:
        modified = self.outcomes["modified"]
        return self.changes / modified if modified else 0.0

    def add(self, one: Fate | Tally) -> None:
        self.outcomes.update(one.outcomes)
        self.changes += one.changes


def tally(found: Iterable[Fate], *, max_makers: int | None = None) -> dict[Maker, Tally]:
    """Fates summed per maker, busiest first; past the ``max_makers`` with most plans, the
    rest are summed per planner as ``other`` (metric labels must stay bounded)."""
    per: dict[Maker, Tally] = {}
    for one in found:
        if one.maker not in per:
            per[one.maker] = Tally()
        per[one.maker].add(one)
    ranked = sorted(per, key=lambda m: (-per[m].outcomes["planned"], m))
    kept = len(ranked) if max_makers is None else max_makers
    out = {maker: per[maker] for maker in ranked[:kept]}
    for maker in ranked[kept:]:
        out.setdefault(Maker(maker.planner, OTHER, OTHER), Tally()).add(per[maker])
    return out
