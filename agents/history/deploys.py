"""Deployment history: which version runs where and since when, and delivery metrics.

A finished run becomes one ``Deploy`` per environment whose hosts it changed (or tried
to). ``Where`` folds deploys into the current state of an environment and of each of its
hosts; hosts that disagree are drift, and a host a failed rollback may have left
anywhere is ``unknown`` — never the version we hoped for. Everything here is pure: the
store persists it (``agents.store.history``) and the faces show it.

Versions come from the ``version`` parameter of a mutating step (after the tool's
defaults); ``previous`` (the rollback tool's default) means whatever the host ran before
its current version. Mutating steps without a version (restarts) are not history.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agents.plan.model import Plan, Step
from agents.run.record import Run, RunStatus, StepState, StepStatus
from tools.catalog import Catalog
from tools.gitlog import Changelog

PREVIOUS = "previous"
"""A ``version`` value meaning "the release before the current one" (the rollback tool)."""
DAY = 86400.0


class HistorySettings(BaseModel):
    """The ``history`` section of the config."""

    model_config = ConfigDict(extra="forbid")

    repo: str | None = Field(default=None, description="local clone of the app's git repository")
    compare_url: str | None = Field(
        default=None, description="web compare link with {old} and {new}, for the plan message")
    max_commits: int = Field(default=10, ge=1, le=50)
    undo_window_hours: float = Field(
        default=24.0, gt=0, description="a rollback this soon after a deploy counts it failed")
    version_tool: str | None = Field(
        default=None, description="a read-only tool that reports a host's live version")
    version_pattern: str = Field(
        default=r"^current: (\S+)$", description="one capture group: the version in its output")
    retention_days: float | None = Field(
        default=None, ge=1, description="deploys older than this are exported, then trimmed "
                                        "(unset: kept, for DORA figures; `where` is never trimmed)")

    @field_validator("version_pattern")
    @classmethod
    def _one_group(cls, value: str) -> str:
        try:
            groups = re.compile(value, re.MULTILINE).groups
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from exc
        if groups != 1:
            raise ValueError("needs exactly one capture group (the version)")
        return value

    def read_version(self, output: str) -> str | None:
        """The version a host reported in ``output`` (None if the pattern finds none)."""
        found = re.search(self.version_pattern, output, re.MULTILINE)
        return found.group(1) if found else None


class HostVersion(BaseModel):
    """What one host serves, as far as deckhand knows."""

    version: str | None
    """None: unknown (a command may have left the host anywhere)."""
    since: float
    run_id: str


class Deploy(BaseModel):
    """One run's effect on one environment."""

    run_id: str
    environment: str
    version: str | None
    """What the run set out to put there (None if it did not say)."""
    outcome: RunStatus
    requested_by: str
    requested_via: str | None = None
    """The face that recorded ``requested_by`` (``agents.faces``; None: from before)."""
    approvers: list[str] = Field(default_factory=list)
    started_at: float
    finished_at: float
    goal: str = ""
    hosts: dict[str, str | None] = Field(default_factory=dict)
    """Hosts the run changed and what each serves afterwards (None: unknown)."""
    rollback_of_version: bool = False
    """The run returned to an earlier version (a rollback tool) rather than shipping one."""

    @property
    def failed(self) -> bool:
        return self.outcome is not RunStatus.SUCCEEDED

    @property
    def took_effect(self) -> bool:
        """Hosts now serve what the run deployed (it succeeded)."""
        return self.outcome is RunStatus.SUCCEEDED


class Where(BaseModel):
    """The deployed state of one environment."""

    environment: str
    version: str | None = None
    since: float | None = None
    by: str | None = None
    run_id: str | None = None
    hosts: dict[str, HostVersion] = Field(default_factory=dict)
    service: str | None = Field(default=None, exclude=True)
    """Whose environment (None: the legacy service's); named by the key it is read from,
    never stored, so ``where:ENV`` keeps its pre-services JSON."""

    @property
    def drift(self) -> dict[str, str | None]:
        """Hosts that serve something other than the environment's version."""
        return {h: v.version for h, v in self.hosts.items() if v.version != self.version}

    def apply(self, deploy: Deploy) -> None:
        """Fold ``deploy`` in (its ``previous`` versions already resolved by the store)."""
        for host, version in deploy.hosts.items():
            self.hosts[host] = HostVersion(version=version, since=deploy.finished_at,
                                           run_id=deploy.run_id)
        if deploy.took_effect:
            versions = {v.version for v in self.hosts.values()}
            self.version = versions.pop() if len(versions) == 1 else deploy.version
            self.since, self.by, self.run_id = (deploy.finished_at, deploy.requested_by,
                                                deploy.run_id)


