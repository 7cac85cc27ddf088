"""Operator experience end to end: App Home, plan diffs in Slack, the timeline upload,
health checks and Prometheus metrics, through the running bot, a real Redis and the stand-in.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agents.config import Config
from agents.ids import short_id
from agents.plan.model import Plan
from agents.planning.planner import CompositePlanner, LLMPlanner, RetryPolicy
from agents.planning.prompt import plan_to_wire
from agents.policy.rules import Policy
from agents.requests.playbooks import PlaybookPlanner
from agents.run.record import Event, EventKind, Run, RunStatus
from agents.services import build_services
from agents.settings import Settings
from agents.store import Store
from bot.cli import main as cli_main
from bot.metrics import Metrics
from bot.slack import blocks as bk
from bot.slack.home_blocks import MAX_HOME_BLOCKS, HomeData, home_view
from tests.fixtures.openai_standin import API_KEY, OpenAIStandin
from tests.fixtures.polling import wait_until
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.sample import free_port
from tests.fixtures.slack_standin import SlackStandin, check_limits
from tests.fixtures.slack_world import SlackWorld, button, start_world

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# -- helpers ---------------------------------------------------------------------------------


def _running_run(world: SlackWorld) -> Run:
    """A run mid-way (first step done, second running) holding the staging lock.

    Built from the executor's own events, stored without a queue entry so no worker takes it.
    """
    plan = world.runtime.services.make_plan("deploy v2.3.2 to staging", requested_by="UCAROL", face="cli")
    world.store.plans.save(plan)
    run = Run.for_plan(plan, world.runtime.services.targets(plan), status=RunStatus.RUNNING,
                       worker="w-test")
    first, second = plan.steps[0].id, plan.steps[1].id
    for event in (Event(kind=EventKind.RUN_STARTED, run_id=run.id),
                  Event(kind=EventKind.STEP_STARTED, run_id=run.id, step_id=first),
                  Event(kind=EventKind.STEP_FINISHED, run_id=run.id, step_id=first,
                        status="succeeded"),
                  Event(kind=EventKind.STEP_STARTED, run_id=run.id, step_id=second)):
        run.apply(event)
    world.store.runs.create(run)
    # a live lease, or the embedded worker's reconciler re-queues it and runs it to its end
    assert world.store.leases.heartbeat(run.id, worker="w-test", lease=120)
    world.store.locks.acquire(None, ["staging"], run_id=run.id, worker="w-test", ttl=120)
    return run


def _homes(world: SlackWorld, user: str) -> list[Any]:
    return [c for c in world.standin.of("views.publish") if c.payload.get("user_id") == user]


def _metric(text: str, name: str, **labels: str) -> float | None:
    """The value of sample ``name`` with exactly these labels in an exposition, or None."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None


def _wait_metric(world: SlackWorld, name: str, **labels: str) -> Callable[[], float | None]:
    def value() -> float | None:
        return _metric(world.get("/metrics")[1], name, **labels)
    world.standin.wait_for(lambda: value() is not None, what=f"metric {name}{labels}")
    return value


def _approved_staging_run(world: SlackWorld) -> Run:
    world.deploy("v2.3.1 to staging")
    value = button(world.plan_message(), "approve")
    world.click("approve", value, user="UBOB")
    return world.wait_run(bk.parse_button_value(value)[0])


def _summary_posted(world: SlackWorld) -> Any:
    return world.standin.wait_for(
        lambda: [c for c in world.standin.of("chat.postMessage")
                 if "SUCCEEDED" in c.text_of_blocks()], what="the summary")


# -- App Home --------------------------------------------------------------------------------


