"""Recurring plans against a real redis-server and real APScheduler, with a controlled clock."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from agents.config import Config
from agents.engine.occurrences import Occurrence, Outcome, run_occurrence
from agents.plan.model import Step
from agents.run.record import RunStatus
from agents.schedules.model import Schedule
from agents.services import Services, build_services
from agents.settings import Settings
from agents.store import Store
from bot.schedule_commands import ScheduleReply, handle_schedule_command
from bot.scheduler import JOBS, Fired, Scheduler
from tests.fixtures.polling import wait_until

BERLIN = ZoneInfo("Europe/Berlin")
T0 = datetime(2026, 3, 28, 12, 0, tzinfo=BERLIN)  # a Saturday, the day before spring-forward
STAGING = "deploy v1.2.3 to staging"


def at(year: int, month: int, day: int, hour: int, minute: int = 0, *, fold: int = 0) -> datetime:
    """A Berlin wall time as a UTC instant."""
    return datetime(year, month, day, hour, minute, tzinfo=BERLIN, fold=fold).astimezone(UTC)


@pytest.fixture
def services(sample_config: Config, store: Store) -> Services:
    return build_services(sample_config, Settings(DECKHAND_TZ="Europe/Berlin"), store=store)


def cmd(services: Services, args: str | list[str], *, user: str = "U123",
        groups: tuple[str, ...] = (), channel: str | None = "C1",
        now: datetime = T0) -> ScheduleReply:
    return handle_schedule_command(args, user=user, user_groups=list(groups), channel=channel,
                                   services=services, now=now)


def add(services: Services, args: str, **kw: object) -> Schedule:
    reply = cmd(services, "add " + args, **kw)  # type: ignore[arg-type]
    assert reply.ok, reply.text
    assert reply.schedule is not None
    return reply.schedule


def add_auto(services: Services, args: str, **kw: object) -> Schedule:
    shown = cmd(services, f"add {args} --auto", **kw)  # type: ignore[arg-type]
    assert shown.ok and shown.confirm is not None, shown.text
    created = cmd(services, shown.confirm, **kw)  # type: ignore[arg-type]
    assert created.ok and created.schedule is not None, created.text
    return created.schedule


class Recorder:
    """An on_occurrence callback that remembers what it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, datetime]] = []
        self._lock = threading.Lock()

    def __call__(self, schedule: Schedule, fire_time: datetime) -> None:
        with self._lock:
            self.calls.append((schedule.id, fire_time))


def scheduler(redis_url: str, on_occurrence: Callable[[Schedule, datetime], None], *,
              name: str, grace: timedelta = timedelta(minutes=30)) -> Scheduler:
    """A scheduler with its own Redis connection, as a separate replica would have."""
    own = Store.connect(redis_url)
    return Scheduler(schedules=own.schedules, audit=own.audit, on_occurrence=on_occurrence,
                     grace=grace, name=name)


def sweep(replicas: list[Scheduler], start: datetime, end: datetime,
          step: timedelta = timedelta(minutes=5)) -> list[Fired]:
    """Tick the replicas in turn with a controlled clock from ``start`` to ``end``."""
    fired, now, turn = [], start.astimezone(UTC), 0  # step real time, not wall-clock time
    while now <= end:
        fired += replicas[turn % len(replicas)].tick(now)
        now, turn = now + step, turn + 1
    return fired


def stored_keys(store: Store) -> list[bytes]:
    """Every key but the audit log's (a refusal is audited: see the bad-input test)."""
    audit = {store.keys.audit().encode(), store.keys.audit_chain().encode()}
    return sorted(k for k in store.r.scan_iter("*") if k not in audit)


# -- creating, listing, durability ---------------------------------------------------------


