"""The service name on a plan (docs/services.md 2.3): validated, kept by every new version
(Modify, replan), never editable, and hashed only when set."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agents.plan.yaml import plan_from_yaml, plan_to_yaml
from tests.fixtures.builders import make_plan


def test_a_service_name_is_checked_and_kept_by_every_version() -> None:
    plan = make_plan([{"id": "a", "tool": "t"}])
    legacy = plan.hash
    with pytest.raises(ValidationError):
        plan.model_validate({**plan.model_dump(), "service": "api:prod"})
    named = plan.model_validate({**plan.model_dump(), "service": "api"})
    assert named.hash != legacy and named.revised(goal="again").service == "api"
    assert "service" not in plan_to_yaml(named)  # the editable part: goal, steps, rollback
    with pytest.raises(ValueError, match="only goal, steps and rollback"):
        plan_from_yaml(named, plan_to_yaml(named) + "service: web\n")
    edited = plan_from_yaml(named, plan_to_yaml(named).replace("goal: test", "goal: edited"))
    assert (edited.service, edited.version) == ("api", 2)
    assert "service" not in plan.model_dump() and plan.revised().service is None
