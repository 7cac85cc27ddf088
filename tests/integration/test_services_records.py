"""Services, step 1 (docs/services.md), on a real redis-server: plans, runs and schedules
carry their service's name; the legacy service's records are written byte for byte as
before services and records written before load as it; plans keep their hash; ``check``
validates a two-service organisation; a reload reads the main config again."""

from __future__ import annotations

import json
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

from agents.config import Config
from agents.engine.reload import ConfigReload
from agents.org import load_org
from agents.plan.model import Plan
from agents.run.record import Run
from agents.schedules.model import Schedule
from agents.services import Services, build_services
from agents.settings import Settings
from agents.store import Store
from bot.cli import main
from bot.schedule_commands import handle_schedule_command
from tests.fixtures.sample import copy_examples

# Written by the code before services (main at fe05bc7), through the same calls as the
# store's: Plan.model_dump_json(), Run.record_json(), Schedule.model_dump_json().
OLD_PLAN = (
    '{"id":"plan-01jd3xq4k7m2v9d8e5t0b6c1na","version":2,"goal":"Deploy v2.3.1 to production",'
    '"steps":[{"id":"build","tool":"build","params":{"version":"v2.3.1"},"depends_on":[],'
    '"description":"build it","success":null},{"id":"deploy","tool":"deploy","params":'
    '{"environment":"production","version":"v2.3.1"},"depends_on":["build"],"description":"",'
    '"success":null}],"rollback":[{"id":"undo","tool":"rollback","params":{"environment":'
    '"production"},"description":""}],"requested_by":"U123","requested_via":"slack",'
    '"planner":{"name":"playbook deploy","model":null,"response_model":null,"prompt":null,'
    '"prompt_version":null,"temperature":null,"seed":null,"prompt_tokens":0,'
    '"completion_tokens":0,"latency_ms":1.5,"repairs":0,"answer":null,"note":"",'
    '"traceparent":null,"trace_root":null,"edited_by":null},"created_at":1760000000.0,'
    '"limit":[]}')
OLD_HASH = "25afcdd03d973896f0b5b295fff48d112ddacd2f93d990e95c41fee3a823cee7"
OLD_HASH_LIMITED = "6f82c6c466a2db54fc7509ac372714c7f10bce40dd8c8929caba889354f4c278"
"""The same plan with ``limit: [prod-1]``, hashed before services."""
OLD_RUN = (
    '{"id":"run-01jd3xq4k7m2v9d8e5t0b6c1nb","plan_id":"plan-01jd3xq4k7m2v9d8e5t0b6c1na",'
    '"plan_version":2,"plan_hash":"' + OLD_HASH + '","goal":"Deploy v2.3.1 to production",'
    '"unscoped":true,"requested_by":"U123","requested_via":"slack","steps":{"build":{"id":'
    '"build"},"deploy":{"id":"deploy"}},"rollback":{"undo":{"id":"undo"}},'
    '"created_at":1760000001.0,"plan_versions":[2]}')
OLD_SCHEDULE = (
    '{"id":"sch-01jd3xq4k7m2v9d8e5t0b6c1nc","spec":"every day at 02:00","cron":"0 2 * * *",'
    '"timezone":"UTC","request":"deploy v2.3.1 to staging","channel":"C1","created_by":"U123",'
    '"created_by_groups":[],"environments":[],"auto":false,"approved_plan_id":null,'
    '"approved_plan_hash":null,"paused":false,"created_at":"2026-01-01T00:00:00Z",'
    '"armed_at":"2026-01-01T00:00:00Z","last_fire":null,"last_coalesced":0,"fires":0,'
    '"last_problem":null,"plan_problem":null}')
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_records_written_before_services_load_as_the_legacy_service_and_keep_their_hash(
        store: Store, client: redis.Redis) -> None:
    plan_id, run_id, schedule_id = (json.loads(OLD_PLAN)["id"], json.loads(OLD_RUN)["id"],
                                    json.loads(OLD_SCHEDULE)["id"])
    client.set(store.keys.plan(plan_id, 2), OLD_PLAN)
    client.set(store.keys.plan_latest(plan_id), 2)
    client.set(store.keys.run(run_id), OLD_RUN)
    client.set(store.keys.schedule(schedule_id), OLD_SCHEDULE)
    plan, run = store.plans.get(plan_id), store.runs.get(run_id)
    schedule = store.schedules.get(schedule_id)
    assert (plan.service, run.service, schedule.service) == (None, None, None)
    assert plan.hash == run.plan_hash == OLD_HASH  # an approval in flight still matches
    assert plan.model_copy(update={"limit": ["prod-1"]}).hash == OLD_HASH_LIMITED
    # and written again, each is what the code before services wrote
    assert plan.model_dump_json() == OLD_PLAN
    assert run.record_json() == OLD_RUN
    assert schedule.model_dump_json() == OLD_SCHEDULE
    named = plan.model_copy(update={"service": "api"})
    assert named.hash not in (OLD_HASH, plan.model_copy(update={"service": "web"}).hash)