def test_add_stores_and_lists_next_fires_in_the_schedules_zone(services: Services) -> None:
    reply = cmd(services, 'add "every weekday at 02:00" deploy v1.2.3 to staging --tz '
                          'America/New_York --channel <#C777|deploys>')
    assert reply.ok and reply.changed and reply.plan is not None, reply.text
    assert reply.plan.goal == "Deploy v1.2.3 to staging"
    schedule = reply.schedule
    assert schedule is not None and schedule.channel == "C777"
    assert schedule.cron == "0 2 * * mon-fri" and schedule.environments == ["staging"]
    listed = cmd(services, "list")
    assert listed.ok and [v.schedule.id for v in listed.schedules] == [schedule.id]
    assert "Mon 2026-03-30 02:00 EDT" in listed.text  # New York time, not Berlin or UTC
    sunday = add(services, '"0 9 * * 0" status staging')  # default zone from DECKHAND_TZ
    assert sunday.timezone == "Europe/Berlin"
    assert sunday.local(sunday.next_fire(T0)) == "Sun 2026-03-29 09:00 CEST"  # type: ignore[arg-type]
    entries = services.store.audit.entries()
    assert [e.action for e in entries] == ["schedule_created", "schedule_created"]


@pytest.mark.parametrize(("args", "message"), [
    ('add "61 2 * * *" deploy v1.2.3 to staging', "invalid cron expression"),
    ('add "0 2 * * 8" deploy v1.2.3 to staging', "0 and 7 are Sunday"),
    ('add "every day at 02:00" deploy v1.2.3 to staging --tz Europe/Berln',
     "unknown time zone 'Europe/Berln'.*Europe/Berlin"),
    ('add "every day at 02:00" make me a sandwich', "cannot schedule 'make me a sandwich'"),
    ('add "every day at 02:00" deploy v1.2.3 --auto', "unattended runs in staging, production"),
    ('add "every day at 02:00" deploy v1.2.3 to staging --frobnicate', "unknown option"),
    ('add "0 0 30 2 *" deploy v1.2.3 to staging', "never fires"),
    ('add "every day at 02:00 deploy v1.2.3', "check the quotes"),
    ("launch", "unknown schedule command"),
])
def test_bad_input_is_a_clear_error_and_stores_nothing(services: Services, args: str,
                                                       message: str) -> None:
    reply = cmd(services, args)
    assert not reply.ok
    assert re.search(message, reply.text), reply.text
    assert stored_keys(services.store) == []
    assert {e.action for e in services.store.audit.entries()} <= {"plan_refused"}

def test_auto_needs_approver_rights_and_stores_nothing_otherwise(services: Services) -> None:
    staging = services.config.policy.environments["staging"]
    staging.approvers.users, staging.approvers.anyone = ["U-LEAD"], False
    reply = cmd(services, 'add "every day at 02:00" deploy v1.2.3 to staging --auto',
                user="U-INTERN")
    assert not reply.ok and "U-INTERN is not allowed to approve" in reply.text
    assert stored_keys(services.store) == []
    assert add_auto(services, '"every day at 02:00" deploy v1.2.3 to staging',
                    user="U-LEAD").auto


def test_auto_is_created_only_with_the_hash_of_the_plan_shown(services: Services) -> None:
    shown = cmd(services, 'add "every day at 02:00" deploy v1.2.3 to staging --auto')
    assert shown.ok and shown.plan is not None and shown.confirm is not None
    assert shown.schedule is None and stored_keys(services.store) == []
    wrong = cmd(services, 'add "every day at 02:00" deploy v1.2.3 to staging --auto '
                          '--approve 0123456789abcdef')
    assert not wrong.ok and "changed since it was shown" in wrong.text
    assert stored_keys(services.store) == []
    created = cmd(services, shown.confirm)
    assert created.ok and created.schedule is not None
    assert created.schedule.approved_plan_hash == shown.plan.hash
    assert services.store.plans.get(created.schedule.approved_plan_id).hash == shown.plan.hash  # type: ignore[arg-type]