def deploys_of(plan: Plan, run: Run, catalog: Catalog) -> list[Deploy]:
    """What ``run`` (finished) did to each environment it touched, as history entries."""
    undo_tools = catalog.undo_tools
    out: dict[str, Deploy] = {}
    for step in plan.steps:
        env, version = _target(step, catalog)
        state = run.steps.get(step.id)
        if env is None or state is None or not _started(state):
            continue
        deploy = out.setdefault(env, _deploy(run, env, version,
                                             undo=step.tool in undo_tools))
        deploy.hosts.update(_host_results(run, state, version))
    return list(out.values())


def _target(step: Step, catalog: Catalog) -> tuple[str | None, str | None]:
    """(environment, version) a step installs, or (None, None) if it installs none."""
    if step.tool not in catalog:
        return None, None
    tool = catalog.get(step.tool)
    params = catalog.with_defaults(tool, step.params)
    env, version = params.get("environment"), params.get("version")
    if not tool.mutates or not isinstance(env, str) or version is None:
        return None, None
    return env, str(version)


def _started(state: StepState) -> bool:
    return state.status not in (StepStatus.PENDING, StepStatus.SKIPPED)


def _deploy(run: Run, env: str, version: str | None, *, undo: bool) -> Deploy:
    started = run.started_at or run.created_at
    return Deploy(run_id=run.id, environment=env, version=version, outcome=run.status,
                  requested_by=run.requested_by, requested_via=run.requested_via,
                  approvers=[a.user for a in run.approvals],
                  started_at=started, finished_at=run.finished_at or started, goal=run.goal,
                  rollback_of_version=undo)


def _host_results(run: Run, state: StepState, version: str | None) -> dict[str, str | None]:
    """What each host touched by ``state`` serves after the run, as far as we can tell."""
    out: dict[str, str | None] = {}
    for host, result in state.hosts.items():
        if run.status is RunStatus.SUCCEEDED and result.status is StepStatus.SUCCEEDED:
            out[host] = version
        elif run.status is RunStatus.ROLLED_BACK:
            continue  # rollback returned it to what it served before: unchanged
        else:
            out[host] = None  # failed, cancelled or not rolled back: may be anywhere
    return out


def shipped(plan: Plan, catalog: Catalog) -> tuple[str, str] | None:
    """(environment, version) of the plan's last forward deploy: what the changelog is for."""
    undo_tools = catalog.undo_tools
    found = None
    for step in plan.steps:
        env, version = _target(step, catalog)
        if env is not None and version not in (None, PREVIOUS) and step.tool not in undo_tools:
            found = (env, str(version))
    return found


def changelog_lines(log: Changelog, environment: str, compare_url: str | None) -> list[str]:
    """The changelog as plain text lines (faces escape them for their markup)."""
    if not log.new_known:
        return [f"⚠️ {log.new} is not in the application's repository"]
    if log.downgrade:
        return [f"⚠️ Downgrade: {log.new} is older than {log.old}, live in {environment}"]
    since = f"since {log.old} (live in {environment})" if log.old else "(nothing recorded live)"
    total = len(log.commits) + log.more
    lines = [f"📜 {log.new} ships {total} commit(s) {since}:"]
    lines += [f"• {c.sha} {c.subject} — {c.author}" for c in log.commits]
    if log.more:
        lines.append(f"…and {log.more} more")
    if compare_url and log.old:
        lines.append(compare_url.format(old=log.old, new=log.new))
    return lines


def rollback_target_problems(plan: Plan, catalog: Catalog,
                             deployed: Callable[[str], list[str]]) -> list[str]:
    """Rolling back to a version is allowed only to one that was live in that environment.

    ``deployed(env)`` lists the versions history saw live there, newest first.
    """
    undo_tools = catalog.undo_tools
    out = []
    for step in plan.steps:
        env, version = _target(step, catalog)
        if step.tool not in undo_tools or env is None or version in (None, PREVIOUS):
            continue
        known = deployed(env)
        if version not in known:
            were = ", ".join(known[:10]) if known else "none recorded yet"
            out.append(f"step {step.id}: {version} was never live in {env}, so it cannot be "
                       f"rolled back to. Versions that were: {were}")
    return out


