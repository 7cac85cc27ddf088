"""The App Home reads the served service's schedules and judges only its runs by its rules
(docs/services.md section 4): another service's plan would not validate under this config,
nor may its runs be offered for approval by rules that are not theirs — and in an
organisation of 200 services, every schedule checked on every publish was 200 checks."""

from __future__ import annotations

from datetime import UTC, datetime

from agents.run.record import Run, RunStatus
from agents.schedules.model import Schedule
from bot.slack.home import home_data
from tests.fixtures.slack_world import SlackWorld


def _staging_deploy(world: SlackWorld, service: str | None) -> tuple[Run, Schedule]:
    services = world.runtime.services
    plan = services.make_plan("deploy v2.3.2 to staging", requested_by="UCAROL", face="cli")
    plan = world.store.plans.save(plan.model_copy(update={"service": service}))
    run = world.store.runs.create(Run.for_plan(plan, services.targets(plan),
                                               status=RunStatus.AWAITING_APPROVAL))
    now = datetime.now(UTC)
    schedule = world.store.schedules.create(Schedule(
        spec="every day at 02:00", cron="0 2 * * *", request="deploy v2.3.2 to staging",
        service=service, created_by="UCAROL", created_at=now, armed_at=now, auto=True,
        approved_plan_id=plan.id, approved_plan_hash=plan.hash))
    return run, schedule


def test_the_home_shows_its_own_services_schedules_and_approvals(world: SlackWorld) -> None:
    ours, our_schedule = _staging_deploy(world, None)  # the sample: the legacy service
    theirs, _ = _staging_deploy(world, "web")

    data = home_data(world.runtime.bot, "UBOB")

    assert [r.id for r in data.pending] == [ours.id]  # UBOB approves staging here, not web's
    assert [s.id for s, _ in data.schedules] == [our_schedule.id]
    assert data.schedules[0][0].plan_problem is None
    assert {r.id for r in world.store.runs.recent(limit=10, statuses=[
        RunStatus.AWAITING_APPROVAL])} == {ours.id, theirs.id}  # both still stored, untouched
