"""Deployment history: what a finished run means for each host, drift, DORA figures, git."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agents.config import Config, load_config
from agents.history.deploys import (
    DAY,
    Deploy,
    Where,
    changelog_lines,
    deploys_of,
    rollback_target_problems,
    stats,
)
from agents.plan.model import Plan
from agents.requests.playbooks import PlaybookPlanner
from agents.run.record import HostResult, Run, RunStatus, StepState, StepStatus
from tests.fixtures.builders import NO_TARGETS
from tests.fixtures.sample import EXAMPLES
from tools.gitlog import GitRepo


@pytest.fixture(scope="module")
def config() -> Config:
    return load_config(EXAMPLES / "deckhand.yml")


def _plan(config: Config, request: str) -> Plan:
    return PlaybookPlanner(config.playbooks).plan(request, requested_by="alice")


def _finished(plan: Plan, status: RunStatus, hosts: dict[str, dict[str, StepStatus]]) -> Run:
    """A finished run of ``plan``: ``hosts`` gives each started step's per-host results."""
    run = Run.for_plan(plan, NO_TARGETS, status=status, started_at=100.0, finished_at=200.0)
    for step_id, results in hosts.items():
        ok = all(s is StepStatus.SUCCEEDED for s in results.values())
        run.steps[step_id] = StepState(
            id=step_id, status=StepStatus.SUCCEEDED if ok else StepStatus.FAILED,
            hosts={h: HostResult(host=h, status=s) for h, s in results.items()})
    return run


OK = StepStatus.SUCCEEDED


def test_a_successful_deploy_sets_every_host_it_changed(config: Config) -> None:
    plan = _plan(config, "deploy v2.3.1")
    run = _finished(plan, RunStatus.SUCCEEDED, {
        "deploy_staging": {"staging-1": OK},
        "deploy_production": {"prod-1": OK, "prod-2": OK}})
    deploys = {d.environment: d for d in deploys_of(plan, run, config.catalog)}
    assert deploys["production"].hosts == {"prod-1": "v2.3.1", "prod-2": "v2.3.1"}
    where = Where(environment="production")
    where.apply(deploys["production"])
    assert where.version == "v2.3.1" and where.drift == {} and where.run_id == run.id


def test_a_rolled_back_deploy_changes_nothing_and_a_failed_rollback_is_unknown(
        config: Config) -> None:
    plan = _plan(config, "deploy v2.4.0")
    where = Where(environment="production")
    where.apply(Deploy(run_id="run-1", environment="production", version="v2.3.1",
                       outcome=RunStatus.SUCCEEDED, requested_by="a", started_at=1,
                       finished_at=2, hosts={"prod-1": "v2.3.1", "prod-2": "v2.3.1"}))
    rolled = _finished(plan, RunStatus.ROLLED_BACK, {
        "deploy_production": {"prod-1": OK, "prod-2": StepStatus.FAILED}})
    (deploy,) = [d for d in deploys_of(plan, rolled, config.catalog)
                 if d.environment == "production"]
    where.apply(deploy)
    assert where.version == "v2.3.1" and where.drift == {}  # rollback put it back

    stuck = _finished(plan, RunStatus.ROLLBACK_FAILED, {
        "deploy_production": {"prod-1": OK, "prod-2": StepStatus.FAILED}})
    (deploy,) = [d for d in deploys_of(plan, stuck, config.catalog)
                 if d.environment == "production"]
    where.apply(deploy)
    assert where.version == "v2.3.1"  # never the version we hoped for
    assert where.drift == {"prod-1": None, "prod-2": None}  # shown as unknown, loudly