def _records(services: Services, client: redis.Redis) -> tuple[Plan, Run, Schedule,
                                                              list[dict[str, object]]]:
    """A plan, its run and a schedule made as the faces make them, and their raw JSON."""
    store = services.store
    plan = services.make_plan("deploy v2.3.1", requested_by="U1", face="cli")
    store.plans.save(plan)
    run = store.runs.create(Run.for_plan(plan, services.targets(plan)))
    reply = handle_schedule_command("add every day at 02:00 deploy v2.3.1 to staging",
                                    user="U1", user_groups=[], channel="C1",
                                    services=services, now=T0)
    assert reply.ok and reply.schedule is not None, reply.text
    raw = [json.loads(client.get(key) or "{}") for key in (
        store.keys.plan(plan.id, 1), store.keys.run(run.id),
        store.keys.schedule(reply.schedule.id))]
    return (store.plans.get(plan.id), store.runs.get(run.id),
            store.schedules.get(reply.schedule.id), raw)


def test_a_config_without_services_writes_records_without_a_service(
        sample_config: Config, store: Store, client: redis.Redis) -> None:
    services = build_services(sample_config, Settings(), store=store)
    plan, run, schedule, raw = _records(services, client)
    assert (sample_config.name, sample_config.key) == ("deckhand", None)
    assert (plan.service, run.service, schedule.service) == (None, None, None)
    assert all("service" not in record for record in raw)
    assert run.plan_hash == plan.hash == raw[1]["plan_hash"]


def test_one_service_under_services_names_itself_on_plans_runs_and_schedules(
        tmp_path: Path, store: Store, client: redis.Redis) -> None:
    copy_examples(tmp_path / "api")
    main_config = tmp_path / "deckhand.yml"
    main_config.write_text("services:\n  api: api/deckhand.yml\n")
    config = load_org(main_config).only()
    assert (config.name, config.key) == ("api", "api")
    services = build_services(config, Settings(), store=store)
    plan, run, schedule, raw = _records(services, client)
    assert (plan.service, run.service, schedule.service) == ("api", "api", "api")
    assert [record["service"] for record in raw] == ["api", "api", "api"]
    assert run.plan_hash == plan.hash != plan.model_copy(update={"service": None}).hash


TWO_SERVICES = """
services:
  api: api/deckhand.yml
  docs:
    tools:
      publish: {description: publish the docs, command: "echo published"}
    inventory:
      hosts: {docs-1: {connection: local, vars: {dir: "{state_dir}/docs-1"}}}
      environments: {site: {hosts: [docs-1]}}
"""


def test_check_validates_a_two_service_organisation(
        tmp_path: Path, redis_url: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("DECKHAND_STATE_DIR", str(tmp_path / "state"))
    copy_examples(tmp_path / "api")
    path = tmp_path / "deckhand.yml"
    path.write_text(textwrap.dedent(TWO_SERVICES))
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{path} is valid: 2 service(s): api, docs" in out
    assert f"  api ({tmp_path / 'api' / 'deckhand.yml'}): " in out
    assert f"  docs ({path}): 1 tools, 1 hosts, 1 environments, 0 playbooks" in out
    assert "note: schedules are checked against their service's config once" in out
    # a problem in the service file is named at its own file:line, with the others
    service = tmp_path / "api" / "deckhand.yml"
    service.write_text(service.read_text() + "audit: {}\n")
    path.write_text(textwrap.dedent(TWO_SERVICES) + "  api-too: api/deckhand.yml\n")
    assert main(["check", str(path)]) == 2
    out = capsys.readouterr().out
    lines = len(service.read_text().splitlines())
    assert f"{service}:{lines} audit: `audit` is organisation-wide" in out
    again = len(path.read_text().splitlines())
    assert f"{path}:{again} services.api-too: loads the same file as service 'api'" in out


def test_a_reload_reads_the_main_config_and_refuses_a_second_service(
        tmp_path: Path, store: Store) -> None:
    copy_examples(tmp_path / "api")
    path = tmp_path / "deckhand.yml"
    path.write_text("services:\n  api: api/deckhand.yml\n")
    services = build_services(load_org(path).only(), Settings(), store=store)
    reload = ConfigReload(services, actor="test")
    assert reload.path == path  # not the service's file, which alone is no whole config
    service = tmp_path / "api" / "deckhand.yml"
    service.write_text(service.read_text().replace("min_approvals: 1", "min_approvals: 2"))
    assert reload.reload()
    assert services.config.policy.for_env("production").min_approvals == 2
    assert services.config.key == "api"
    path.write_text(textwrap.dedent(TWO_SERVICES))
    assert not reload.reload()
    refused = [e for e in store.audit.entries(limit=50) if e.action == "config_reload_refused"]
    assert "2 services (api, docs)" in str(refused[-1].details)
    assert services.config.policy.for_env("production").min_approvals == 2