def test_schedules_survive_a_restart_and_fire(services: Services, redis_url: str) -> None:
    schedule = add(services, '"every day at 02:00" deploy v1.2.3 to staging')
    services.store.r.connection_pool.disconnect()
    recorder = Recorder()
    fresh = scheduler(redis_url, recorder, name="after-restart")
    assert [s.id for s in fresh.book.all()] == [schedule.id]
    assert fresh.tick(at(2026, 3, 29, 1, 59)) == []
    fired = fresh.tick(at(2026, 3, 29, 2, 0))
    assert [(f.schedule.id, f.fire_time) for f in fired] == [(schedule.id, at(2026, 3, 29, 2))]
    assert recorder.calls == [(schedule.id, at(2026, 3, 29, 2))]
    again = scheduler(redis_url, recorder, name="restarted-again")
    assert again.tick(at(2026, 3, 29, 2, 1)) == []  # already fired before the restart
    assert again.book.get(schedule.id).last_fire == at(2026, 3, 29, 2)


def test_redis_restart_keeps_schedules(sample_config: Config, own_redis) -> None:  # noqa: ANN001
    services = build_services(sample_config, store=Store.connect(own_redis.url))
    schedule = add(services, '"every 6h" status staging --tz Europe/Berlin')
    own_redis.restart()
    recorder = Recorder()
    replica = scheduler(own_redis.url, recorder, name="after-redis-restart")
    replica.tick(at(2026, 3, 28, 18))
    assert recorder.calls == [(schedule.id, at(2026, 3, 28, 18))]


# -- exactly once across replicas ----------------------------------------------------------


def test_two_replicas_fire_each_occurrence_once(services: Services, redis_url: str) -> None:
    every_30m = add(services, '"every 30m" status staging')
    daily = add(services, '"30 2 * * *" status staging')
    recorder = Recorder()
    replicas = [scheduler(redis_url, recorder, name=f"replica-{i}") for i in range(2)]
    sweep(replicas, T0, T0 + timedelta(hours=6), step=timedelta(minutes=1))
    times = [t for sid, t in recorder.calls if sid == every_30m.id]
    assert len(times) == len(set(times)) == 12  # 12:30 .. 18:00
    assert [sid for sid, _ in recorder.calls].count(daily.id) == 0


def test_concurrent_ticks_at_the_same_instant_fire_once(services: Services,
                                                        redis_url: str) -> None:
    schedule = add(services, '"every day at 13:00" status staging')
    recorder = Recorder()
    replicas = [scheduler(redis_url, recorder, name=f"replica-{i}") for i in range(8)]
    barrier = threading.Barrier(len(replicas))
    now = at(2026, 3, 28, 13)

    def fire(replica: Scheduler) -> None:
        barrier.wait()
        replica.fire_due(now)

    threads = [threading.Thread(target=fire, args=(r,)) for r in replicas]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert recorder.calls == [(schedule.id, now)]
    assert services.store.schedules.get(schedule.id).fires == 1


# -- DST -------------------------------------------------------------------------------------


def test_spring_forward_0230_fires_once_when_the_clock_jumps(services: Services,
                                                             redis_url: str) -> None:
    schedule = add(services, '"30 2 * * *" status staging --tz Europe/Berlin')
    recorder = Recorder()
    replicas = [scheduler(redis_url, recorder, name=f"replica-{i}") for i in range(2)]
    sweep(replicas, T0, at(2026, 3, 30, 6))
    assert recorder.calls == [(schedule.id, at(2026, 3, 29, 3)),  # 03:00 CEST, the jump
                              (schedule.id, at(2026, 3, 30, 2, 30))]


def test_fall_back_0230_fires_once(services: Services, redis_url: str) -> None:
    created = datetime(2026, 10, 24, 12, tzinfo=BERLIN)
    schedule = add(services, '"every day at 02:30" status staging', now=created)
    recorder = Recorder()
    replicas = [scheduler(redis_url, recorder, name=f"replica-{i}") for i in range(2)]
    sweep(replicas, created, at(2026, 10, 26, 6))
    first_0230 = at(2026, 10, 25, 2, 30, fold=0)  # CEST
    assert first_0230 == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    assert recorder.calls == [(schedule.id, first_0230), (schedule.id, at(2026, 10, 26, 2, 30))]


