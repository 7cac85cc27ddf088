"""A schedule whose approved plan no longer validates under the current config is flagged in
``schedules list``, ``deckhand check`` (with REDIS_URL) and the App Home — before its next
occurrence fails."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agents.config import Config
from agents.engine.occurrences import Outcome, run_occurrence
from agents.engine.schedule_health import checked
from agents.requests.playbooks import PlaybookPlanner
from agents.schedules.model import Schedule
from agents.services import build_services
from agents.store import Store
from bot.cli import main
from bot.schedule_commands import handle_schedule_command
from bot.slack.home_blocks import HomeData, home_view


def _stale_schedule(config: Config, store: Store) -> Schedule:
    """An --auto schedule approved with a plan whose tool the config has since dropped."""
    plan = PlaybookPlanner(config.playbooks).plan("deploy v2.3.1 to staging", requested_by="U1")
    steps = [s.model_copy(update={"tool": "retired_tool"}) if i == 0 else s
             for i, s in enumerate(plan.steps)]
    plan = plan.model_copy(update={"steps": steps})
    store.plans.save(plan)
    now = datetime.now(UTC)
    return store.schedules.create(Schedule(
    spec="0 2 * * *", cron="0 2 * * *", request="deploy v2.3.1 to staging",
    created_by="U1", auto=True, approved_plan_id=plan.id, approved_plan_hash=plan.hash,
    created_at=now - timedelta(days=1), armed_at=now))


def test_a_schedule_that_no_longer_validates_is_flagged_everywhere(
        sample_config: Config, store: Store, redis_url: str,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    schedule = _stale_schedule(sample_config, store)
    services = build_services(sample_config, store=store)
    listed = handle_schedule_command(["list"], user="U1", user_groups=[], channel=None,
                                     services=services, now=datetime.now(UTC))
    assert "⚠ plan: its approved plan no longer validates" in listed.text
    assert "retired_tool" in listed.text

    monkeypatch.setenv("REDIS_URL", redis_url)
    code = main(["check", str(sample_config.path)])
    out = capsys.readouterr().out
    assert code == 1
    flagged = [line for line in out.splitlines() if line.startswith("schedule ")]
    assert len(flagged) == 1 and "no longer validates" in flagged[0], out

    seen = checked(schedule, sample_config, plans=store.plans)
    view = home_view(HomeData(user="U1", now=0.0, schedules=[(seen, None)]), sample_config.policy)
    assert "no longer validates" in str(view)


def test_an_occurrence_that_cannot_plan_flags_its_schedule_until_one_plans(
        sample_config: Config, store: Store) -> None:
    services = build_services(sample_config, store=store)
    now = datetime.now(UTC)
    schedule = store.schedules.create(Schedule(
    spec="0 2 * * *", cron="0 2 * * *", request="make the coffee", created_by="U1",
    created_at=now, armed_at=now))
    assert run_occurrence(services, schedule, now).outcome is Outcome.PLAN_FAILED
    listed = handle_schedule_command(["list"], user="U1", user_groups=[], channel=None,
                                     services=services, now=now)
    assert "⚠ plan:" in listed.text and "make the coffee" in listed.text

    store.schedules.update(schedule.id, lambda s: setattr(s, "request", "status staging"))
    fixed = store.schedules.get(schedule.id)
    assert run_occurrence(services, fixed, now).outcome is Outcome.AWAITING_APPROVAL
    assert store.schedules.get(schedule.id).plan_problem is None