def test_home_shows_approvals_running_runs_locks_and_schedules(world: SlackWorld) -> None:
    world.runtime.bot.home.interval = 0.05
    world.deploy("v2.3.1")  # staging and production: UBOB may approve, UALICE may not (own)
    approve_value = button(world.plan_message(), "approve")
    pending_id = bk.parse_button_value(approve_value)[0]
    running = _running_run(world)
    world.signer.command("/deckhand", 'schedule add "every day at 09:00" deploy v2.3.1 to '
                         'staging --tz Europe/Berlin', user="UBOB",
                         response_url=f"{world.standin.url}/response/s")
    world.standin.wait_for(lambda: world.standin.responses, what="the schedule reply")
    (schedule,) = world.store.schedules.all()

    assert world.open_home("UBOB")[0] == 200
    home = world.standin.wait_for(lambda: _homes(world, "UBOB"), what="UBOB's Home")[0]
    text = home.text_of_blocks()
    assert len(home.blocks) <= MAX_HOME_BLOCKS and world.standin.violations == []
    assert "Waiting for your approval* (1)" in text
    assert button(home, "approve") == approve_value  # the plan message's button, same value
    assert "In progress* (1)" in text and f"`{short_id(running.id)}` *running*" in text
    assert f"1/{len(running.steps)} steps" in text
    assert f"now: `{list(running.steps)[1]}`" in text
    assert f"locked by `{short_id(running.id)}` (worker w-test" in text and "🟢 *production* — free" in text
    assert f"`{short_id(schedule.id)}` every day at 09:00 → deploy v2.3.1 to staging · next " in text
    assert "CET" in text or "CEST" in text  # the schedule's own time zone

    world.open_home("UALICE")  # the requester may not approve her own production deploy
    alice = world.standin.wait_for(lambda: _homes(world, "UALICE"), what="UALICE's Home")[0]
    assert "Waiting for your approval* (0)" in alice.text_of_blocks()
    mine = alice.text_of_blocks().split("Your plans waiting for approval* (1)")[1]
    assert f"`{short_id(pending_id)}`" in mine.split("In progress")[0]  # her own, waiting
    assert "needs 2 more approvals from" in mine

    world.click_in_home("approve", approve_value, user="UBOB")  # goes through `approve`
    world.standin.wait_for(lambda: [a.user for a in world.store.runs.get(pending_id).approvals]
                           == ["UBOB"], what="UBOB's approval")
    refreshed = world.standin.wait_for(
        lambda: [c for c in _homes(world, "UBOB")[1:]
                 if "Waiting for your approval* (0)" in c.text_of_blocks()],
        what="UBOB's Home refreshed after the approval")
    assert "Nothing needs your approval" in refreshed[0].text_of_blocks()
    world.standin.wait_for(lambda: any("1 more approval" in str(c.payload.get("text"))
                                       for c in world.standin.of("chat.postMessage")),
                           what="the thread to hear about it too")
    assert world.standin.violations == []


def test_home_refusal_from_the_home_tab_is_a_direct_message(world: SlackWorld) -> None:
    world.deploy("v2.3.1")
    value = button(world.plan_message(), "approve")
    world.click_in_home("approve", value, user="UMALLORY")
    dm = world.standin.wait_for(lambda: [c for c in world.standin.of("chat.postMessage")
                                         if c.payload.get("channel") == "UMALLORY"],
                                what="the refusal by DM")
    assert "not allowed" in dm[0].payload["text"]


def test_long_home_lists_are_trimmed_within_limits(world: SlackWorld) -> None:
    services = world.runtime.services
    plan = services.make_plan("deploy v2.3.1", requested_by="UALICE", face="cli")
    pending = [Run.for_plan(plan, services.targets(plan)) for _ in range(40)]
    active = [Run.for_plan(plan, services.targets(plan), status=RunStatus.RUNNING) for _ in range(30)]
    done = [Run.for_plan(plan, services.targets(plan), status=RunStatus.SUCCEEDED) for _ in range(30)]
    data = HomeData(user="UBOB", now=1.7e9, pending=pending, active=active, recent=done,
                    environments=[f"env{i}" for i in range(60)], schedules=None)
    view = home_view(data, world.config.policy)
    text = json.dumps(view, ensure_ascii=False)
    assert len(view["blocks"]) <= MAX_HOME_BLOCKS
    assert "…and 28 more — see `/deckhand runs` or `deckhand runs`" in text
    assert "…and 20 more — see `deckhand runs`" in text  # in progress and recent
    assert "…and 35 more" in text  # environments
    assert "Schedules are not available" in text
    world.runtime.bot.client.views_publish(user_id="UBOB", view=view)
    assert world.standin.violations == []