def test_rolling_back_to_a_version_never_live_is_refused(config: Config) -> None:
    plan = _plan(config, "roll back production to v2.2.0")
    live = {"production": ["v2.4.0", "v2.3.1"]}
    problems = rollback_target_problems(plan, config.catalog, lambda e: live.get(e, []))
    assert problems and "v2.2.0 was never live in production" in problems[0]
    assert "v2.4.0, v2.3.1" in problems[0]
    ok = _plan(config, "roll back production to v2.3.1")
    assert rollback_target_problems(ok, config.catalog, lambda e: live.get(e, [])) == []
    assert rollback_target_problems(_plan(config, "deploy v9.9.9"), config.catalog,
                                    lambda e: []) == []  # only rollbacks are bound to history


def _deploy(at: float, outcome: RunStatus, *, undo: bool = False,
            version: str = "v1.0.0") -> Deploy:
    return Deploy(run_id=f"run-{at}", environment="production", version=version,
                  outcome=outcome, requested_by="a", started_at=at - 60, finished_at=at,
                  rollback_of_version=undo, hosts={"prod-1": version})


def test_dora_figures_over_a_known_history() -> None:
    now = 30 * DAY
    history = [
        _deploy(now - 20 * DAY, RunStatus.SUCCEEDED),
        _deploy(now - 10 * DAY, RunStatus.ROLLED_BACK),                 # failed
        _deploy(now - 10 * DAY + 3600, RunStatus.SUCCEEDED),            # restored in 1 h
        _deploy(now - 5 * DAY, RunStatus.SUCCEEDED),                    # undone 2 h later
        _deploy(now - 5 * DAY + 7200, RunStatus.SUCCEEDED, undo=True),
        _deploy(now - 40 * DAY, RunStatus.FAILED),                      # outside the window
    ]
    figures = stats(history, environment="production", now=now, days=30,
                    commit_time=lambda version: now - 31 * DAY)
    assert figures.deploys == 5 and figures.failed == 1
    assert figures.per_day == pytest.approx(5 / 30)
    assert figures.change_failure_rate == pytest.approx(2 / 5)  # the failure + the undone one
    assert figures.time_to_restore == pytest.approx(3600)
    assert figures.lead_time is not None and figures.lead_time > 10 * DAY


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "Ann", "GIT_AUTHOR_EMAIL": "a@example.invalid",
                        "GIT_COMMITTER_NAME": "Ann", "GIT_COMMITTER_EMAIL": "a@example.invalid",
                        "PATH": "/usr/bin:/bin", "HOME": str(repo)})


def make_repo(path: Path, releases: dict[str, list[str]]) -> Path:
    """A git repository with one commit per subject and a tag after each release."""
    path.mkdir()
    _git(path, "init", "-q", "-b", "main")
    for tag, subjects in releases.items():
        for subject in subjects:
            _git(path, "commit", "-q", "--allow-empty", "-m", subject)
        _git(path, "tag", tag)
    return path


def test_changelog_lists_commits_warns_on_downgrade_and_unknown(tmp_path: Path) -> None:
    repo = GitRepo(make_repo(tmp_path / "app", {
        "v2.3.0": ["first"], "v2.3.1": ["fix <b>login</b>", "bump"], "v2.4.0": ["feature"]}))
    log = repo.changelog("v2.3.0", "v2.4.0", limit=2)
    assert [c.subject for c in log.commits] == ["feature", "bump"] and log.more == 1
    lines = changelog_lines(log, "production", "https://git.example.invalid/c/{old}...{new}")
    assert lines[0].startswith("📜 v2.4.0 ships 3 commit(s) since v2.3.0")
    assert lines[-1] == "https://git.example.invalid/c/v2.3.0...v2.4.0"
    assert "Downgrade" in changelog_lines(repo.changelog("v2.4.0", "v2.3.0"), "production",
                                          None)[0]
    assert "not in the application's repository" in changelog_lines(
        repo.changelog("v2.3.0", "v9.9.9"), "production", None)[0]
    assert repo.changelog(None, "--output=/tmp/x").new_known is False  # never an option
    assert repo.commit_time("v2.3.1") is not None and repo.commit_time("nope") is None