def test_fall_back_hourly_fires_in_both_repeated_hours(services: Services,
                                                       redis_url: str) -> None:
    created = datetime(2026, 10, 25, 0, 30, tzinfo=BERLIN)
    schedule = add(services, '"every 1h" status staging', now=created)
    recorder = Recorder()
    sweep([scheduler(redis_url, recorder, name="r")], created, at(2026, 10, 25, 4))
    local = [schedule.local(t)[15:] for _, t in recorder.calls]
    assert local == ["01:00 CEST", "02:00 CEST", "02:00 CET", "03:00 CET", "04:00 CET"]


# -- missed occurrences ------------------------------------------------------------------------


def test_missed_while_down_coalesce_within_grace(services: Services, redis_url: str) -> None:
    schedule = add(services, '"*/10 * * * *" status staging')
    recorder = Recorder()
    replica = scheduler(redis_url, recorder, name="late", grace=timedelta(minutes=30))
    fired = replica.tick(T0 + timedelta(minutes=45))  # 12:10 .. 12:40 were missed
    assert [(f.fire_time, f.coalesced) for f in fired] == [(at(2026, 3, 28, 12, 40), 2)]
    assert recorder.calls == [(schedule.id, at(2026, 3, 28, 12, 40))]
    actions = [e.action for e in services.store.audit.entries()]
    assert actions.count("schedule_fired") == 1 and actions.count("schedule_missed") == 1


def test_missed_beyond_grace_fires_nothing_then_resumes_normally(services: Services,
                                                                 redis_url: str) -> None:
    schedule = add(services, '"every day at 13:00" status staging')
    recorder, missed = Recorder(), Recorder()
    own = Store.connect(redis_url)
    replica = Scheduler(schedules=own.schedules, audit=own.audit, on_occurrence=recorder,
                        on_missed=missed, grace=timedelta(minutes=30), name="down-for-hours")
    assert replica.tick(at(2026, 3, 28, 18)) == []
    assert missed.calls == [(schedule.id, at(2026, 3, 28, 13))]
    assert replica.tick(at(2026, 3, 28, 19)) == [] and len(missed.calls) == 1
    replica.tick(at(2026, 3, 29, 13))
    assert recorder.calls == [(schedule.id, at(2026, 3, 29, 13))]


def test_paused_occurrences_never_fire_and_resume_rearms(services: Services,
                                                         redis_url: str) -> None:
    schedule = add(services, '"every day at 13:00" status staging')
    assert cmd(services, f"pause {schedule.id}").ok
    recorder = Recorder()
    replica = scheduler(redis_url, recorder, name="r")
    assert replica.tick(at(2026, 3, 28, 13, 5)) == []
    assert cmd(services, f"resume {schedule.id}", now=at(2026, 3, 28, 13, 10)).ok
    assert replica.tick(at(2026, 3, 28, 13, 15)) == []  # the paused 13:00 stays skipped
    replica.tick(at(2026, 3, 29, 13))
    assert recorder.calls == [(schedule.id, at(2026, 3, 29, 13))]


# -- occurrences: plans, runs, --auto, locks ---------------------------------------------------


def test_occurrence_posts_a_new_plan_for_approval(services: Services) -> None:
    schedule = add(services, '"every day at 13:00" deploy v1.2.3 to staging')
    seen: list[Occurrence] = []
    replica = Scheduler.for_services(services, report=seen.append, name="bot")
    assert replica.grace == timedelta(seconds=1800)  # DECKHAND_SCHEDULE_GRACE's default
    replica.tick(at(2026, 3, 28, 13))
    [occurrence] = seen
    assert occurrence.outcome is Outcome.AWAITING_APPROVAL and occurrence.channel == "C1"
    assert occurrence.run is not None and occurrence.plan is not None
    run = services.store.runs.get(occurrence.run.id)
    assert run.status is RunStatus.AWAITING_APPROVAL
    assert run.requested_by == f"schedule:{schedule.id}" and run.meta["schedule"] == schedule.id
    assert services.store.plans.get(run.plan_id).hash == occurrence.plan.hash
    assert services.store.queue.depth() == 0
    assert "plan ready for approval" in occurrence.message


