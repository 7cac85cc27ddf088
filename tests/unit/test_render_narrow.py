"""Rendering that holds at 80 columns and in pipes: whole words, status on its own line,
params whole when they fit, hosts counted against the rollout, the editor in the footer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from agents.config import load_config
from agents.plan.model import format_params
from agents.plan.yaml import plan_from_yaml, plan_to_yaml
from agents.run.record import HostResult, Run, StepState, StepStatus
from agents.services import build_services
from bot.terminal.render import plan_table, status_table
from tests.fixtures.sample import EXAMPLES

ROOT = Path(__file__).resolve().parents[2]


def _plan(request: str = "deploy v2.3.1"):  # type: ignore[no-untyped-def]
    services = build_services(load_config(EXAMPLES / "deckhand.yml"))
    return services, services.make_plan(request, requested_by="alice", face="cli")


def _render(renderable: object, width: int) -> list[str]:
    console = Console(width=width, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text().splitlines()


def test_plan_table_fits_80_columns_without_breaking_a_pair() -> None:
    services, plan = _plan()
    lines = _render(plan_table(plan, services.targets(plan)), 80)
    assert max(len(line) for line in lines) <= 80
    text = "\n".join(lines)
    for step in plan.steps:
        for pair in format_params(step.params, 400).split():
            assert pair in text, pair  # every k=v pair whole on one line
        assert step.id in text


def test_params_are_whole_when_they_fit() -> None:
    services, plan = _plan()
    text = "\n".join(_render(plan_table(plan, services.targets(plan)), 120))
    assert "artifact=${steps.build_docker.artifact}" in text and "…" not in text


def test_host_counts_use_the_rollout_size() -> None:
    services, plan = _plan()
    run = Run.for_plan(plan, services.targets(plan))
    first = HostResult(host="prod-1", status=StepStatus.RUNNING)
    run.steps["deploy_production"] = StepState(id="deploy_production",
                                               status=StepStatus.RUNNING,
                                               hosts={"prod-1": first})
    counts = services.host_counts(plan)
    assert counts["deploy_production"] == 2 and counts["deploy_staging"] == 1
    row = next(line for line in _render(status_table(plan, run, counts), 100)
               if "deploy_production" in line)
    assert "0/2" in row


def test_footer_names_who_edited_a_version() -> None:
    services, plan = _plan()
    edited = plan_from_yaml(plan, plan_to_yaml(plan).replace("Deploy", "Ship"), edited_by="bob")
    assert edited.planner.footer().startswith("edited by bob · planned by playbook deploy")
    table = plan_table(edited, services.targets(edited))
    assert "edited by bob" in "\n".join(_render(table, 100))


def test_piped_run_puts_status_on_its_own_line(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}
    env.pop("DECKHAND_CONFIG", None)
    cli = [sys.executable, "-m", "bot.cli"]
    subprocess.run([*cli, "init"], cwd=tmp_path, env=env, check=True, capture_output=True)
    done = subprocess.run([*cli, "run", "deploy v1.0.0", "--yes"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "SUCCEEDED" in [line.strip() for line in lines]
    assert max(len(line) for line in lines) <= 80


def test_a_revision_that_drops_the_failed_step_still_renders() -> None:
    """``deckhand run``'s table shows the plan it started with; a replanned revision that
    drops the failed step (and adds another) leaves the run without that step's state: the
    table says so, and shows the new step, instead of crashing (KeyError)."""
    from agents.run.record import Event, EventKind
    from bot.terminal.render import live_view, summary

    services, plan = _plan()
    run = Run.for_plan(plan, services.targets(plan))
    failed = plan.steps[-1].id
    run.steps[failed] = StepState(id=failed, status=StepStatus.FAILED, error="smoke failed")
    revised = plan.revised(steps=[*(s.model_dump() for s in plan.steps[:-1]),
                                  {**plan.steps[-1].model_dump(), "id": "smoke_again"}])
    run.apply(Event(kind=EventKind.REPLANNED, run_id=run.id, plan=revised.model_dump(mode="json"),
                    plan_hash="h", status="continue", error=f"{failed} failed"))
    assert failed not in run.steps and "smoke_again" in run.steps
    text = "\n".join(_render(live_view(plan, run, services.host_counts(plan)), 160))
    row = next(line for line in text.splitlines() if failed in line)
    assert f"not in plan version {revised.version} (replanned)" in row
    assert "smoke_again" in text
    assert "\n".join(_render(summary(plan, run), 160))
