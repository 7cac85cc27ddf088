"""Services, step 3 (docs/services.md 2.1, 2.2, 2.7): two services with the same environment
names, each on its own real sshd hosts, deployed from the CLI (``deckhand run … --service``,
a name in the request, ``DECKHAND_SERVICE``) against a real redis-server. A failure rolls
one service back while the other's hosts stay as they were; a request naming no service
plans nothing; a worker never runs a run of a service it does not serve."""

from __future__ import annotations

import io
import json
import re
import textwrap
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

from agents.engine.occurrences import Outcome, run_occurrence
from agents.engine.reload import ConfigReload
from agents.engine.worker import Worker
from agents.errors import ServiceUnknown
from agents.org import load_org
from agents.run.record import Run, RunStatus
from agents.schedules.model import Schedule
from agents.services import build_services
from agents.store import Store
from bot.cli import main
from tests.fixtures.openai_standin import API_KEY, OpenAIStandin
from tests.fixtures.polling import wait_until
from tests.fixtures.sshd import SSHFleet

VERSION = r"'^v\d+\.\d+\.\d+$'"
WAIT_FOR_GO = "for i in $(seq 1 600); do [ -e {vars.go} ] && exit 0; sleep 0.05; done; exit 1"
"""The hold step's loop on the host (as tests/integration/test_pause.py): the test's
polling is never a sleep."""
SERVICE = """
tools:
  deploy:
    description: put a version on every host of an environment, keeping the one before
    command: >-
      mkdir -p {{host.dir}} && if [ -f {{host.dir}}/version ]; then
      cp {{host.dir}}/version {{host.dir}}/previous; fi && echo {{version}} > {{host.dir}}/version
    target: environment
    params: {{version: {{pattern: {version}}}}}
    mutates: true
    rollback: rollback
  smoke:
    description: every host answers with the version and is healthy
    command: test "$(cat {{host.dir}}/version)" = {{version}} && test ! -e {{host.dir}}/broken
    target: environment
    params: {{version: {{pattern: {version}}}}}
  rollback:
    description: every host back to the version before
    command: if [ -f {{host.dir}}/previous ]; then cp {{host.dir}}/previous {{host.dir}}/version; fi
    target: environment
    mutates: true
  restart:
    description: restart the service's workers
    command: touch {{host.dir}}/restarted
    target: environment
  hold:
    description: wait on every host of an environment until the test says go
    command: touch {{vars.held}}; {wait}
    target: environment
    idempotent: true
    timeout: 60
vars: {{held: "{{config_dir}}/../held-{name}", go: "{{config_dir}}/../go"}}
inventory:
  hosts:
{hosts}
  environments:
    staging: {{hosts: [{name}-staging]}}
    production: {{hosts: [{name}-prod], aliases: [prod]}}
playbooks:
  - name: deploy
    match: ['^deploy (?P<version>v\\S+)$']
    examples: ["deploy v1.2.3"]
    goal: "Deploy {{version}} of {name}"
    steps:
      - {{id: deploy_staging, tool: deploy, params: {{environment: staging, version: "{{version}}"}}}}
      - id: deploy_production
        tool: deploy
        params: {{environment: production, version: "{{version}}"}}
        depends_on: [deploy_staging]
      - id: smoke_production
        tool: smoke
        params: {{environment: production, version: "{{version}}"}}
        depends_on: [deploy_production]
    rollback:
      - {{id: rollback_production, tool: rollback, params: {{environment: production}}}}
      - {{id: rollback_staging, tool: rollback, params: {{environment: staging}}}}
  - name: deploy-held
    match: ['^deploy (?P<version>v\\S+) and hold$']
    examples: ["deploy v1.2.3 and hold"]
    goal: "Deploy {{version}} of {name} to production and hold"
    steps:
      - id: deploy_production
        tool: deploy
        params: {{environment: production, version: "{{version}}"}}
      - {{id: hold, tool: hold, params: {{environment: production}}, depends_on: [deploy_production]}}
    rollback:
      - {{id: rollback_production, tool: rollback, params: {{environment: production}}}}
  - name: restart-{name}
    match: ['^restart {name}$']
    examples: ["restart {name}"]
    goal: "Restart {name} in production"
    steps: [{{id: restart, tool: restart, params: {{environment: production}}}}]
{policy}"""
HOSTS = {"api": ("staging-1", "prod-1"), "web": ("prod-2", "prod-3")}
"""Each service's staging and production host: the fleet's sshd processes, none shared."""
POLICY = {"api": "", "web": "policy:\n  environments:\n    production: {approvers: {users: "
                           "[alice, carol]}}\n"}
