"""A schedule occurrence is never lost when the replica that claimed it dies while planning:
a real ``deckhand schedules serve`` process is SIGKILLed while the OpenAI stand-in takes its
time to answer; another replica takes the occurrence over once, under the same idempotency
key (one run), or — when no attempt is left — records it missed, with the reason."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agents.config import Config
from agents.planning.prompt import plan_to_wire
from agents.requests.playbooks import PlaybookPlanner
from agents.schedules.keys import OccurrenceStatus, occurrence_run_id
from agents.schedules.model import Schedule
from agents.services import build_services
from agents.settings import Settings
from agents.store import Store
from bot.schedule_commands import handle_schedule_command
from bot.scheduler import Scheduler
from tests.fixtures.openai_standin import API_KEY, OpenAIStandin, Reply, completion
from tests.fixtures.polling import wait_until

REQUEST = "please bring staging up to v2.3.1"  # no playbook matches: the LLM plans it


def _schedule(store: Store, now: datetime) -> tuple[Schedule, datetime]:
    """A schedule whose one due occurrence was two minutes ago (and none comes soon)."""
    fire = (now - timedelta(minutes=2)).replace(second=0, microsecond=0)
    cron = f"{fire.minute} {fire.hour} {fire.day} {fire.month} *"
    schedule = Schedule(spec=cron, cron=cron, request=REQUEST, created_by="U1",
                        created_at=now - timedelta(minutes=10),
                        armed_at=now - timedelta(minutes=10))
    return store.schedules.create(schedule), fire


def _llm_env(standin: OpenAIStandin) -> dict[str, str]:
    return {"OPENAI_BASE_URL": standin.base_url, "OPENAI_API_KEY": API_KEY,
            "OPENAI_MODEL": "standin-model"}


def _wire(config: Config) -> str:
    plan = PlaybookPlanner(config.playbooks).plan("deploy v2.3.1 to staging", requested_by="x")
    return json.dumps(plan_to_wire(plan))


def _replica(config: Config, store: Store, standin: OpenAIStandin) -> Scheduler:
    services = build_services(config, Settings(**_llm_env(standin)), store=store)  # type: ignore[arg-type]
    return Scheduler.for_services(services, name="replica-b", lease=timedelta(seconds=5))


def test_a_replica_killed_while_planning_has_its_occurrence_taken_over_once(
        sample_config: Config, store: Store, redis_url: str, openai_standin: OpenAIStandin,
        tmp_path: Path) -> None:
    now = datetime.now(UTC)
    schedule, fire = _schedule(store, now)
    openai_standin.reply(Reply(status=200, body=completion(_wire(sample_config)), delay=60))
    openai_standin.reply_content(_wire(sample_config))  # the takeover's answer comes at once
    env = {**os.environ, "REDIS_URL": redis_url, "DECKHAND_SCHEDULE_LEASE": "1",
           **_llm_env(openai_standin)}
    with (tmp_path / "replica-a.log").open("w") as log:
        replica_a = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "schedules", "serve", "--config",
             str(sample_config.path)], env=env, stdout=log, stderr=log)
    try:
        book = store.schedules
        wait_until(lambda: openai_standin.requests and book.occurrence(schedule.id, fire),
                   timeout=30, what="replica A to claim the occurrence and ask the LLM")
        claimed = book.occurrence(schedule.id, fire)
        assert claimed is not None and claimed.status is OccurrenceStatus.PLANNING
        replica_a.send_signal(signal.SIGKILL)  # mid-planning: the LLM has not answered
    finally:
        replica_a.kill()
        replica_a.wait(10)

    replica_b = _replica(sample_config, store, openai_standin)
    fired = wait_until(lambda: replica_b.recover(datetime.now(UTC)), timeout=15,
                       what="replica A's lease to lapse and replica B to take over")
    assert [(f.schedule.id, f.fire_time) for f in fired] == [(schedule.id, fire)]
    assert replica_b.recover(datetime.now(UTC)) == []  # once

    runs = [r for r in store.runs.recent(limit=50) if r.meta.get("schedule") == schedule.id]
    assert [r.id for r in runs] == [occurrence_run_id(schedule.id, fire)]  # one run, its key
    state = book.occurrence(schedule.id, fire)
    assert state is not None and state.status is OccurrenceStatus.DONE
    assert (state.owner, state.attempt, state.previous_owner) == ("replica-b", 2, claimed.owner)
    audit = [e for e in store.audit.entries(limit=50) if e.details.get("schedule") == schedule.id]
    assert [e.action for e in audit].count("schedule_taken_over") == 1
    assert len(openai_standin.requests) == 2
    listed = handle_schedule_command(["list"], user="U1", user_groups=[], channel=None,
                                     services=build_services(sample_config, store=store),
                                     now=datetime.now(UTC))
    assert f"taken over by replica-b: {claimed.owner} stopped while handling it" in listed.text


def test_an_occurrence_whose_takeover_also_died_is_recorded_missed(
        sample_config: Config, store: Store) -> None:
    now = datetime.now(UTC)
    schedule, fire = _schedule(store, now)
    book, short = store.schedules, timedelta(milliseconds=50)
    assert book.claim_occurrence(schedule.id, fire, owner="replica-a", lease=short,
                                 ttl=timedelta(days=2))
    wait_until(lambda: book.abandoned_occurrences(), timeout=5, what="A's lease to lapse")
    taken = book.take_over(schedule.id, fire, owner="replica-b", lease=short)
    assert taken is not None and taken.attempt == 2  # and then B died too
    missed: list[datetime] = []
    replica_c = Scheduler(schedules=store.schedules, audit=store.audit,
                          on_occurrence=lambda s, t: None, name="replica-c",
                          on_missed=lambda s, first: missed.append(first))
    wait_until(lambda: book.abandoned_occurrences(), timeout=5, what="B's lease to lapse")
    assert replica_c.recover(now) == [] and missed == [fire]
    state = book.occurrence(schedule.id, fire)
    assert state is not None and state.status is OccurrenceStatus.MISSED
    assert "replica-b stopped while handling it" in (state.note or "")
    assert book.abandoned_occurrences() == []
    assert "⚠ last occurrence" in handle_schedule_command(
        ["list"], user="U1", user_groups=[], channel=None,
        services=build_services(sample_config, store=store), now=now).text
    audit = store.audit.entries(limit=20)
    assert any(e.action == "schedule_missed" and "2 attempt(s)" in e.details["reason"]
               for e in audit)
