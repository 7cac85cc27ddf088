from pathlib import Path

import pytest

from agents.errors import PlanInvalid
from agents.plan.model import Plan
from agents.plan.validation import validate_plan
from tests.fixtures.builders import make_config, make_plan


def problems_of(tmp_path: Path, plan: Plan) -> list[str]:
    config = make_config(tmp_path)
    with pytest.raises(PlanInvalid) as caught:
        validate_plan(plan, config.catalog, config.inventory, config.policy)
    return caught.value.problems


def test_reports_every_problem_at_once_with_step_ids(tmp_path: Path) -> None:
    plan = make_plan([
        {"id": "a", "tool": "sh", "params": {"script": "true"}},
        {"id": "a", "tool": "ssh", "params": {}},
        {"id": "b", "tool": "echo", "params": {"version": "1.0; reboot", "path": "/x"},
         "depends_on": ["missing"]},
    ])
    found = problems_of(tmp_path, plan)
    assert any(p.startswith("step a: duplicate") for p in found)
    assert any("step a: unknown tool 'ssh'" in p and "Did you mean 'sh'" in p for p in found)
    assert any(p.startswith("step b: parameter 'version'") for p in found)
    assert any("step b: depends on unknown step 'missing'" in p for p in found)


def test_cycle_is_named(tmp_path: Path) -> None:
    plan = make_plan([
        {"id": "a", "tool": "log", "params": {"line": "a"}, "depends_on": ["c"]},
        {"id": "b", "tool": "log", "params": {"line": "b"}, "depends_on": ["a"]},
        {"id": "c", "tool": "log", "params": {"line": "c"}, "depends_on": ["b"]},
    ])
    assert any("cycle a -> c -> b -> a" in p for p in problems_of(tmp_path, plan))


def test_mutating_step_needs_rollback(tmp_path: Path) -> None:
    plan = make_plan([{"id": "s", "tool": "change",
                       "params": {"environment": "staging", "label": "x"}}])
    assert any("needs a rollback step using undo for environment staging" in p
               for p in problems_of(tmp_path, plan))


def test_production_only_after_staging(tmp_path: Path) -> None:
    plan = make_plan([{"id": "p", "tool": "change",
                       "params": {"environment": "production", "label": "x"}}],
                     rollback=[{"id": "u", "tool": "undo",
                                "params": {"environment": "production"}}])
    assert any("changes production without first passing staging" in p
               for p in problems_of(tmp_path, plan))


def test_unknown_environment(tmp_path: Path) -> None:
    plan = make_plan([{"id": "p", "tool": "change", "params": {"environment": "moon",
                                                                 "label": "x"}}],
                     rollback=[{"id": "u", "tool": "undo", "params": {"environment": "moon"}}])
    assert any("moon" in p for p in problems_of(tmp_path, plan))


def test_output_reference_must_be_a_dependency(tmp_path: Path) -> None:
    plan = make_plan([
        {"id": "a", "tool": "log", "params": {"line": "a"}},
        {"id": "b", "tool": "log", "params": {"line": "${steps.a.artifact}"}},
    ])
    assert any("does not depend on" in p for p in problems_of(tmp_path, plan))


def test_valid_plan_passes(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    plan = make_plan(
        [{"id": "s", "tool": "change", "params": {"environment": "staging", "label": "x"}},
         {"id": "p", "tool": "change", "params": {"environment": "production", "label": "x"},
          "depends_on": ["s"]}],
        rollback=[{"id": "up", "tool": "undo", "params": {"environment": "production"}},
                  {"id": "us", "tool": "undo", "params": {"environment": "staging"}}])
    validate_plan(plan, config.catalog, config.inventory, config.policy)


def test_hash_is_stable_and_content_bound() -> None:
    steps = [{"id": "a", "tool": "log", "params": {"x": "1", "y": "2"}}]
    first = make_plan(steps)
    reordered = make_plan([{"id": "a", "tool": "log", "params": {"y": "2", "x": "1"}}])
    assert first.hash == reordered.hash
    assert first.hash == first.revised().hash  # version and id do not change the content
    assert first.hash != make_plan([{"id": "a", "tool": "log", "params": {"x": "1"}}]).hash
    assert len(first.hash) == 64


def test_layers_and_critical_path() -> None:
    plan = make_plan([
        {"id": "tests", "tool": "t"}, {"id": "backup", "tool": "t"},
        {"id": "build", "tool": "t", "depends_on": ["tests"]},
        {"id": "deploy", "tool": "t", "depends_on": ["build", "backup"]},
    ])
    assert plan.layers() == [["tests", "backup"], ["build"], ["deploy"]]
    path, total = plan.critical_path({"tests": 2, "backup": 5, "build": 2, "deploy": 1})
    assert path == ["backup", "deploy"] and total == 6


def test_an_undo_tool_can_be_planned_on_its_own(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    plan = make_plan([{"id": "undo_prod", "tool": "undo", "params": {"environment": "production"}}])
    validate_plan(plan, config.catalog, config.inventory, config.policy)