"""api: anyone approves (the default); web's production: alice or carol only."""


def write_org(root: Path, fleet: SSHFleet) -> Path:
    for name, (staging, production) in HOSTS.items():
        hosts = {f"{name}-staging": staging, f"{name}-prod": production}
        lines = "\n".join(
            f"    {host}: " + json.dumps(fleet.inventory_host(sshd, vars={
                "dir": str(root / "hosts" / host)}))
            for host, sshd in hosts.items())
        (root / "services").mkdir(parents=True, exist_ok=True)
        (root / "services" / f"{name}.yml").write_text(
            SERVICE.format(name=name, hosts=lines, version=VERSION, policy=POLICY[name],
                           wait=WAIT_FOR_GO))
    main_config = root / "deckhand.yml"
    main_config.write_text(textwrap.dedent(f"""\
        services:
          api: services/api.yml
          web: services/web.yml
        state_dir: state
        inventory:
          known_hosts: {fleet.known_hosts}
        """))
    return main_config


@pytest.fixture
def org(tmp_path: Path, sshd_hosts: SSHFleet, redis_url: str, client: redis.Redis,
        monkeypatch: pytest.MonkeyPatch) -> Path:
    """The two-service organisation; every CLI call shares the real redis-server."""
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.delenv("DECKHAND_SERVICE", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return write_org(tmp_path, sshd_hosts)


def on_hosts(root: Path) -> dict[str, str]:
    """What each host's version file says ("-" if none)."""
    out = {}
    for name in ("api-staging", "api-prod", "web-staging", "web-prod"):
        version = root / "hosts" / name / "version"
        out[name] = version.read_text().strip() if version.exists() else "-"
    return out


def snapshot(root: Path, service: str) -> list[tuple[str, int, str]]:
    """Every file of ``service``'s hosts with its mtime and content."""
    found = sorted(p for p in (root / "hosts").rglob("*") if p.is_file()
                   and p.relative_to(root / "hosts").parts[0].startswith(f"{service}-"))
    return [(str(p), p.stat().st_mtime_ns, p.read_text()) for p in found]


def runs_by_goal(store: Store) -> dict[str, Run]:
    return {run.goal: run for run in store.runs.recent(limit=20)}


def said(capsys: pytest.CaptureFixture[str]) -> str:
    """What the command printed, on either stream (errors move to stderr: issue 43)."""
    out = capsys.readouterr()
    return out.out + out.err


def run_cli(*argv: str, config: Path) -> int:
    return main(["run", *argv, "--yes", "--user", "alice", "--config", str(config)])


def test_two_services_deploy_from_the_cli_and_a_rollback_of_one_leaves_the_other(
        org: Path, redis_url: str) -> None:
    root = org.parent
    assert run_cli("deploy v1.0.0", "--service", "api", config=org) == 0
    assert run_cli("deploy web/v1.0.0", config=org) == 0  # the hubot spelling
    assert on_hosts(root) == dict.fromkeys(["api-staging", "api-prod", "web-staging",
                                            "web-prod"], "v1.0.0")
    api_before = snapshot(root, "api")
    store = Store.connect(redis_url)
    where_before = store.history.matrix()
    assert {(w.service, w.environment, w.version) for w in where_before} == {
        (service, env, "v1.0.0") for service in ("api", "web") for env in ("staging",
                                                                          "production")}
    (root / "hosts" / "web-prod" / "broken").write_text("disk full\n")
    assert run_cli("deploy v2.0.0 of web", config=org) == 1  # smoke fails: rolled back
    assert on_hosts(root)["web-prod"] == on_hosts(root)["web-staging"] == "v1.0.0"
    assert snapshot(root, "api") == api_before  # not a file of api's touched
    api_where = [w for w in store.history.matrix() if w.service == "api"]
    assert api_where == [w for w in where_before if w.service == "api"]  # nor its `where`
    runs = runs_by_goal(store)
    assert {goal: (run.service, run.status) for goal, run in runs.items()} == {
        "Deploy v1.0.0 of api": ("api", RunStatus.SUCCEEDED),
        "Deploy v1.0.0 of web": ("web", RunStatus.SUCCEEDED),
        "Deploy v2.0.0 of web": ("web", RunStatus.ROLLED_BACK)}
    failed = runs["Deploy v2.0.0 of web"]
    # web's plan ran on web's hosts only, under web's inventory
    assert set(failed.steps["deploy_production"].hosts) == {"web-prod"}
    assert set(failed.rollback["rollback_production"].hosts) == {"web-prod"}
    assert store.plans.get(failed.plan_id).service == "web"


def test_deckhand_service_chooses_and_the_request_may_spell_the_service(
        org: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    root = org.parent
    monkeypatch.setenv("DECKHAND_SERVICE", "web")
    assert run_cli("deploy v1.1.0", config=org) == 0
    assert on_hosts(root) == {"api-staging": "-", "api-prod": "-", "web-staging": "v1.1.0",
                              "web-prod": "v1.1.0"}
    capsys.readouterr()
    # a playbook that spells its service matches as typed; others without the name
    assert main(["plan", "restart api", "--format", "json", "--config", str(org)]) == 2
    assert "names service api but DECKHAND_SERVICE says web" in said(capsys)
    monkeypatch.delenv("DECKHAND_SERVICE")
    assert main(["plan", "restart api", "--format", "json", "--config", str(org)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["goal"], plan["service"]) == ("Restart api in production", "api")
    assert main(["plan", "deploy v3.0.0 for api", "--format", "json",
                 "--config", str(org)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["goal"], plan["service"]) == ("Deploy v3.0.0 of api", "api")
    assert [s["params"] for s in plan["steps"]][1] == {"environment": "production",
                                                      "version": "v3.0.0"}


def test_a_request_naming_no_service_plans_nothing_and_lists_them(
        org: Path, redis_url: str, client: redis.Redis, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    store = Store.connect(redis_url)
    assert run_cli("deploy v1.0.0", config=org) == 2
    err = said(capsys)
    assert "which service? This organisation has api, web" in err
    assert run_cli("deploy webb v1.0.0", config=org) == 2
    assert "'webb' is not a service (did you mean web?); known services: api, web" in \
        said(capsys)
    assert run_cli("deploy v1.0.0", "--service", "db", config=org) == 2
    assert "--service names unknown service 'db'; known services: api, web" in \
        said(capsys)
    assert store.runs.recent(limit=5) == [] and client.keys("plan:*") == []
    assert on_hosts(org.parent) == dict.fromkeys(["api-staging", "api-prod", "web-staging",
                                                  "web-prod"], "-")
    # the terminal asks, with the list, and plans for the answer
    monkeypatch.setattr("sys.stdin", io.StringIO("web\n"))
    assert main(["plan", "deploy v1.0.0", "--config", str(org)]) == 0
    out = capsys.readouterr().out
    assert "Which service? (api, web)" in out and "Deploy v1.0.0 of web" in out


def test_where_can_i_deploy_is_answered_never_planned(
        org: Path, redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("where can I deploy api", config=org) == 0
    out = capsys.readouterr().out
    assert "Where api can be deployed" in out
    assert "staging" in out and "production" in out and "open" in out
    assert Store.connect(redis_url).runs.recent(limit=5) == []


def test_a_worker_never_runs_a_run_of_a_service_it_does_not_serve(
        org: Path, redis_url: str, store: Store) -> None:
    both = build_services(load_org(org), store=store)
    web = both.focus("web")
    plan = web.make_plan("deploy v1.0.0", requested_by="alice", face="cli")
    store.plans.save(plan)
    run = store.runs.create(Run.for_plan(plan, web.targets(plan), status=RunStatus.QUEUED))
    only_api = org.parent / "api-only.yml"
    only_api.write_text(org.read_text().replace("  web: services/web.yml\n", ""))
    worker = Worker(build_services(load_org(only_api), store=store), store, name="api-worker")
    assert worker.process(run.id) is None
    ended = store.runs.get(run.id)
    assert ended.status is RunStatus.FAILED
    assert ended.reason == (f"not run here: run {run.id}: service 'web': not a service of "
                            f"api-only.yml (known: api); nothing is done under another "
                            f"service's rules")
    assert on_hosts(org.parent)["web-prod"] == "-"
    assert store.locks.all() == []
    # the bundle that serves both runs it, under web's config
    queued = store.runs.create(Run.for_plan(plan, web.targets(plan), status=RunStatus.QUEUED))
    final = Worker(both, store, name="org-worker").process(queued.id)
    assert final is not None and final.status is RunStatus.SUCCEEDED, final
    assert on_hosts(org.parent) == {"api-staging": "-", "api-prod": "-",
                                    "web-staging": "v1.0.0", "web-prod": "v1.0.0"}
    both.close()


def test_a_reload_swaps_every_service_at_once_and_a_dropped_one_is_refused(
        org: Path, store: Store) -> None:
    services = build_services(load_org(org), store=store)
    api, web = services.focus("api"), services.focus("web")
    before = api.config
    assert web.config.inventory.hosts.keys() == {"web-staging", "web-prod"}
    org.write_text(org.read_text().replace("  web: services/web.yml\n", ""))
    assert ConfigReload(services, actor="test").reload()
    # every view of the bundle reads the new load: api rebuilt from it, web gone
    assert api.config is not before and api.config.inventory.hosts.keys() == {
        "api-staging", "api-prod"}
    with pytest.raises(ServiceUnknown, match="unknown service 'web'; known services: api"):
        web.make_plan("deploy v1.0.0", requested_by="alice", face="cli")
    [entry] = [e for e in store.audit.entries() if e.action == "config_reloaded"]
    assert entry.details["policy_changed"] is True
    assert entry.details["diff"] == ["service web removed"]
    services.close()


def test_an_approval_reads_the_runs_own_service(
        org: Path, store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    services = build_services(load_org(org), store=store)
    web = services.focus("web")
    plan = store.plans.save(web.make_plan("deploy v1.0.0", requested_by="alice", face="cli"))
    run = store.runs.create(Run.for_plan(plan, web.targets(plan)))
    approve = ["approve", run.id, "--config", str(org), "--confirm", "production"]
    assert main([*approve, "--user", "carol", "--service", "api"]) == 2  # not api's run
    assert "is service web's, not api's (as --service or DECKHAND_SERVICE says)" in \
        said(capsys)
    # bob may approve anything of api's, but web's production is alice's or carol's
    assert main([*approve, "--user", "bob"]) == 3
    assert "Who can: production: alice, carol" in said(capsys)
    assert store.runs.get(run.id).status is RunStatus.AWAITING_APPROVAL
    assert main([*approve, "--user", "carol"]) == 0
    assert store.runs.get(run.id).status is RunStatus.QUEUED
    services.close()


def test_a_schedule_plans_under_its_own_service_and_never_another(
        org: Path, store: Store) -> None:
    services = build_services(load_org(org), store=store)  # unfocused: it serves both
    now = datetime.now(UTC)

    def schedule(service: str) -> Schedule:
        return store.schedules.create(Schedule(
            spec="0 2 * * *", cron="0 2 * * *", request="deploy v1.0.0", service=service,
            created_by="alice", created_at=now, armed_at=now))

    done = run_occurrence(services, schedule("web"), now)
    assert done.outcome is Outcome.AWAITING_APPROVAL and done.plan is not None
    assert (done.plan.service, done.plan.goal) == ("web", "Deploy v1.0.0 of web")
    ghost = schedule("db")
    assert run_occurrence(services, ghost, now).outcome is Outcome.PLAN_FAILED
    assert (store.schedules.get(ghost.id).plan_problem or "").endswith(
        f"schedule {ghost.id}: service 'db': not a service of deckhand.yml (known: api, "
        f"web); nothing is done under another service's rules")
    services.close()


def test_hosts_check_takes_one_service_by_name(
        org: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hosts", "--json", "--config", str(org)]) == 2  # several: which one?
    assert "which service? This organisation has api, web" in said(capsys)
    monkeypatch.setenv("DECKHAND_SERVICE", "web")
    assert main(["hosts", "check", "production", "--json", "--config", str(org)]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["host"], row["ok"]) == ("web-prod", True)  # reached over its own sshd
    assert main(["hosts", "--json", "--service", "api", "--config", str(org)]) == 0
    assert {(h["host"], tuple(h["environments"])) for h in json.loads(
        capsys.readouterr().out)} == {("api-staging", ("staging",)),
                                      ("api-prod", ("production",))}


def test_the_model_is_told_only_the_chosen_services_hosts(
        org: Path, openai_standin: OpenAIStandin, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", openai_standin.base_url)
    monkeypatch.setenv("OPENAI_MODEL", "standin-model")
    openai_standin.reply_json({"cannot_plan": "no tool makes anything faster", "goal": "",
                               "steps": [], "rollback": []})
    assert main(["plan", "make web faster", "--format", "json", "--config", str(org)]) == 2
    assert "no tool makes anything faster" in said(capsys)
    [sent] = openai_standin.requests
    told = json.dumps(sent.messages)
    assert "web-prod" in told and "web-staging" in told and "make web faster" in told
    assert not re.search(r"\bapi\b", told)  # nothing of the other service: hosts, playbooks


def test_eval_measures_one_services_planner(
        org: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = org.parent / "cases.yml"
    cases.write_text(textwrap.dedent("""\
        cases:
          - request: "please deploy 1.0.0"
            kind: chain
            steps:
              - {id: deploy_staging, tool: deploy, params: {environment: staging, version: v1.0.0}}
              - {id: deploy_production, tool: deploy, params: {environment: production, version: v1.0.0}, depends_on: [deploy_staging]}
              - {id: smoke_production, tool: smoke, params: {environment: production, version: v1.0.0}, depends_on: [deploy_production]}
            rollback:
              - {id: rollback_production, tool: rollback, params: {environment: production}}
              - {id: rollback_staging, tool: rollback, params: {environment: staging}}
          - request: "restart api"
            kind: chain
            steps:
              - {id: restart, tool: restart, params: {environment: production}}
        """))
    argv = ["eval", "--json", "--cases", str(cases), "--planner", "playbook",
            "--config", str(org)]
    assert main(argv) == 2 and "which service?" in said(capsys)
    main([*argv, "--service", "api"])
    [api] = json.loads(capsys.readouterr().out)["configurations"]
    main([*argv, "--service", "web"])
    [web] = json.loads(capsys.readouterr().out)["configurations"]
    # web has no playbook that restarts api: its planner sees only web's
    assert [c["passed"] for c in api["cases"]] == [True, True]
    assert [c["passed"] for c in web["cases"]] == [True, False]


def test_a_schedule_added_from_the_cli_is_its_services(
        org: Path, store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    add = ["schedules", "add", "every day at 02:00", "deploy", "v1.0.0", "--user", "alice",
           "--config", str(org)]
    assert main(add) == 2 and "which service?" in said(capsys)
    assert main([*add, "--service", "web"]) == 0, said(capsys)
    [schedule] = store.schedules.all()
    assert (schedule.service, schedule.request) == ("web", "deploy v1.0.0")


def test_both_productions_deploy_at_once_on_two_workers(org: Path, store: Store) -> None:
    """Two services' ``production`` are two locks (lock:api:production, lock:web:production):
    web deploys to production, start to end, while api's run holds its production."""
    root = org.parent
    services = build_services(load_org(org), store=store)

    def queued(service: str, request: str) -> Run:
        focused, _ = services.for_request(request, given=service)
        plan = store.plans.save(focused.make_plan(request, requested_by="alice", face="cli"))
        return store.runs.create(Run.for_plan(plan, focused.targets(plan),
                                              status=RunStatus.QUEUED))

    api_run = queued("api", "deploy v1.0.0 and hold")
    api_worker = Worker(services, store, name="worker-api")
    thread = threading.Thread(target=api_worker.process, args=(api_run.id,))
    thread.start()
    try:
        wait_until((root / "held-api").exists, what="api's run to hold in production")
        held = [(lock.service, lock.environment, lock.run_id) for lock in store.locks.all()]
        assert held == [("api", "production", api_run.id)]
        web_run = queued("web", "deploy v1.0.0")
        done = Worker(services, store, name="worker-web").process(web_run.id)
        assert done is not None and done.status is RunStatus.SUCCEEDED, done
        assert store.runs.get(api_run.id).status is RunStatus.RUNNING  # still holding
        assert [lock.run_id for lock in store.locks.all()] == [api_run.id]
        assert on_hosts(root) == {"api-staging": "-", "api-prod": "v1.0.0",
                                  "web-staging": "v1.0.0", "web-prod": "v1.0.0"}
    finally:
        (root / "go").touch()
        thread.join(60)
    final = store.runs.get(api_run.id)
    assert final.status is RunStatus.SUCCEEDED, (final.reason, {
        k: [(h.status, h.tail) for h in v.hosts.values()] for k, v in final.steps.items()})
    assert store.locks.all() == []
    services.close()