def test_auto_with_an_unchanged_plan_is_queued_without_a_click(services: Services) -> None:
    schedule = add_auto(services, '"every day at 13:00" deploy v1.2.3 to staging')
    occurrence = run_occurrence(services, schedule, at(2026, 3, 28, 13))
    assert occurrence.outcome is Outcome.QUEUED, occurrence.message
    assert occurrence.run is not None and occurrence.run.status is RunStatus.QUEUED
    label = f"schedule:{schedule.id} (approved by U123 at creation)"
    assert [a.user for a in services.store.runs.get(occurrence.run.id).approvals] == [label]
    assert services.store.queue.depth() == 1
    approved = [e for e in services.store.audit.entries() if e.action == "approved"]
    assert [e.actor for e in approved] == [label]


def test_auto_with_a_changed_plan_asks_for_approval_with_the_diff(services: Services) -> None:
    schedule = add_auto(services, '"every day at 13:00" deploy v1.2.3 to staging')
    playbooks = services.config.playbooks
    index = next(i for i, p in enumerate(playbooks) if p.name == "deploy-staging")
    book = playbooks[index]
    smoke = Step(id="smoke_again", tool="smoke_test", depends_on=["smoke_staging"],
                 params={"environment": "staging", "version": "{version}"})
    steps = [s if s.id != "run_tests" else s.model_copy(update={"description": "changed"})
             for s in book.steps] + [smoke]
    playbooks[index] = book.model_copy(update={"steps": steps})
    occurrence = run_occurrence(services, schedule, at(2026, 3, 28, 13))
    assert occurrence.outcome is Outcome.AWAITING_APPROVAL
    assert occurrence.diff is not None
    assert [s.id for s in occurrence.diff.added] == ["smoke_again"]
    assert [c.id for c in occurrence.diff.changed] == ["run_tests"]
    assert "changed: run_tests; added: smoke_again" in occurrence.message
    assert services.store.runs.get(occurrence.run.id).status is RunStatus.AWAITING_APPROVAL  # type: ignore[union-attr]
    assert services.store.queue.depth() == 0


def test_auto_stops_running_alone_when_policy_changes(services: Services) -> None:
    schedule = add_auto(services, '"every day at 13:00" deploy v1.2.3 to staging')
    services.config.policy.environments["staging"].unattended = False
    occurrence = run_occurrence(services, schedule, at(2026, 3, 28, 13))
    assert occurrence.outcome is Outcome.AWAITING_APPROVAL
    assert "does not allow unattended runs in staging" in occurrence.message


def test_locked_environment_with_refuse_policy_skips(services: Services) -> None:
    schedule = add(services, '"every day at 13:00" deploy v1.2.3 to staging')
    services.store.locks.acquire(None, ["staging"], run_id="run-other", worker="w1", ttl=300)
    occurrence = run_occurrence(services, schedule, at(2026, 3, 28, 13))
    assert occurrence.outcome is Outcome.SKIPPED_LOCKED and occurrence.run is None
    assert occurrence.lock is not None and occurrence.lock.run_id == "run-other"
    assert "staging is locked by run-other" in occurrence.message
    assert services.store.runs.recent() == []
    assert [e.action for e in services.store.audit.entries()][-1] == "schedule_skipped_locked"


