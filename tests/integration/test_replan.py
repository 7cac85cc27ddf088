"""The adaptive variant end to end: a step fails, the LLM revises the rest, the run goes on
(or waits for approval when the revision changes hosts). Real openai client, stand-in server,
real redis-server, real worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from agents.config import Config
from agents.engine.worker import Worker, WorkerOptions
from agents.plan.model import Plan
from agents.run.record import Run, RunStatus, StepStatus
from agents.services import Services, build_services
from agents.settings import Settings
from agents.store import Store
from tests.fixtures.builders import SHELL_TOOLS, make_config, make_plan
from tests.fixtures.openai_standin import API_KEY, OpenAIStandin

PROBE = """
  probe:
    description: succeeds when value is ok (read-only)
    command: "test {value} = ok"
    params: {value: {type: string, pattern: '^[a-z]+$'}}
    approval: none
"""


def wire_step(step_id: str, tool: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"id": step_id, "tool": tool, "description": "", "success": None,
            "params": [{"name": k, "value": v} for k, v in params.items()], "depends_on": []}


def wire_rollback(step_id: str, tool: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"id": step_id, "tool": tool, "description": "",
            "params": [{"name": k, "value": v} for k, v in params.items()]}


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return make_config(tmp_path, tools=SHELL_TOOLS.replace("tools:\n", "tools:" + PROBE, 1))


@pytest.fixture
def services(config: Config, store: Store, openai_standin: OpenAIStandin) -> Services:
    settings = Settings(OPENAI_API_KEY=SecretStr(API_KEY), OPENAI_BASE_URL=openai_standin.base_url,
                        OPENAI_MODEL="standin-model", OPENAI_TIMEOUT=5)
    return build_services(config, settings, store=store)


def queue(services: Services, plan: Plan, *, approver: str = "bob") -> Run:
    services.store.plans.save(plan)
    run = services.store.runs.create(Run.for_plan(plan, services.targets(plan)))
    return services.store.runs.approve(run.id, face="cli", user=approver, plan_version=plan.version,
                                       plan_hash=plan.hash, policy=services.config.policy)


def worker(services: Services) -> Worker:
    return Worker(services, services.store, name="w", options=WorkerOptions(block=0.1))


def test_read_only_revision_continues_without_approval(
        services: Services, openai_standin: OpenAIStandin) -> None:
    run = queue(services, make_plan([{"id": "check", "tool": "probe",
                                      "params": {"value": "bad"}}]))
    openai_standin.reply_json({"action": "continue", "reason": "probe the right value",
                               "steps": [wire_step("check", "probe", {"value": "ok"})],
                               "rollback": []})
    assert worker(services).step(block=0.5)
    final = services.store.runs.get(run.id)
    assert final.status is RunStatus.SUCCEEDED
    assert final.plan_versions == [1, 2] and final.plan_version == 2
    assert services.store.plans.get(final.plan_id, 2).step("check").params["value"] == "ok"
    assert "check (probe): failed" in str(openai_standin.requests[0].messages[-1]["content"])
    assert "replanned" in [e.action for e in services.store.audit.entries(run_id=run.id)]


def test_revision_of_a_mutating_step_waits_for_approval(
        services: Services, openai_standin: OpenAIStandin, tmp_path: Path) -> None:
    plan = make_plan([{"id": "stage", "tool": "change", "params": {
                          "environment": "staging", "label": "one", "script": "exit 3"}}],
                     rollback=[{"id": "undo_stage", "tool": "undo",
                                "params": {"environment": "staging"}}])
    run = queue(services, plan)
    openai_standin.reply_json({
        "action": "continue", "reason": "the script was wrong",
        "steps": [wire_step("stage", "change", {"environment": "staging", "label": "two",
                                                "script": "true"})],
        "rollback": [wire_rollback("undo_stage", "undo", {"environment": "staging"})]})
    assert worker(services).step(block=0.5)
    waiting = services.store.runs.get(run.id)
    assert waiting.status is RunStatus.AWAITING_APPROVAL and waiting.plan_version == 2
    assert waiting.rollback["undo_stage"].status is StepStatus.PENDING  # nothing rolled back
    assert not (tmp_path / "log.txt").exists()
    revised = services.store.plans.get(plan.id, 2)
    services.store.runs.approve(run.id, face="cli", user="bob", plan_version=2, plan_hash=revised.hash,
                                policy=services.config.policy)
    assert worker(services).step(block=0.5)
    final = services.store.runs.get(run.id)
    assert final.status is RunStatus.SUCCEEDED
    assert (tmp_path / "web-1" / "changes").read_text().split() == ["one", "two"]


def test_replans_are_bounded_then_rollback(
        services: Services, openai_standin: OpenAIStandin, tmp_path: Path) -> None:
    run = queue(services, make_plan([{"id": "check", "tool": "probe",
                                      "params": {"value": "bad"}}],
                                    rollback=[{"id": "tell", "tool": "log",
                                               "params": {"line": "gave up"}}]))
    openai_standin.reply_json({"action": "continue", "reason": "try another value",
                               "steps": [wire_step("check", "probe", {"value": "worse"})],
                               "rollback": [wire_rollback("tell", "log", {"line": "gave up"})]})
    assert worker(services).step(block=0.5)
    final = services.store.runs.get(run.id)
    assert final.status is RunStatus.ROLLED_BACK  # policy allows one replan; the second fails
    assert final.plan_versions == [1, 2] and len(openai_standin.requests) == 1
    assert (tmp_path / "log.txt").read_text().split() == ["gave", "up"]


def test_the_live_table_survives_a_revision_that_drops_the_failed_step(
        services: Services, openai_standin: OpenAIStandin) -> None:
    """``deckhand run`` draws its live table from the plan it started with on every event;
    a revision that drops the failed step (``smoke``) once crashed it (KeyError, rc 70)."""
    import io

    from rich.console import Console

    from agents.run.record import Event
    from bot.terminal.render import live_view

    plan = make_plan([{"id": "smoke", "tool": "probe", "params": {"value": "bad"}}])
    run = queue(services, plan)
    openai_standin.reply_json({"action": "continue", "reason": "probe another way",
                               "steps": [wire_step("smoke_again", "probe", {"value": "ok"})],
                               "rollback": []})
    drawn: list[str] = []
    crashed: list[str] = []

    def draw(event: Event, current: Run) -> None:  # as the live table does, on each event
        console = Console(file=io.StringIO(), width=160, record=True)
        try:
            console.print(live_view(plan, current))
        except Exception as exc:  # the executor would only log a listener's crash
            crashed.append(f"{event.kind.value}: {exc!r}")
        drawn.append(console.export_text())

    final = worker(services).process(run.id, listeners=[draw])
    assert final is not None and final.status is RunStatus.SUCCEEDED
    assert list(final.steps) == ["smoke_again"]
    assert crashed == []
    last = drawn[-1]
    assert "not in plan version 2 (replanned)" in last and "smoke_again" in last, last
