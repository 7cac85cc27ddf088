"""The MCP face's desk over a real Redis: what a client may plan and request, and what it may not."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agents.config import load_config
from agents.errors import ApprovalRefused, FreezeRefused, NotFound, PlanInvalid
from agents.history.deploys import Deploy
from agents.ids import new_id
from agents.plan.model import Plan, Step
from agents.policy.freeze import FreezeWindow
from agents.policy.rules import Policy
from agents.run.record import Run, RunStatus
from agents.services import Services, build_services
from agents.store import Store
from bot.mcp.desk import Desk, Refused
from tests.fixtures.builders import NO_TARGETS
from tests.fixtures.polling import wait_until
from tests.fixtures.sample import copy_examples
from tests.fixtures.slack_world import POLICY
from tools.catalog import Catalog

AGENT = "mcp:pytest-agent"


@pytest.fixture
def services(tmp_path: Path, store: Store) -> Services:
    return build_services(load_config(copy_examples(tmp_path / "sample")), store=store)


class Poster:
    """Records what would be posted to Slack (the real poster is tested over the protocol)."""

    def __init__(self, store: Store, *, fail: int = 0) -> None:
        self.store, self.fail = store, fail
        self.posted: list[tuple[str, str]] = []

    def post_plan(self, plan: Plan, run: Run, *, channel: str) -> Run:
        if self.fail:
            self.fail -= 1
            raise ConnectionError("Slack is down")
        self.posted.append((plan.hash, channel))
        slack = {"channel": channel, "thread_ts": "1.1", "plan_ts": "1.1"}
        return self.store.runs.update(run.id, lambda r: r.meta.update(slack=slack))


def test_plan_lists_environments_and_hosts_and_is_remembered(services: Services) -> None:
    desk = Desk(services)
    view = desk.plan("deploy v2.3.1", requester=AGENT)
    assert view.accepted and view.plan is not None and view.plan_hash == view.plan.hash
    assert view.environments == ["staging", "production"]
    assert set(view.hosts) == {"local", "staging-1", "prod-1", "prod-2"}  # local: build, notify
    assert services.store.proposals.get(view.plan_hash, AGENT).plan == view.plan
    assert [e.action for e in services.store.audit.entries()] == ["mcp_planned"]


def test_an_unplannable_or_invalid_request_is_refused_with_its_problems(services: Services) -> None:
    desk = Desk(services)
    view = desk.plan("drop the database", requester=AGENT)
    assert not view.accepted and view.plan_hash is None and "deploy v2.3.1" in view.problems[0]

    invalid = Plan(goal="sneak", steps=[Step(id="a", tool="rm_rf"),
                                        Step(id="b", tool="deploy", params={"environment": "moon"})])
    services.planner = FixedPlanner(invalid)
    view = desk.plan("anything", requester=AGENT)
    assert not view.accepted
    assert any("unknown tool 'rm_rf'" in p for p in view.problems)
    assert any("step b:" in p for p in view.problems)
    assert [e.action for e in services.store.audit.entries()] == ["plan_refused"] * 2


def test_request_stores_a_run_awaiting_approval_once(services: Services) -> None:
    poster = Poster(services.store)
    desk = Desk(services, poster=poster)
    view = desk.plan("deploy v2.3.1 to staging", requester=AGENT)
    assert view.plan_hash is not None
    first = desk.request_deploy(view.plan_hash, "CDEPLOY", requester=AGENT, client="pytest-agent")
    again = desk.request_deploy(view.plan_hash, "CDEPLOY", requester=AGENT, client="pytest-agent")
    assert (first.already_requested, again.already_requested) == (False, True)
    assert again.run_id == first.run_id and poster.posted == [(view.plan_hash, "CDEPLOY")]
    run = services.store.runs.get(first.run_id)
    assert run.status is RunStatus.AWAITING_APPROVAL and run.requested_by == AGENT
    assert run.plan_hash == view.plan_hash and run.approvals == []
    assert len(services.store.runs.recent()) == 1
    planned = [e for e in services.store.audit.entries() if e.action == "planned"]
    assert planned[0].actor == AGENT and planned[0].details["via"] == "mcp"


def test_a_request_whose_slack_post_failed_is_posted_on_retry(services: Services) -> None:
    poster = Poster(services.store, fail=1)
    desk = Desk(services, poster=poster)
    view = desk.plan("deploy v2.3.1 to staging", requester=AGENT)
    assert view.plan_hash is not None
    with pytest.raises(ConnectionError):
        desk.request_deploy(view.plan_hash, "CDEPLOY", requester=AGENT, client="x")
    retried = desk.request_deploy(view.plan_hash, "CDEPLOY", requester=AGENT, client="x")
    assert retried.already_requested and retried.slack_channel == "CDEPLOY"
    assert poster.posted == [(view.plan_hash, "CDEPLOY")] and len(services.store.runs.recent()) == 1


def test_an_http_user_is_held_to_the_same_policy(services: Services) -> None:
    """A request made as UBOB cannot be approved by UBOB where self-approval is off."""
    services.config.policy = Policy.model_validate(POLICY)
    desk = Desk(services)
    view = desk.plan("deploy v2.3.1", requester="UBOB")
    assert view.plan_hash is not None
    run = services.store.runs.get(desk.request_deploy(view.plan_hash, None, requester="UBOB",
                                                      client="x").run_id)
    with pytest.raises(ApprovalRefused, match="your own request"):
        services.store.runs.approve(run.id, face="cli", user="UBOB", plan_version=run.plan_version,
                                    plan_hash=run.plan_hash, policy=services.config.policy)


def test_a_taken_run_id_is_replaced_and_the_plan_stays_bound_to_the_real_run(
        tmp_path: Path, redis_url: str, store: Store) -> None:
    given = iter(["run-taken", "run-fresh"])
    store = Store.connect(redis_url, ids=lambda kind: next(given) if kind == "run"
                          else new_id(kind))
    services = build_services(load_config(copy_examples(tmp_path / "ids")), store=store)
    desk = Desk(services)
    view = desk.plan("deploy v2.3.1 to staging", requester=AGENT)
    assert view.plan is not None and view.plan_hash is not None
    store.runs.create(Run.for_plan(view.plan, NO_TARGETS, id="run-taken"))
    first = desk.request_deploy(view.plan_hash, None, requester=AGENT, client="x")
    assert first.run_id == "run-fresh"
    assert store.proposals.get(view.plan_hash, AGENT).run_id == "run-fresh"
    again = desk.request_deploy(view.plan_hash, None, requester=AGENT, client="x")
    assert again.already_requested and again.run_id == "run-fresh"
    assert store.runs.get("run-fresh").requested_by == AGENT


def test_unknown_changed_or_foreign_hashes_are_refused(services: Services) -> None:
    desk = Desk(services)
    view = desk.plan("deploy v2.3.1", requester=AGENT)
    assert view.plan is not None and view.plan_hash is not None
    changed = view.plan.model_copy(update={"goal": "Deploy v6.6.6 to production"})
    for plan_hash, requester in [("0" * 64, AGENT), (changed.hash, AGENT),
                                 (view.plan_hash, "mcp:someone-else")]:
        with pytest.raises(NotFound, match="call `plan`"):
            desk.request_deploy(plan_hash, None, requester=requester, client="x")
    assert services.store.runs.recent() == []
    refused = [e for e in services.store.audit.entries() if e.action == "mcp_request_refused"]
    assert [e.actor for e in refused] == [AGENT, AGENT, "mcp:someone-else"]


def test_a_plan_the_current_config_refuses_is_not_requested(services: Services) -> None:
    desk = Desk(services)
    view = desk.plan("deploy v2.3.1 to staging", requester=AGENT)
    assert view.plan_hash is not None
    tools = {k: v for k, v in services.config.catalog.tools.items() if k != "smoke_test"}
    services.config = dataclasses.replace(services.config, catalog=Catalog(tools))
    with pytest.raises(PlanInvalid, match="unknown tool 'smoke_test'"):
        desk.request_deploy(view.plan_hash, None, requester=AGENT, client="x")
    assert services.store.runs.recent() == []


def test_no_plan_or_request_into_a_freeze(services: Services) -> None:
    desk = Desk(services)
    view = desk.plan("deploy v2.3.1", requester=AGENT)
    assert view.plan_hash is not None
    services.config.policy.freeze = [FreezeWindow(
        environments=["production"], reason="launch week",
        start=datetime(2000, 1, 1, tzinfo=UTC), end=datetime(2999, 1, 1, tzinfo=UTC))]
    with pytest.raises(FreezeRefused, match="launch week"):
        desk.request_deploy(view.plan_hash, None, requester=AGENT, client="x")
    refused = desk.plan("deploy v2.3.1", requester=AGENT)
    assert not refused.accepted and "launch week" in refused.problems[0]
    assert services.store.runs.recent() == []


def test_a_remembered_plan_expires(services: Services) -> None:
    desk = Desk(services, plan_ttl=0.05)
    view = desk.plan("deploy v2.3.1", requester=AGENT)
    assert view.plan_hash is not None
    key = services.store.keys.proposal(view.plan_hash, AGENT)
    wait_until(lambda: services.store.r.get(key) is None, timeout=5, what="the plan to expire")
    with pytest.raises(NotFound):
        desk.request_deploy(view.plan_hash, None, requester=AGENT, client="x")


def test_with_slack_a_channel_is_required(services: Services) -> None:
    desk = Desk(services, poster=Poster(services.store))
    view = desk.plan("deploy v2.3.1", requester=AGENT)
    assert view.plan_hash is not None
    with pytest.raises(Refused, match="channel"):
        desk.request_deploy(view.plan_hash, None, requester=AGENT, client="x")


def test_catalog_hints_come_from_tools_yml(services: Services) -> None:
    view = Desk(services).catalog()
    tools = {t.name: t for t in view.tools}
    assert tools["deploy"].hints.destructive and not tools["deploy"].hints.read_only
    assert tools["status"].hints.read_only and not tools["status"].hints.destructive
    assert {e.name: e.hosts for e in view.environments}["production"] == ["prod-1", "prod-2"]


def test_where_shows_locks_runs_in_flight_and_the_last_success(services: Services) -> None:
    store, desk = services.store, Desk(services)
    shipped = _requested(desk, "deploy v2.3.1 to staging")
    store.runs.update(shipped, _succeed)
    store.history.record(None, shipped, [Deploy(
        run_id=shipped, environment="staging", version="v2.3.1", outcome=RunStatus.SUCCEEDED,
        requested_by=AGENT, started_at=1.0, finished_at=2.0, hosts={"staging-1": "v2.3.1"})])
    waiting = _requested(desk, "deploy v2.4.0")
    store.locks.acquire(None, ["production"], run_id=waiting, worker="w1", ttl=60)
    report = {e.environment: e for e in desk.where().environments}
    staging, production = report["staging"], report["production"]
    assert staging.last_success is not None and staging.last_success.run_id == shipped
    assert staging.lock is None and [r.run_id for r in staging.active] == [waiting]
    assert staging.deployed.version == "v2.3.1"
    assert staging.deployed.hosts["staging-1"].version == "v2.3.1"
    assert production.lock is not None and production.lock.run_id == waiting
    assert production.last_success is None and production.hosts == ["prod-1", "prod-2"]
    assert production.deployed.version is None  # nothing recorded in deploy history yet


def _succeed(run: Run) -> None:
    for status in (RunStatus.APPROVED, RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.SUCCEEDED):
        run.move(status)
    run.finished_at = run.created_at + 1


def _requested(desk: Desk, request: str) -> str:
    view = desk.plan(request, requester=AGENT)
    assert view.plan_hash is not None
    return desk.request_deploy(view.plan_hash, None, requester=AGENT, client="x").run_id


class FixedPlanner:
    """Returns one fixed plan, to reach validation with a plan no playbook would write."""

    def __init__(self, plan: Plan):
        self._plan = plan

    def plan(self, request: str, *, requested_by: str) -> Plan:
        return self._plan.model_copy(update={"requested_by": requested_by})

    def modify(self, plan: Plan, instruction: str, *, requested_by: str) -> Plan:
        raise NotImplementedError


def test_request_deploys_destructive_hint_follows_a_reloaded_tools_yml(
        services: Services) -> None:
    """A reload that removes (or adds) every mutating tool changes what request_deploy may
    lead to; the hint the client's host reads follows it (``DeskServer.add_request_tool``,
    run after each SIGHUP)."""
    import anyio

    from bot.mcp.server import build_server

    server = build_server(Desk(services))

    def hint() -> bool | None:
        tools = anyio.run(server.list_tools)
        (request,) = [t for t in tools if t.name == "request_deploy"]
        assert request.annotations is not None
        return request.annotations.destructive_hint

    assert hint() is True
    tools = {n: t.model_copy(update={"mutates": False})
             for n, t in services.config.catalog.tools.items()}
    quiet = dataclasses.replace(services.config, catalog=Catalog(tools))
    services.swap(build_services(quiet, store=services.store))  # as a reload does
    server.add_request_tool()
    assert hint() is False
    assert len([t for t in anyio.run(server.list_tools) if t.name == "request_deploy"]) == 1
