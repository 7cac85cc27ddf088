"""Deployment history end to end: the sample app on local hosts, a real redis-server (kept
across a restart), a real git repository, the terminal flow and the CLI."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from rich.console import Console

from agents.config import Config
from agents.errors import PlanInvalid
from agents.history.deploys import DAY, Deploy
from agents.history.facts import DeployFact, fact_member
from agents.run.record import RunStatus
from agents.services import Services, build_services
from agents.store import Store
from bot.cli import main
from bot.cli.demo import probe
from bot.slack import blocks as bk
from bot.terminal.console import ConsoleFlow
from tests.fixtures.polling import wait_until
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.slack_world import SlackWorld, button
from tests.unit.test_history import make_repo


def _deploy(services: Services, request: str) -> RunStatus:
    console = Console(record=True, width=160)
    run = ConsoleFlow(services, console, user="alice",
                      confirm=lambda word: word).handle(request, yes=True)
    assert run is not None, console.export_text()
    return run.status


def _live(config: Config, prefix: str) -> set[str]:
    return {p.body for p in probe(config) if p.host.startswith(prefix)}


def test_where_history_and_rollback_to_a_version(sample_config: Config, own_redis: RedisServer,
                                                 tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    repo = make_repo(tmp_path / "app", {"v2.3.1": ["one"], "v2.4.0": ["two", "three"],
                                        "v2.4.0-broken": ["break"]})
    sample_config.history = sample_config.history.model_copy(update={"repo": str(repo)})
    services = build_services(sample_config, store=Store.connect(own_redis.url))
    assert _deploy(services, "deploy v2.3.1") is RunStatus.SUCCEEDED
    changes = services.changelog(services.make_plan("deploy v2.4.0", requested_by="alice", face="cli"))
    assert changes[0].startswith("📜 v2.4.0 ships 2 commit(s) since v2.3.1 (live in production)")
    assert _deploy(services, "deploy v2.4.0") is RunStatus.SUCCEEDED
    assert _deploy(services, "deploy v2.4.0-broken") is RunStatus.ROLLED_BACK

    own_redis.restart()  # history is in Redis (AOF), not in this process
    store = Store.connect(own_redis.url)
    production = store.history.current(None, "production")
    assert production.version == "v2.4.0" and production.drift == {}
    assert set(production.hosts) == {"prod-1", "prod-2"}
    assert store.history.current(None, "staging").version == "v2.4.0"  # the broken one rolled back
    assert _live(sample_config, "staging") == {"v2.4.0"}  # ...and the host agrees
    staging = store.history.recent(None, "staging")
    assert [(d.version, d.outcome) for d in staging] == [
        ("v2.4.0-broken", RunStatus.ROLLED_BACK), ("v2.4.0", RunStatus.SUCCEEDED),
        ("v2.3.1", RunStatus.SUCCEEDED)]

    services = build_services(sample_config, store=store)
    with pytest.raises(PlanInvalid, match=r"v2\.2\.0 was never live in production.*"
                                          r"v2\.4\.0, v2\.3\.1"):
        services.make_plan("roll back production to v2.2.0", requested_by="alice", face="cli")
    assert _deploy(services, "roll back production to v2.3.1") is RunStatus.SUCCEEDED
    assert _live(sample_config, "prod") == {"v2.3.1"}
    assert store.history.current(None, "production").version == "v2.3.1"
    assert store.history.recent(None, "production")[0].rollback_of_version

    monkeypatch.setenv("REDIS_URL", own_redis.url)
    assert main(["where", "--config", str(sample_config.path)]) == 0
    assert main(["history", "production", "--config", str(sample_config.path)]) == 0
    assert main(["stats", "production", "--config", str(sample_config.path)]) == 0
    out = capsys.readouterr().out
    assert "v2.3.1" in out and "(rollback)" in out and "Delivery (DORA)" in out
    assert "33%" in out  # v2.4.0 was undone by the rollback; the first v2.3.1 was not

    assert main(["where", "--verify", "--config", str(sample_config.path)]) == 0
    assert "host says" in capsys.readouterr().out
    prod_2 = sample_config.inventory.hosts["prod-2"]  # someone switches a host by hand
    subprocess.run([str(sample_config.path.parent / "app/bin/rollback.sh"), prod_2.vars["dir"],
                    str(prod_2.vars["port"]), "v2.4.0"], check=True, capture_output=True)
    observed = {o.host: o.version for o in services.observe_versions("production")}
    assert observed == {"prod-1": "v2.3.1", "prod-2": "v2.4.0"}
    assert main(["where", "production", "--verify", "--config", str(sample_config.path)]) == 1


def test_slack_where_history_and_the_roll_back_button(world: SlackWorld) -> None:
    for number, version in enumerate(("v2.3.1", "v2.4.0")):
        world.deploy(f"{version} to staging")
        value = button(world.plan_message(number), "approve")
        world.click("approve", value, user="UBOB")
        assert world.wait_run(bk.parse_button_value(value)[0]).status is RunStatus.SUCCEEDED

    # history is written by the worker just after a run's end is saved
    wait_until(lambda: len(world.store.history.recent(None, "staging")) == 2, what="both deploys recorded")
    world.signer.command("/deckhand", "history staging", user="UBOB",
                         response_url=f"{world.standin.url}/response/h")
    reply = world.standin.wait_for(lambda: world.standin.responses, what="the history")[-1]
    text = json.dumps(reply["blocks"])
    assert "v2.4.0" in text and "v2.3.1" in text
    rollback = [e for b in reply["blocks"] if b["type"] == "actions" for e in b["elements"]]
    assert [e["text"]["text"] for e in rollback] == ["Roll back to v2.3.1"]  # not the live one

    world.click("rollback_to", rollback[0]["value"], user="UALICE")
    plan = world.plan_message(2)  # an ordinary plan, posted for approval
    assert "Roll staging back to v2.3.1" in plan.text_of_blocks()
    value = button(plan, "approve")
    world.click("approve", value, user="UBOB")
    assert world.wait_run(bk.parse_button_value(value)[0]).status is RunStatus.SUCCEEDED
    assert _live(world.config, "staging") == {"v2.3.1"}
    wait_until(lambda: world.store.history.current(None, "staging").version == "v2.3.1",
               what="the roll back recorded")  # just after the run's end, as above

    world.signer.command("/deckhand", "where", user="UBOB",
                         response_url=f"{world.standin.url}/response/w")
    where = world.standin.wait_for(lambda: world.standin.responses[1:], what="where")[-1]
    assert "*staging*: `v2.3.1`" in where["text"]
    world.open_home("UBOB")
    home = world.standin.wait_for(lambda: world.standin.of("views.publish"), what="the Home")
    assert "runs `v2.3.1`" in json.dumps(home[-1].payload)
    status, metrics = world.get("/metrics")
    assert status == 200
    # service "": the legacy service, which Prometheus reads as no label at all
    assert 'deckhand_deploys_per_day{environment="staging",service=""} 0.1' in metrics
    assert 'deckhand_change_failure_rate{environment="staging",service=""} 0.33' in metrics
    assert world.standin.violations == []


def test_stats_read_the_whole_window_not_the_newest_500(
        sample_config: Config, own_redis: RedisServer, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    store, now = Store.connect(own_redis.url), time.time()
    in_window = 1_200  # 40 a day for 30 days: more than any fixed sample
    with store.r.pipeline(transaction=False) as pipe:
        for n in range(in_window + 100):  # and 100 older than the window
            at = now - (n + 0.5) * (30 * DAY / in_window)
            deploy = Deploy(run_id=f"run-{n}", environment="production", version="v1.0.0",
                            outcome=RunStatus.FAILED if n % 4 == 0 else RunStatus.SUCCEEDED,
                            requested_by="alice", started_at=at - 60, finished_at=at)
            pipe.zadd(store.keys.history(None, "production"), {deploy.model_dump_json(): at})
            if n % 10:  # the small index lacks a tenth, as for history from before it existed
                pipe.zadd(store.keys.history_facts(None, "production"), {fact_member(deploy): at})
        pipe.execute()
    assert len(store.history.since(None, "production", now - 30 * DAY)) == in_window
    # incomplete small index: the deploys themselves are read
    assert len(store.history.facts_since(None, "production", now - 30 * DAY)) == in_window
    store.history.forget(None, "production", [raw for raw in store.r.zrange(
        store.keys.history(None, "production"), 0, -1) if b'"run-0"' in raw])  # trims both
    in_window -= 1
    missing = {f"run-{n}" for n in range(10, in_window + 101, 10)}  # now complete them
    store.r.zadd(store.keys.history_facts(None, "production"), {
        fact_member(d): d.finished_at for d in store.history.since(None, "production", 0)
        if d.run_id in missing})
    facts = store.history.facts_since(None, "production", now - 30 * DAY)
    assert len(facts) == in_window and isinstance(facts[0], DeployFact)
    monkeypatch.setenv("REDIS_URL", own_redis.url)
    assert main(["stats", "production", "--days", "30", "--config",
                 str(sample_config.path)]) == 0
    out = capsys.readouterr().out
    assert str(in_window) in out and "39.97" in out  # every one, 40 a day
    assert "25%" in out and "nothing sampled" in out