def test_new_plan_version_message_shows_what_changed(world: SlackWorld) -> None:
    world.deploy("v2.3.1 to staging")
    run_id = bk.parse_button_value(button(world.plan_message(), "approve"))[0]
    plan = world.store.plans.get(world.store.runs.get(run_id).plan_id)
    body = plan.model_dump(include={"goal", "steps", "rollback"}, mode="json")
    deploy = next(s for s in body["steps"] if s["tool"] == "deploy")
    deploy["params"]["version"] = "v2.3.2"
    meta = json.dumps({"run": run_id, "v": 1, "channel": "CDEPLOY"})
    edited = json.dumps(body)  # JSON is YAML
    assert world.submit("modify_submit", meta, {"yaml": edited}, user="UBOB")[0] == 200
    second = world.plan_message(1).text_of_blocks()
    assert "*Changes since v1* (1 changed)" in second
    assert f"`{deploy['id']}` version: v2.3.1 → v2.3.2" in second
    # once approved, the message is edited in place and still shows the change
    world.click("approve", button(world.plan_message(1), "approve"), user="UBOB")
    world.wait_run(run_id)
    edits = world.standin.wait_for(lambda: [c for c in world.standin.of("chat.update")
                                            if "Approved by" in c.text_of_blocks()])
    assert "Changes since v1" in edits[-1].text_of_blocks()


# -- the timeline picture ----------------------------------------------------------------------