def test_locked_environment_with_wait_policy_delays(services: Services) -> None:
    services.config.policy.environments["staging"].lock = "wait"
    schedule = add_auto(services, '"every day at 13:00" deploy v1.2.3 to staging')
    services.store.locks.acquire(None, ["staging"], run_id="run-other", worker="w1", ttl=300)
    occurrence = run_occurrence(services, schedule, at(2026, 3, 28, 13))
    assert occurrence.outcome is Outcome.QUEUED and occurrence.delayed
    assert "it starts when that run finishes" in occurrence.message


# -- run now, pause, remove, rights ------------------------------------------------------------


def test_run_now_and_rights_on_auto_schedules(services: Services) -> None:
    schedule = add_auto(services, '"every day at 13:00" deploy v1.2.3 to staging')
    staging = services.config.policy.environments["staging"]
    staging.approvers.users, staging.approvers.anyone = ["U123"], False
    refused = cmd(services, f"run {schedule.id}", user="U-INTERN")
    assert not refused.ok and "only people who may approve staging" in refused.text
    assert not cmd(services, f"remove {schedule.id}", user="U-INTERN").ok
    assert cmd(services, f"pause {schedule.id}", user="U-INTERN").ok  # stopping is always fine
    ran = cmd(services, f"run {schedule.id}")
    assert ran.ok and ran.occurrence is not None and ran.occurrence.manual
    assert ran.occurrence.outcome is Outcome.QUEUED
    removed = cmd(services, f"remove {schedule.id}")
    assert removed.ok and removed.changed
    assert not cmd(services, f"pause {schedule.id}").ok
    assert cmd(services, "list").schedules == []


# -- APScheduler ---------------------------------------------------------------------------------


def test_apscheduler_jobs_follow_redis_and_wake_the_fire_logic(services: Services,
                                                               redis_url: str) -> None:
    first = add(services, '"every day at 13:00" status staging')
    recorder = Recorder()
    clock = [at(2026, 3, 28, 13, 0)]
    own = Store.connect(redis_url)
    replica = Scheduler(schedules=own.schedules, audit=own.audit, on_occurrence=recorder,
                        name="aps", clock=lambda: clock[0], sync_every=3600)
    replica.start()  # catches up at start: 13:00 is due on the controlled clock
    try:
        assert recorder.calls == [(first.id, at(2026, 3, 28, 13))]
        real_next = first.rule.next_after(datetime.now(UTC), first.zone)
        assert replica.jobs() == {first.id: real_next}
        second = add(services, '"every 6h" status staging')
        assert replica.sync() and set(replica.jobs()) == {first.id, second.id}
        assert not replica.sync()  # nothing changed since
        clock[0] = at(2026, 3, 28, 18, 0)
        # APScheduler's own thread runs the job once it is due (its API, not ours)
        assert replica._aps is not None
        replica._aps.modify_job(second.id, jobstore=JOBS, next_run_time=datetime.now(UTC))
        wait_until(lambda: (second.id, at(2026, 3, 28, 18)) in recorder.calls,
                   timeout=10, what="APScheduler to fire the job")
        cmd(services, f"pause {first.id}")
        replica.reload()
        assert set(replica.jobs()) == {second.id}
    finally:
        replica.shutdown()


def test_a_failing_callback_does_not_stop_other_schedules(services: Services,
                                                          redis_url: str) -> None:
    add(services, '"every day at 13:00" status staging')
    add(services, '"every day at 13:00" status production')
    seen: list[str] = []

    def flaky(schedule: Schedule, fire_time: datetime) -> None:
        seen.append(schedule.request)
        if schedule.request == "status staging":
            raise RuntimeError("Slack is down")

    scheduler(redis_url, flaky, name="r").tick(at(2026, 3, 28, 13))
    assert sorted(seen) == ["status production", "status staging"]


def test_store_keys_use_the_store_prefix(services: Services) -> None:
    schedule = add(services, '"every day at 13:00" status staging')
    keys = {k.decode() for k in stored_keys(services.store)}
    assert {f"dh:schedule:{schedule.id}", "dh:schedules", "dh:schedules:version"} <= keys