# -- delivery metrics ---------------------------------------------------------------------


@dataclass(frozen=True)
class Stats:
    """DORA-style figures for one environment over ``days``."""

    environment: str
    days: float
    deploys: int
    succeeded: int
    failed: int
    per_day: float
    change_failure_rate: float | None
    """Failed or rolled-back deploys, plus successes undone within the window, over all."""
    time_to_restore: float | None
    """Mean seconds from a failed deploy to the next successful one."""
    lead_time: float | None = None
    """Mean seconds from a version's commit to its successful deploy (needs the git repo)."""


class DeployFacts(Protocol):
    """What ``stats`` reads of a deploy: a Deploy, or the small agents.history.facts copy."""

    @property
    def run_id(self) -> str: ...
    @property
    def environment(self) -> str: ...
    @property
    def version(self) -> str | None: ...
    @property
    def finished_at(self) -> float: ...
    @property
    def rollback_of_version(self) -> bool: ...
    @property
    def failed(self) -> bool: ...
    @property
    def took_effect(self) -> bool: ...


def stats(deploys: Iterable[DeployFacts], *, environment: str, now: float, days: float,
          undo_window: float = DAY,
          commit_time: Callable[[str], float | None] | None = None) -> Stats:
    """Delivery metrics over the deploys that finished in the last ``days`` days."""
    return organisation([(deploys, commit_time, undo_window)], environment=environment,
                        now=now, days=days)


ORG = "*"
"""``organisation``'s environment for a line over every environment."""


Timeline = tuple[Iterable[DeployFacts], Callable[[str], float | None] | None, float]
"""One (service, environment)'s deploys, how to date its versions' commits (or None), and
its service's undo window (seconds: a success a rollback undid within it failed)."""


def organisation(timelines: Iterable[Timeline], *, environment: str, now: float,
                 days: float) -> Stats:
    """The figures of several timelines at once (an organisation's line): deploys summed,
    the failure rate over every deploy, restore and lead times over every restore and
    deploy. Each timeline is folded on its own: web's success never restores api."""
    timelines = list(timelines)
    recent = [sorted((d for d in deploys if environment in (ORG, d.environment)
                      and now - d.finished_at <= days * DAY), key=lambda d: d.finished_at)
              for deploys, _, _ in timelines]
    count = sum(len(line) for line in recent)
    failed = sum(1 for line in recent for d in line if d.failed)
    undone = sum(_undone(line, window)
                 for line, (_, _, window) in zip(recent, timelines, strict=True))
    restores = [t for line in recent for t in _restores(line)]
    leads = [t for line, (_, commit_time, _) in zip(recent, timelines, strict=True)
             for t in _lead_times(line, commit_time)]
    return Stats(environment=environment, days=days, deploys=count,
                 succeeded=count - failed, failed=failed, per_day=count / days,
                 change_failure_rate=(failed + undone) / count if count else None,
                 time_to_restore=_mean(restores), lead_time=_mean(leads))


def _undone(deploys: list[DeployFacts], window: float) -> int:
    """Successful deploys that a rollback undid within ``window`` seconds (each rollback
    undoes the last forward deploy before it)."""
    undone: set[str] = set()
    last: DeployFacts | None = None
    for deploy in deploys:
        if not deploy.took_effect:
            continue
        if not deploy.rollback_of_version:
            last = deploy
        elif last is not None and deploy.finished_at - last.finished_at <= window:
            undone.add(last.run_id)
            last = None
    return len(undone)


def _restores(deploys: list[DeployFacts]) -> list[float]:
    out, broken_since = [], None
    for deploy in deploys:
        if deploy.failed and broken_since is None:
            broken_since = deploy.finished_at
        elif deploy.took_effect and broken_since is not None:
            out.append(deploy.finished_at - broken_since)
            broken_since = None
    return out


def _lead_times(deploys: list[DeployFacts],
                commit_time: Callable[[str], float | None] | None) -> list[float]:
    if commit_time is None:
        return []
    out = []
    for deploy in deploys:
        if deploy.took_effect and deploy.version not in (None, PREVIOUS):
            committed = commit_time(str(deploy.version))
            if committed is not None:
                out.append(deploy.finished_at - committed)
    return out


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
