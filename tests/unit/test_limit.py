"""Issue 33: --limit narrows a plan's hosts, is part of what is approved, never widens."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.config import Config, load_config
from agents.errors import PlanInvalid
from agents.plan.model import Plan
from agents.plan.targets import resolve
from agents.plan.validation import validate_plan
from agents.requests.phrasing import Phrasing
from agents.requests.playbooks import PlaybookPlanner
from bot.cli.init import template_text


@pytest.fixture
def config(tmp_path: Path) -> Config:
    path = tmp_path / "deckhand.yml"
    path.write_text(template_text())
    return load_config(path)


def plan_for(config: Config, request: str, limit: list[str]) -> Plan:
    planner = PlaybookPlanner(config.playbooks, phrasing=Phrasing.of(config.inventory.environments))
    plan = planner.plan(request, requested_by="a")
    plan.limit = limit
    return plan


def test_the_limit_is_in_the_hash_only_when_set(config: Config) -> None:
    plain = plan_for(config, "deploy v1.0.3", [])
    body = plain.model_dump(include={"goal", "steps", "rollback"}, mode="json")
    assert plain.hash == plan_for(config, "deploy v1.0.3", []).hash  # unchanged for old plans
    limited = plain.model_copy(update={"limit": ["staging-1", "prod-1"]})
    assert limited.hash != plain.hash  # an approval of one is no approval of the other
    assert body == limited.model_dump(include={"goal", "steps", "rollback"}, mode="json")


def test_limit_narrows_hosts_never_environments(config: Config) -> None:
    plan = plan_for(config, "deploy v1.0.3", ["staging", "prod-2"])
    targets = resolve(plan, config.catalog, config.inventory)
    assert targets.of("deploy_production").hosts == ("prod-2",)
    assert targets.of("deploy_staging").hosts == ("staging-1",)
    assert targets.environments == ["staging", "production"]  # policy sees both, as before
    validate_plan(plan, config.catalog, config.inventory, config.policy)


@pytest.mark.parametrize(("limit", "said"), [
    (["prod-1"], "step deploy_staging: --limit prod-1 leaves it no host"),
    (["qa-1"], "--limit 'qa-1': no host, group or environment has that name")])
def test_a_limit_that_would_skip_a_step_or_names_nothing_is_refused(
        config: Config, limit: list[str], said: str) -> None:
    with pytest.raises(PlanInvalid, match=said):
        validate_plan(plan_for(config, "deploy v1.0.3", limit), config.catalog,
                      config.inventory, config.policy)
