"""Services, owners (docs/services.md 1.3, 1.4): in an organisation of two services, an owner
of api is refused approval of a web run by ``deckhand approve`` against real Redis, and so is
someone the organisation's rule allows but who owns nothing; web's owner (read from its
Backstage catalog file) approves it. ``deckhand policy explain`` names each layer at its
file:line, and ``deckhand check`` says which layer wins. (Slack's face for several services
is a later step of issue 40.)"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from agents.org import load_org
from agents.run.record import Run, RunStatus
from agents.services import build_services
from agents.store import Store
from bot.cli import main

SERVICE = """
tools:
  ship:
    description: put a version on every host of an environment
    command: "echo {version}"
    target: environment
    params: {version: {pattern: '^v\\d+\\.\\d+\\.\\d+$'}}
inventory:
  hosts: {NAME-1: {connection: local}, NAME-2: {connection: local}}
  environments: {staging: {hosts: [NAME-1]}, production: {hosts: [NAME-2]}}
playbooks:
  - name: ship
    match: ['^ship (?P<version>v\\S+) to (?P<environment>\\S+)$']
    goal: "ship {version} to {environment}"
    steps: [{id: ship, tool: ship, params: {environment: "{environment}",
                                            version: "{version}"}}]
policy:
  require_rollback: false
  environments:
    production: {approvers: {anyone: true}, approval_ttl: 600}
"""

MAIN = """
services: {api: services/api.yml, web: services/web.yml}
owners_map: {"group:default/team-web": [webby]}
policy:
  environments:
    production: {approvers: {users: [apiowner, webby, outsider]}, self_approval: false}
"""

CATALOG = """
apiVersion: backstage.io/v1alpha1
kind: Component
metadata: {name: web}
spec: {type: service, lifecycle: production, owner: team-web}
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


@pytest.fixture
def org_path(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("DECKHAND_STATE_DIR", str(tmp_path / "state"))
    write(tmp_path / "services" / "api.yml",
          "owners: {users: [apiowner]}\n" + SERVICE.replace("NAME", "api"))
    write(tmp_path / "services" / "web.yml",
          "owners: {catalog: catalog-info.yaml}\n" + SERVICE.replace("NAME", "web"))
    write(tmp_path / "services" / "catalog-info.yaml", CATALOG)
    return write(tmp_path / "deckhand.yml", MAIN)


def web_run(org_path: Path, store: Store) -> Run:
    """A web production run awaiting approval, stored as every face stores one."""
    services = build_services(load_org(org_path).services["web"], store=store)
    plan = services.make_plan("ship v1.2.3 to production", requested_by="dev", face="cli")
    assert plan.service == "web"
    services.store.plans.save(plan)
    return services.store.runs.create(Run.for_plan(plan, services.targets(plan)))


def approve(org_path: Path, run: Run, user: str) -> int:
    return main(["approve", run.id, "--user", user, "--config", str(org_path)])


def test_an_owner_of_api_is_refused_on_web(org_path: Path, store: Store) -> None:
    run = web_run(org_path, store)
    assert approve(org_path, run, "apiowner") == 3  # allowed by web's and the org's rule
    assert approve(org_path, run, "outsider") == 3  # the org's rule allows; owns nothing
    stored = store.runs.get(run.id)
    assert (stored.status, stored.approvals) == (RunStatus.AWAITING_APPROVAL, [])
    refused = [e for e in store.audit.entries(run_id=run.id) if e.action == "refused"]
    assert [e.actor for e in refused] == ["apiowner", "outsider"]
    assert refused[0].details["rule"] == (
        "you are not allowed to approve this plan. Who can: only someone allowed by every "
        "rule (production (organisation): apiowner, webby, outsider; production (owners): "
        "webby) — by name: webby")

    assert approve(org_path, run, "webby") == 0
    stored = store.runs.get(run.id)
    assert stored.status is not RunStatus.AWAITING_APPROVAL
    assert [a.user for a in stored.approvals] == ["webby"]


def test_policy_explain_names_each_layer(org_path: Path, store: Store,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    run = web_run(org_path, store)
    capsys.readouterr()
    assert main(["policy", "explain", run.id, "--user", "apiowner",
                 "--config", str(org_path)]) == 0
    out = [line.strip() for line in capsys.readouterr().out.splitlines()]
    assert out[0].startswith(f"run {run.id} of web (awaiting_approval), requested by dev")
    assert out[1:4] == [
        "production: anyone except dev (1 needed) — services/web.yml:21 "
        "policy.environments.production, touches web-2",
        "production: apiowner, webby, outsider (1 needed, not the requester) — organisation: "
        "deckhand.yml:5 policy.environments.production, touches web-2",
        "production: webby (1 needed) — owners: services/web.yml:1, "
        "services/catalog-info.yaml:4 (group:default/team-web), touches web-2"]
    assert out[-1].startswith("apiowner may approve: no: you are not allowed")

    assert main(["check", str(org_path)]) == 0
    checked = capsys.readouterr().out
    assert ("policy: web/production: self_approval no — organisation: deckhand.yml:5 policy."
            "environments.production wins over services/web.yml:21 policy.environments.production") \
        in checked
    assert "policy: web: owners webby approve its runs" in checked


def test_policy_explain_a_plan_file_of_a_service(org_path: Path, store: Store,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    services = build_services(load_org(org_path).services["web"], store=store)
    plan = services.make_plan("ship v1.2.3 to production", requested_by="dev", face="cli")
    file = org_path.parent / "plan.json"
    file.write_text(plan.model_dump_json())
    capsys.readouterr()
    assert main(["policy", "explain", "--plan", str(file), "--requested-by", "dev",
                 "--config", str(org_path)]) == 0
    out = capsys.readouterr().out
    assert "production: webby (1 needed) — owners: services/web.yml:1" in out