def test_finished_run_uploads_its_timeline_into_the_thread(
        world: SlackWorld, tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _approved_staging_run(world)
    assert run.status is RunStatus.SUCCEEDED
    shared = world.standin.wait_for(lambda: world.standin.shared, what="the upload")[0]
    slack = world.store.runs.get(run.id).meta["slack"]
    assert (shared["channel_id"], shared["thread_ts"]) == (slack["channel"], slack["thread_ts"])
    (file_id,) = [f["id"] for f in shared["files"]]
    png = world.standin.uploads[file_id]
    assert png.startswith(PNG_MAGIC)
    calls = [c.method for c in world.standin.calls]
    summary = next(i for i, c in enumerate(world.standin.calls)
                   if "SUCCEEDED" in c.text_of_blocks())
    assert summary < calls.index("files.getUploadURLExternal")  # the summary came first
    assert world.standin.violations == []

    # the same picture from the terminal
    out = tmp_path / "timeline.png"
    monkeypatch.setenv("REDIS_URL", redis_url)
    code = cli_main(["runs", "show", run.id, "--timeline", str(out),
                     "--config", str(world.config.path)])
    assert code == 0 and out.read_bytes().startswith(PNG_MAGIC)
    assert out.read_bytes()[:24] == png[:24]  # same header: same size as the uploaded one


def test_failed_upload_never_holds_up_the_summary(world: SlackWorld) -> None:
    world.standin.fail_uploads = True  # the upload_url answers 500
    run = _approved_staging_run(world)
    assert run.status is RunStatus.SUCCEEDED
    _summary_posted(world)
    failed = _wait_metric(world, "deckhand_timeline_uploads_total", result="failed")
    world.standin.wait_for(lambda: failed() == 1.0, what="the failed upload to be counted")
    assert world.standin.shared == [] and world.standin.of("files.getUploadURLExternal")
    status_edits = [c for c in world.standin.of("chat.update")
                    if "Run `" in c.text_of_blocks()]
    assert status_edits and "succeeded" in status_edits[-1].text_of_blocks()


# -- health and metrics ----------------------------------------------------------------------


def test_metrics_after_a_run(world: SlackWorld) -> None:
    world.standin.rate_limit("chat.update", times=1)
    world.standin.fail("files.getUploadURLExternal", "internal_error")
    run = _approved_staging_run(world)
    plan = world.store.plans.get(run.plan_id, run.plan_version)
    _summary_posted(world)  # an API error in the upload did not stop the summary

    _wait_metric(world, "deckhand_timeline_uploads_total", result="failed")
    world.standin.wait_for(lambda: _metric(world.get("/metrics")[1], "deckhand_queue_depth",
                                           state="in_progress") == 0.0, what="the queue ack")
    text = world.get("/metrics")[1]
    assert _metric(text, "deckhand_runs_total", outcome="succeeded", service="") == 1.0
    for tool in {s.tool for s in plan.steps}:
        count = _metric(text, "deckhand_step_duration_seconds_count", tool=tool,
                        phase="plan", status="succeeded")
        assert count is not None and count >= 1, tool
    assert _metric(text, "deckhand_run_start_delay_seconds_count") == 1.0
    planner = plan.planner.name  # e.g. "playbook deploy_staging"
    assert _metric(text, "deckhand_plans_total", planner=planner, service="") == 1.0
    assert _metric(text, "deckhand_plan_latency_seconds_count", planner=planner) == 1.0
    assert _metric(text, "deckhand_queue_depth", state="waiting") == 0.0
    assert _metric(text, "deckhand_queue_depth", state="in_progress") == 0.0
    assert _metric(text, "deckhand_redis_up") == 1.0
    assert _metric(text, "deckhand_slack_rate_limited_total", method="chat.update") == 1.0
    assert _metric(text, "deckhand_slack_api_errors_total", method="files.getUploadURLExternal",
                   error="internal_error") == 1.0


def test_llm_tokens_and_latency_are_counted(sample_config: Config,
                                            openai_standin: OpenAIStandin) -> None:
    wire = plan_to_wire(PlaybookPlanner(sample_config.playbooks).plan(
        "deploy v2.3.1 to staging", requested_by="gold"))
    openai_standin.reply_json(wire, prompt_tokens=1200, completion_tokens=300)
    client = openai.OpenAI(api_key=API_KEY, base_url=openai_standin.base_url, max_retries=0)
    metrics = Metrics()
    planner = metrics.observe_planner(LLMPlanner(sample_config, client=client,
                                                 model="standin-model"))
    plan: Plan = planner.plan("put v2.3.1 on staging", requested_by="U1")
    assert plan.planner.model == "standin-model"
    text = _exposition(metrics)
    assert _metric(text, "deckhand_llm_tokens_total", model="standin-model",
                   kind="prompt") == 1200.0
    assert _metric(text, "deckhand_llm_tokens_total", model="standin-model",
                   kind="completion") == 300.0
    assert _metric(text, "deckhand_plan_latency_seconds_count", planner="llm") == 1.0


def test_llm_retries_are_counted_by_model_and_reason(sample_config: Config,
                                                     openai_standin: OpenAIStandin) -> None:
    playbooks = PlaybookPlanner(sample_config.playbooks)
    request = "get v2.3.1 onto the staging boxes after lunch"
    assert playbooks.match(request) is None  # the model plans it
    openai_standin.reply_error(429, "slow down", headers={"retry-after": "0"})
    openai_standin.reply_error(503, "overloaded")
    openai_standin.reply_json(plan_to_wire(playbooks.plan("deploy v2.3.1 to staging",
                                                          requested_by="gold")))
    client = openai.OpenAI(api_key=API_KEY, base_url=openai_standin.base_url, max_retries=0)
    sleeps: list[float] = []
    llm = LLMPlanner(sample_config, client=client, model="standin-model",
                     retry=RetryPolicy(attempts=3, base_delay=0.25, sleep=sleeps.append))
    metrics = Metrics()
    planner = metrics.observe_planner(CompositePlanner(playbooks, llm))

    planner.plan(request, requested_by="U1")

    assert sleeps == [0.0, 0.5] and len(openai_standin.requests) == 3
    text = _exposition(metrics)
    assert _metric(text, "deckhand_llm_retries_total", model="standin-model",
                   reason="rate_limited") == 1.0
    assert _metric(text, "deckhand_llm_retries_total", model="standin-model",
                   reason="server_error") == 1.0
    assert _metric(text, "deckhand_llm_retries_total", model="standin-model",
                   reason="timeout") is None


def _exposition(metrics: Metrics) -> str:
    from prometheus_client import generate_latest

    return generate_latest(metrics.registry).decode()


def test_health_and_readiness_follow_redis(sample_config: Config, own_redis: RedisServer,
                                           slack_standin: SlackStandin) -> None:
    store = Store.connect(own_redis.url)
    world = start_world(sample_config, store, slack_standin)
    try:
        assert world.get_json("/healthz") == (200, {"ok": True})
        assert world.get_json("/readyz") == (200, {"ok": True})
        own_redis.stop()
        status, body = world.get_json("/readyz")
        assert status == 503 and body["ok"] is False and "Redis" in body["redis"]
        assert world.get_json("/healthz") == (200, {"ok": True})  # the process is still up
        assert _metric(world.get("/metrics")[1], "deckhand_redis_up") == 0.0
        own_redis.start()
        world.standin.wait_for(lambda: world.get("/readyz")[0] == 200, what="ready again")
    finally:
        world.runtime.stop()


def test_worker_process_serves_metrics_and_logs_json(sample_config: Config, store: Store,
                                                     redis_url: str, tmp_path: Path) -> None:
    services = build_services(sample_config, Settings(), store=store)
    plan = services.make_plan("status staging", requested_by="ann", face="cli")
    store.plans.save(plan)
    run = store.runs.create(Run.for_plan(plan, services.targets(plan)))
    store.runs.approve(run.id, face="cli", user="ann", plan_version=1, plan_hash=plan.hash, policy=Policy())
    port = free_port()
    stderr = tmp_path / "worker.log"
    with stderr.open("w") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "worker", "--config", str(sample_config.path),
             "--metrics-port", str(port), "--metrics-host", "127.0.0.1", "--log-format",
             "json"], env={**os.environ, "REDIS_URL": redis_url}, stderr=log,
            stdout=subprocess.DEVNULL)
        try:
            text = _poll_worker_metrics(port, store, run.id)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(30)
    finished = store.runs.get(run.id).status.value
    assert _metric(text, "deckhand_runs_total", outcome=finished, service="") == 1.0
    assert _metric(text, "deckhand_redis_up") == 1.0
    lines = [json.loads(line) for line in stderr.read_text().splitlines() if line.strip()]
    assert lines and all({"ts", "level", "logger", "message", "run_id", "plan_id"} <= set(x)
                         for x in lines)
    about_run = [x for x in lines if x["run_id"] == run.id]
    assert about_run and {x["plan_id"] for x in about_run} == {plan.id}
    assert any(f"run {run.id} ended {finished}" == x["message"] for x in about_run)


def _poll_worker_metrics(port: int, store: Store, run_id: str) -> str:
    def scrape() -> str | None:
        if not store.runs.get(run_id).status.terminal:
            return None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                body = r.read().decode()
        except OSError:
            return None
        return body if "deckhand_runs_total{" in body else None

    return str(wait_until(scrape, timeout=60, what="the worker's metrics"))




def test_home_view_limits_hold_for_an_empty_home() -> None:
    view = home_view(HomeData(user="U1", now=1.7e9, schedules=[]), Policy())
    assert check_limits("views.publish", {"view": view}) == []
    text = json.dumps(view, ensure_ascii=False)
    assert "Nothing needs your approval" in text and "Nothing is running" in text
