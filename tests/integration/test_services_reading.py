"""Reading across services (docs/services.md 2.6), through ``bot.cli.main`` on a real
redis-server with history recorded for two services of ``examples/services``: ``where``
as a service × environment matrix (``--json`` with ``service``), ``history SERVICE ENV``,
``stats`` per service with the organisation's line, ``deckhand services``, a ``/metrics``
scrape labelled by service; the example checks clean and ``init --service`` adds a service
that ``check`` accepts."""

from __future__ import annotations

import json
import shutil
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agents.history.deploys import DAY, Deploy
from agents.org import load_org
from agents.run.record import Event, EventKind, Run, RunStatus
from agents.services import build_services
from agents.settings import Settings
from agents.store import Store
from agents.store.manual_locks import ManualLock
from bot.cli import main
from bot.metrics import Metrics
from tests.fixtures.sample import EXAMPLES, free_port


@pytest.fixture
def org(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of examples/services (and the tools and app it points at), REDIS_URL set."""
    shutil.copytree(EXAMPLES / "services", tmp_path / "services")
    shutil.copy(EXAMPLES / "tools.yml", tmp_path / "tools.yml")
    (tmp_path / "app").symlink_to(EXAMPLES / "app")
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("DECKHAND_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("DECKHAND_CONFIG", raising=False)
    monkeypatch.delenv("DECKHAND_SERVICE", raising=False)
    monkeypatch.setenv("COLUMNS", "200")  # a table row on one line
    return tmp_path / "services" / "deckhand.yml"


def deploy(run_id: str, env: str, version: str, at: float, hosts: list[str], *,
           outcome: RunStatus = RunStatus.SUCCEEDED) -> Deploy:
    return Deploy(run_id=run_id, environment=env, version=version, outcome=outcome,
                  requested_by="U1", started_at=at - 60, finished_at=at,
                  hosts={h: version for h in hosts})


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_where_reads_both_services_as_a_matrix(org: Path, store: Store,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    now = time.time()
    prod = ["api-prod-1", "api-prod-2"]
    store.history.record("api", "run-a1", [deploy("run-a1", "production", "v1.0.0", now - 50,
                                                  prod)])
    store.history.record("api", "run-a2", [deploy("run-a2", "production", "v1.1.0", now - 10,
                                                  prod[:1])])  # half-way: prod-2 drifts
    store.history.record("web", "run-w1", [deploy("run-w1", "production", "v9.0.0", now - 20,
                                                  ["web-prod-1", "web-prod-2"])])
    store.manual_locks.take(ManualLock("production", "alice", "db migration", now,
                                       service="web"), face="cli")
    running = Run(id="run-api-live", plan_id="p", plan_version=1, plan_hash="h",
                  service="api", environments=["staging"], status=RunStatus.RUNNING,
                  created_at=now)
    store.runs.create(running)
    store.locks.acquire("api", ["staging"], run_id="run-api-live", worker="w1", ttl=60)

    rows = cli_json(capsys, "where", "-c", str(org))
    assert [(r["service"], r["environment"], r["version"]) for r in rows] == [
        ("api", "staging", None), ("api", "production", "v1.1.0"),
        ("web", "staging", None), ("web", "production", "v9.0.0")]
    api_prod, web_prod = rows[1], rows[3]
    assert [(h["host"], h["version"], h["drift"]) for h in api_prod["hosts"]] == [
        ("api-prod-1", "v1.1.0", False), ("api-prod-2", "v1.0.0", True)]
    assert web_prod["lock"]["holder"] == "alice" and api_prod["lock"] is None
    assert rows[0]["run_lock"]["run_id"] == "run-api-live" and web_prod["run_lock"] is None
    assert rows[0]["in_flight"] == [{"run_id": "run-api-live", "status": "running"}]
    assert rows[2]["in_flight"] == []  # web's staging: api's run is not web's

    assert [(r["service"], r["environment"])
            for r in cli_json(capsys, "where", "production", "-c", str(org))] == [
        ("api", "production"), ("web", "production")]
    assert [(r["service"], r["version"])
            for r in cli_json(capsys, "where", "web", "production", "-c", str(org))] == [
        ("web", "v9.0.0")]
    assert {r["service"] for r in cli_json(capsys, "where", "api", "-c", str(org))} == {"api"}
    assert [(r["service"], r["environment"]) for r in cli_json(
        capsys, "where", "production", "--service", "web", "-c", str(org))] == [
        ("web", "production")]

    assert main(["where", "-c", str(org)]) == 0
    text = capsys.readouterr().out
    assert "drift: api-prod-2" in text and "alice: db migration" in text
    assert "run-api-live" in text
    assert main(["where", "api", "--service", "web", "-c", str(org)]) == 2
    said = capsys.readouterr()
    assert "--service says web, the command line api: name one" in said.out + said.err
    assert main(["where", "nope", "production", "-c", str(org)]) == 2
    said = capsys.readouterr()  # (errors move to stderr with issue 43)
    assert "'nope' is not a service of deckhand.yml (known: api, web)" in said.out + said.err


def test_history_and_stats_per_service_and_for_the_organisation(
        org: Path, store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    now = time.time()
    api = ["api-prod-1"]
    store.history.record("api", "a1", [deploy("a1", "production", "v1.0.0", now - 3 * DAY, api)])
    store.history.record("api", "a2", [deploy("a2", "production", "v1.1.0", now - 2 * DAY, api,
                                              outcome=RunStatus.FAILED)])
    store.history.record("api", "a3", [deploy("a3", "production", "v1.1.1", now - 1 * DAY, api)])
    store.history.record("web", "w1", [deploy("w1", "production", "v9.0.0", now - DAY / 2,
                                              ["web-prod-1"])])

    deploys = cli_json(capsys, "history", "api", "production", "-c", str(org))
    assert [(d["service"], d["run_id"]) for d in deploys] == [
        ("api", "a3"), ("api", "a2"), ("api", "a1")]
    both = cli_json(capsys, "history", "production", "-c", str(org))
    assert [(d["service"], d["run_id"]) for d in both] == [
        ("web", "w1"), ("api", "a3"), ("api", "a2"), ("api", "a1")]

    figures = cli_json(capsys, "stats", "production", "--days", "7", "-c", str(org))
    by = {(f["service"], f["environment"]): f for f in figures}
    assert by["api", "production"]["deploys"] == 3
    assert by["api", "production"]["change_failure_rate"] == pytest.approx(1 / 3)
    assert by["web", "production"]["deploys"] == 1
    total = figures[-1]
    assert (total["service"], total["environment"], total["deploys"]) == (None, None, 4)
    assert total["change_failure_rate"] == pytest.approx(1 / 4)  # over every deploy
    assert total["time_to_restore"] == pytest.approx(DAY, abs=1)  # api's one restore
    only_web = cli_json(capsys, "stats", "web", "--days", "7", "-c", str(org))
    assert [(f["service"], f["environment"], f["deploys"]) for f in only_web] == [
        ("web", "staging", 0), ("web", "production", 1), (None, None, 1)]

    assert main(["stats", "--days", "7", "-c", str(org)]) == 0
    text = capsys.readouterr().out
    assert "organisation" in text and "25%" in text and "33%" in text


def test_services_lists_owners_environments_and_what_runs_where(
        org: Path, store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    api = org.parent / "api.yml"
    api.write_text(api.read_text().replace(
        "# owners: {users: [U024BE7LH], groups: [S0APITEAM]}",
        "owners: {users: [U024BE7LH], groups: [S0APITEAM]}"))
    store.history.record("web", "w1", [deploy("w1", "staging", "v2.0.0", time.time(),
                                              ["web-staging-1"])])
    found = cli_json(capsys, "services", "-c", str(org))
    assert [s["service"] for s in found] == ["api", "web"]
    assert found[0]["owners"]["users"] == ["U024BE7LH"]
    assert found[0]["owners"]["groups"] == ["S0APITEAM"]
    assert found[1]["owners"] is None
    assert [(e["environment"], e["version"]) for e in found[1]["environments"]] == [
        ("staging", "v2.0.0"), ("production", None)]
    assert main(["services", "-c", str(org)]) == 0
    text = capsys.readouterr().out
    assert "U024BE7LH" in text and "staging: v2.0.0" in text


def test_the_example_checks_clean_and_init_adds_a_service(
        org: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(EXAMPLES / "services" / "deckhand.yml")]) == 0
    assert "is valid: 2 service(s): api, web" in capsys.readouterr().out

    assert main(["init", str(org.parent), "--service", "docs"]) == 0
    written = org.parent / "services" / "docs.yml"
    assert written.is_file()
    assert "  docs: services/docs.yml" in org.read_text()
    assert "# Two services, one deckhand" in org.read_text()  # comments survive
    assert main(["check", str(org)]) == 0
    assert "is valid: 3 service(s): api, web, docs" in capsys.readouterr().out
    assert main(["init", str(org.parent), "--service", "docs"]) == 1
    assert "already" in capsys.readouterr().out


def test_a_metrics_scrape_labels_runs_plans_and_dora_by_service(org: Path, store: Store) -> None:
    now = time.time()
    store.history.record("api", "a1", [deploy("a1", "production", "v1.0.0", now - DAY,
                                              ["api-prod-1"])])
    store.history.record("web", "w1", [deploy("w1", "production", "v9.0.0", now - DAY,
                                              ["web-prod-1"], outcome=RunStatus.FAILED)])
    api = build_services(load_org(org).services["api"], Settings(), store=store)
    plan = store.plans.save(api.make_plan("deploy v1.0.0 to staging", requested_by="U1",
                                          face="cli"))
    metrics = Metrics()
    metrics.record_plan(plan)
    metrics.watch_org_history(store.history, [("api", "production"), ("web", "production")],
                              undo_window=DAY)
    run = Run(id="run-m", plan_id=plan.id, plan_version=plan.version, plan_hash=plan.hash,
              service=plan.service, environments=["staging"], status=RunStatus.SUCCEEDED)
    listener = metrics.run_listener_factory(store.plans)(run)
    listener(Event(kind=EventKind.RUN_FINISHED, run_id=run.id, status="succeeded"), run)

    port = free_port()
    server = metrics.serve(host="127.0.0.1", port=port)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as got:
            text = got.read().decode()
    finally:
        server.shutdown()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert plan.service == "api"
    assert samples["deckhand_runs_total", (("outcome", "succeeded"), ("service", "api"))] == 1
    assert samples["deckhand_plans_total", (("planner", plan.planner.name),
                                            ("service", "api"))] == 1
    api_prod = (("environment", "production"), ("service", "api"))
    web_prod = (("environment", "production"), ("service", "web"))
    assert samples["deckhand_deploys_per_day", api_prod] == pytest.approx(1 / 30)
    assert samples["deckhand_change_failure_rate", api_prod] == 0
    assert samples["deckhand_change_failure_rate", web_prod] == 1


def test_audit_names_each_entrys_service_and_filters_by_one(
        org: Path, store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    for run_id, service in [("run-api", "api"), ("run-web", "web")]:
        store.runs.create(Run(id=run_id, plan_id=f"plan-{service}", plan_version=1,
                              plan_hash="h", service=service, environments=["production"],
                              created_at=time.time()))
        store.audit.record("planned", actor="U1", run_id=run_id)
    store.manual_locks.take(ManualLock("staging", "alice", "load test", time.time(),
                                       service="web"), face="cli")
    store.audit.record("config_reloaded", actor="deckhand")  # about no service

    def lines(*argv: str) -> list[dict[str, Any]]:
        assert main(["audit", "-c", str(org), "--json", *argv]) == 0
        return [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    assert [(e["action"], e["service"]) for e in lines()] == [
        ("planned", "api"), ("planned", "web"), ("locked", "web"), ("config_reloaded", None)]
    assert [(e["action"], e["run_id"]) for e in lines("--service", "web")] == [
        ("planned", "run-web"), ("locked", None)]
    assert main(["audit", "-c", str(org), "--service", "nope"]) == 2
    said = capsys.readouterr()
    assert "'nope' is not a service of deckhand.yml (known: api, web)" in said.out + said.err
