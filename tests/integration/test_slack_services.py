"""Services in Slack (docs/services.md 2.7, step 5): one bot serving an organisation of two
services with the same environment names, driven by signed requests against the Slack
stand-in and a real redis-server, each service's production a real sshd host. Both productions
deploy at once through /deploy; a failure rolls one back and leaves the other alone; a
channel's default service; a request naming none asks its sender, who alone may choose; an
unknown service is named with the known ones; an owner of api is refused on web's plan."""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from pydantic import SecretStr

from agents.engine.worker import WorkerOptions
from agents.org import load_org
from agents.run.record import Run, RunStatus
from agents.services import build_services
from agents.settings import Settings
from agents.store import Store
from bot.slack import blocks as bk
from bot.slack.home_blocks import MAX_HOME_BLOCKS
from bot.slack.runtime import BotRuntime
from bot.slack.service_blocks import CHOOSE
from tests.fixtures.polling import wait_until
from tests.fixtures.sample import free_port
from tests.fixtures.slack_standin import Signer, SlackStandin
from tests.fixtures.slack_world import SECRET, button
from tests.fixtures.sshd import SSHFleet

SERVICE = """
owners: {{users: [{owner}]}}
tools:
  deploy:
    description: put a version on every host of an environment, keeping the one before
    command: >-
      mkdir -p {{host.dir}} && if [ -f {{host.dir}}/version ]; then
      cp {{host.dir}}/version {{host.dir}}/previous; fi && echo {{version}} > {{host.dir}}/version
    target: environment
    params: {{version: {{pattern: '^v\\d+\\.\\d+\\.\\d+$'}}}}
    mutates: true
    rollback: rollback
  smoke:
    description: every host runs the version and is healthy
    command: test "$(cat {{host.dir}}/version)" = {{version}} && test ! -e {{host.dir}}/broken
    target: environment
    params: {{version: {{pattern: '^v\\d+\\.\\d+\\.\\d+$'}}}}
  rollback:
    description: every host back to the version before
    command: if [ -f {{host.dir}}/previous ]; then cp {{host.dir}}/previous {{host.dir}}/version; fi
    target: environment
    mutates: true
  hold:
    description: wait on every host until the test says go
    command: >-
      touch {{vars.held}}; for i in $(seq 1 600); do [ -e {{vars.go}} ] && exit 0;
      sleep 0.05; done; exit 1
    target: environment
    idempotent: true
    timeout: 60
vars: {{held: "{root}/held-{name}", go: "{root}/go"}}
inventory:
  hosts:
    {name}-staging: {{connection: local, vars: {{dir: "{root}/hosts/{name}-staging"}}}}
    {name}-prod: {{connection: ssh, address: 127.0.0.1, port: {port}, user: {user},
                  key_file: "{key}", vars: {{dir: "{root}/hosts/{name}-prod"}}}}
  environments:
    staging: {{hosts: [{name}-staging]}}
    production: {{hosts: [{name}-prod], aliases: [prod]}}
playbooks:
  - name: deploy
    match: ['^deploy (?P<version>v\\S+)$']
    examples: ["deploy v1.2.3"]
    goal: "Deploy {{version}} of {name} to production"
    steps:
      - id: deploy_production
        tool: deploy
        params: {{environment: production, version: "{{version}}"}}
      - id: smoke_production
        tool: smoke
        params: {{environment: production, version: "{{version}}"}}
        depends_on: [deploy_production]
    rollback:
      - {{id: rollback_production, tool: rollback, params: {{environment: production}}}}
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
"""
OWNERS = {"api": "UAPI", "web": "UWEB"}


PRODUCTION = {"api": "prod-1", "web": "prod-2"}
"""Each service's production host: a real sshd of the session's fleet (staging stays local)."""


def write_org(root: Path, fleet: SSHFleet) -> Path:
    (root / "services").mkdir(parents=True)
    for name, owner in OWNERS.items():
        (root / "services" / f"{name}.yml").write_text(SERVICE.format(
            name=name, owner=owner, root=root, port=fleet[PRODUCTION[name]].port,
            user=fleet.user, key=fleet.user_key))
    path = root / "deckhand.yml"
    path.write_text(textwrap.dedent(f"""\
        services:
          api: services/api.yml
          web: services/web.yml
        channels: {{CAPI: api}}
        inventory: {{known_hosts: "{fleet.known_hosts}"}}
        state_dir: state
        """))
    return path


@dataclass
class OrgWorld:
    root: Path
    standin: SlackStandin
    signer: Signer
    runtime: BotRuntime
    store: Store
    redis: redis.Redis

    def deploy(self, text: str, *, user: str = "UALICE", channel: str = "CDEPLOY") -> Any:
        return self.signer.command("/deploy", text, user=user, channel=channel,
                                   response_url=f"{self.standin.url}/response/{user}")

    def click(self, action_id: str, value: str, *, user: str,
              action: dict[str, Any] | None = None) -> Any:
        return self.signer.interaction({
            "type": "block_actions", "user": {"id": user, "username": user},
            "team": {"id": "T1"}, "api_app_id": "A1", "trigger_id": f"trig-{time.time_ns()}",
            "channel": {"id": "CDEPLOY"}, "container": {"type": "message"},
            "response_url": f"{self.standin.url}/response/{user}",
            "actions": [action or {"type": "button", "action_id": action_id, "block_id": "b",
                                   "value": value, "action_ts": str(time.time())}]})

    def told(self, user: str) -> str:
        """Everything ``user`` was told privately (ephemerals, their clicks' response_url)."""
        ephemeral = [c.text_of_blocks() for c in self.standin.of("chat.postEphemeral")
                     if c.payload.get("user") == user]
        answers = [str(r.get("text")) for r in list(self.standin.responses)
                   if r.get("_path") == f"/response/{user}"]
        return "\n".join(ephemeral + answers)

    def new_run(self, goal: str) -> Run:
        """The run whose goal is ``goal`` (once its plan is posted with buttons)."""
        return wait_until(lambda: next((r for r in self.store.runs.recent(limit=50)
                                        if r.goal == goal and r.meta.get("slack")), None),
                          timeout=60, what=f"a posted plan: {goal}")

    def approve(self, run: Run, *, user: str) -> Any:
        return self.click(bk.ActionId.APPROVE, bk.button_value(run), user=user)

    def finished(self, run: Run) -> Run:
        return wait_until(lambda: (r := self.store.runs.get(run.id)).status.terminal and r,
                          timeout=60, what=f"run {run.id} to finish")

    def version(self, host: str) -> str:
        return (self.root / "hosts" / host / "version").read_text().strip()


@pytest.fixture(scope="module")
def world(redis_url: str, tmp_path_factory: pytest.TempPathFactory,
          sshd_fleet: SSHFleet) -> Iterator[OrgWorld]:
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    root = tmp_path_factory.mktemp("org")
    sshd_fleet.ensure_running()
    org = load_org(write_org(root, sshd_fleet))
    store, standin = Store.connect(redis_url), SlackStandin()
    standin.user_groups = {"SOPS": ["UCAROL"]}
    settings = Settings(SLACK_BOT_TOKEN=SecretStr("xoxb-test-token"),
                        SLACK_SIGNING_SECRET=SecretStr(SECRET),
                        SLACK_API_URL=f"{standin.url}/api/")
    runtime = BotRuntime(build_services(org, settings, store=store), settings, workers=2,
                         worker_options=WorkerOptions(block=0.1))
    runtime.start_workers()
    runtime.start_scheduler()  # as `deckhand serve` does, over the whole organisation
    port = free_port()
    runtime.start_http(host="127.0.0.1", port=port)
    signer = Signer(SECRET, f"http://127.0.0.1:{port}/slack/events")
    yield OrgWorld(root, standin, signer, runtime, store, client)
    runtime.stop()
    standin.close()
    client.flushdb()


def test_both_productions_deploy_at_once_through_deploy(world: OrgWorld) -> None:
    world.deploy("api v1.0.0 and hold")
    world.deploy("deploy v1.0.0 of web and hold")
    api = world.new_run("Deploy v1.0.0 of api to production and hold")
    web = world.new_run("Deploy v1.0.0 of web to production and hold")
    assert (api.service, web.service) == ("api", "web")
    world.approve(api, user="UAPI")
    world.approve(web, user="UWEB")
    # both hold on their hosts at the same time: two production locks, no waiting
    wait_until(lambda: (world.root / "held-api").exists() and (world.root / "held-web").exists(),
               timeout=60, what="both productions running at once")
    assert {r.status for r in map(world.store.runs.get, (api.id, web.id))} == {RunStatus.RUNNING}
    held = {(i.service, i.environment) for i in world.store.locks.all()}
    assert held == {("api", "production"), ("web", "production")}
    (world.root / "go").touch()
    assert world.finished(api).status is RunStatus.SUCCEEDED
    assert world.finished(web).status is RunStatus.SUCCEEDED
    assert (world.version("api-prod"), world.version("web-prod")) == ("v1.0.0", "v1.0.0")
    both = {("api", "production"): "v1.0.0", ("web", "production"): "v1.0.0"}
    wait_until(lambda: {(w.service, w.environment): w.version
                        for w in world.store.history.matrix()} == both,
               what="both deploys in history, each under its service")  # recorded after the end


def test_a_rollback_of_one_service_leaves_the_other_alone(world: OrgWorld) -> None:
    for name in ("api", "web"):  # each service live on a version of its own
        world.deploy(f"{name} v1.0.1")
        good = world.new_run(f"Deploy v1.0.1 of {name} to production")
        world.approve(good, user=OWNERS[name])
        assert world.finished(good).status is RunStatus.SUCCEEDED
    (world.root / "hosts" / "web-prod" / "broken").touch()  # web's smoke test fails
    world.deploy("web v1.1.0")
    web = world.new_run("Deploy v1.1.0 of web to production")
    world.approve(web, user="UWEB")
    assert world.finished(web).status is RunStatus.ROLLED_BACK
    assert world.version("web-prod") == "v1.0.1"  # rolled back
    assert world.version("api-prod") == "v1.0.1"  # untouched
    (world.root / "hosts" / "web-prod" / "broken").unlink()
    api = wait_until(lambda: (w := world.store.history.current("api", "production")).version
                     == "v1.0.1" and w, what="api's history on v1.0.1")
    assert api.run_id != web.id
    wait_until(lambda: world.store.history.current("web", "production").version == "v1.0.1",
               what="web's history back on v1.0.1")


def test_a_channel_default_names_the_service(world: OrgWorld) -> None:
    world.deploy("v1.2.0", channel="CAPI")
    run = world.new_run("Deploy v1.2.0 of api to production")
    assert run.service == "api"
    assert world.store.plans.get(run.plan_id, run.plan_version).service == "api"
    # a request naming a service wins over the channel's default
    world.deploy("web v1.2.0", channel="CAPI")
    assert world.new_run("Deploy v1.2.0 of web to production").service == "web"


def test_a_request_naming_no_service_asks_and_plans_on_the_askers_click(
        world: OrgWorld) -> None:
    before = {r.id for r in world.store.runs.recent(limit=100)}
    status, _, took = world.deploy("v1.3.0", user="UALICE")
    assert status == 200 and took < 1.0  # acked before anything is read or asked
    question = wait_until(lambda: next((c for c in world.standin.of("chat.postEphemeral")
                                        if c.payload.get("user") == "UALICE"
                                        and "Which service" in c.text_of_blocks()), None),
                          what="the which-service question")
    buttons = [e for b in question.blocks if b["type"] == "actions" for e in b["elements"]]
    assert [e["text"]["text"] for e in buttons] == ["api", "web"]
    ask_id = buttons[0]["value"].split(":")[0]
    assert 0 < world.redis.pttl(world.store.keys.ask(ask_id)) <= 900_000  # kept, with its TTL; nothing planned
    assert {r.id for r in world.store.runs.recent(limit=100)} == before

    web = next(e for e in buttons if e["text"]["text"] == "web")
    world.click(web["action_id"], web["value"], user="UBOB")  # not the asker
    wait_until(lambda: "only the person who asked" in world.told("UBOB"), what="the refusal")
    assert world.redis.exists(world.store.keys.ask(ask_id)) == 1  # still the asker's to choose
    assert {r.id for r in world.store.runs.recent(limit=100)} == before

    world.click(web["action_id"], web["value"], user="UALICE")
    run = world.new_run("Deploy v1.3.0 of web to production")
    assert (run.service, run.requested_by) == ("web", "UALICE")
    assert world.redis.exists(world.store.keys.ask(ask_id)) == 0
    world.click(web["action_id"], web["value"], user="UALICE")  # a second click: no plan
    wait_until(lambda: "no longer waiting" in world.told("UALICE"), what="the second click")
    assert [r for r in world.store.runs.recent(limit=100) if r.goal == run.goal] == [
        world.store.runs.get(run.id)]


def test_the_menu_choice_and_an_unknown_service(world: OrgWorld) -> None:
    world.deploy("webb v1.4.0", user="UERIN")
    told = wait_until(lambda: "webb" in world.told("UERIN") and world.told("UERIN"),
                      what="the unknown service refused")
    assert "'webb' is not a service (did you mean web?); known services: api, web" in told
    assert not [r for r in world.store.runs.recent(limit=100) if "v1.4.0" in r.goal]
    world.deploy("v1.4.0", user="UERIN")
    question = wait_until(lambda: next((c for c in world.standin.of("chat.postEphemeral")
                                        if c.payload.get("user") == "UERIN"
                                        and "Which service" in c.text_of_blocks()), None),
                          what="the which-service question")
    value = button(question, f"{CHOOSE}:api")
    menu = {"type": "static_select", "action_id": "choose_service_menu", "block_id": "b",
            "selected_option": {"value": value}, "action_ts": str(time.time())}
    world.click("", "", user="UERIN", action=menu)
    assert world.new_run("Deploy v1.4.0 of api to production").service == "api"


def test_an_owner_of_api_is_refused_on_webs_plan(world: OrgWorld) -> None:
    world.deploy("web v1.5.0")
    web = world.new_run("Deploy v1.5.0 of web to production")
    world.approve(web, user="UAPI")
    wait_until(lambda: "Not approved" in world.told("UAPI") and "UWEB" in world.told("UAPI"),
               what="the refusal naming web's approvers")
    assert world.store.runs.get(web.id).status is RunStatus.AWAITING_APPROVAL
    assert world.store.runs.get(web.id).approvals == []
    world.click(bk.ActionId.REJECT, bk.button_value(web), user="UAPI")  # nor may they reject
    wait_until(lambda: world.told("UAPI").count("🚫") >= 2, what="the reject refused")
    refused = [e for e in world.store.audit.entries(run_id=web.id) if e.action == "refused"]
    assert {(e.actor, e.details.get("what")) for e in refused} == {("UAPI", "approve"),
                                                                   ("UAPI", "reject")}
    world.approve(web, user="UWEB")  # web's owner may
    wait_until(lambda: world.store.runs.get(web.id).approvals, what="web's owner's approval")


def test_the_home_lists_owned_services_first(world: OrgWorld) -> None:
    bot = world.runtime.bot
    from bot.slack.home import home_data

    world.deploy("web v1.9.0")
    world.deploy("api v1.9.0")
    world.new_run("Deploy v1.9.0 of web to production")
    world.new_run("Deploy v1.9.0 of api to production")
    data = home_data(bot, "UWEB")
    assert data.environments[:2] == ["web/production", "web/staging"]
    assert data.environments[2:] == ["api/production", "api/staging"]
    assert {label: w.version for label, w in data.deployed.items()} == {
        f"{w.service}/{w.environment}": w.version for w in world.store.history.matrix()}
    # each waiting plan is offered by its own service's owners' rule: web's to UWEB only
    assert data.pending and {r.service for r in data.pending} == {"web"}
    assert {r.service for r in home_data(bot, "UAPI").pending} == {"api"}
    world.signer.event({"type": "app_home_opened", "user": "UWEB", "channel": "DUWEB",
                        "tab": "home", "event_ts": str(time.time())}, event_id="EvHome1")
    view = wait_until(lambda: next((c for c in world.standin.of("views.publish")
                                    if c.payload.get("user_id") == "UWEB"), None),
                      what="UWEB's Home")
    text = view.text_of_blocks()
    assert len(view.blocks) <= MAX_HOME_BLOCKS
    assert text.index("web/production") < text.index("api/production")


def test_a_lock_by_hand_takes_the_channels_service(world: OrgWorld) -> None:
    def lock(channel: str) -> Any:
        return world.signer.command("/deckhand", 'lock production --reason "db work"',
                                    user="UAPI", channel=channel,
                                    response_url=f"{world.standin.url}/response/UAPI")
    lock("CDEPLOY")  # no default here, and the request names no service
    wait_until(lambda: "which service?" in world.told("UAPI"), what="which service, listed")
    assert world.store.manual_locks.all(service="api") == {}
    lock("CAPI")
    held = wait_until(lambda: world.store.manual_locks.get("production", service="api"),
                      what="api/production locked by hand")
    assert (held.holder, world.store.manual_locks.all(service="web")) == ("UAPI", {})
    world.signer.command("/deckhand", "unlock production", user="UAPI", channel="CAPI",
                         response_url=f"{world.standin.url}/response/UAPI")
    wait_until(lambda: world.store.manual_locks.get("production", service="api") is None,
               what="the lock lifted")


def test_the_workflow_step_takes_the_channels_service_and_has_nobody_to_ask(
        world: OrgWorld) -> None:
    def execute(execution: str, channel: str) -> None:
        world.signer.event({
            "type": "function_executed", "function_execution_id": execution,
            "workflow_execution_id": f"W{execution}", "event_ts": str(time.time()),
            "bot_access_token": "xwfp-test-token",
            "function": {"id": "Fn1", "callback_id": "deploy_with_deckhand",
                         "title": "Deploy with deckhand", "type": "app"},
            "inputs": {"request": "v1.7.0", "channel": channel, "requested_by": "UALICE"}},
            event_id=f"Ev{execution}")
    execute("FxOrg1", "CDEPLOY")
    failed = wait_until(lambda: next((c.payload for c in world.standin.of(
        "functions.completeError") if c.payload.get("function_execution_id") == "FxOrg1"),
        None), what="the step failed")
    assert "which service? This organisation has api, web" in str(failed["error"])
    assert not [r for r in world.store.runs.recent(limit=100) if "v1.7.0" in r.goal]
    execute("FxOrg2", "CAPI")
    run = world.new_run("Deploy v1.7.0 of api to production")
    assert run.service == "api"
    world.click(bk.ActionId.REJECT, bk.button_value(run), user="UAPI")  # the step ends too
    world.signer.interaction({
        "type": "view_submission", "user": {"id": "UAPI"}, "team": {"id": "T1"},
        "api_app_id": "A1", "trigger_id": "t",
        "view": {"id": "V1", "type": "modal", "callback_id": bk.ViewId.REJECT_SUBMIT,
                 "private_metadata": json.dumps({"run": run.id, "v": 1, "channel": "CAPI"}),
                 "state": {"values": {"reason": {"value": {"type": "plain_text_input",
                                                           "value": "not today"}}}}}})
    ended = wait_until(lambda: next((c.payload for c in world.standin.of(
        "functions.completeError") if c.payload.get("function_execution_id") == "FxOrg2"),
        None), what="the step failed with the rejection")
    assert "rejected" in str(ended["error"])


def test_a_mention_names_its_service_or_is_asked(world: OrgWorld) -> None:
    def mention(text: str, event_id: str) -> None:
        world.signer.event({"type": "app_mention", "user": "UFRAN", "channel": "CDEPLOY",
                            "text": f"<@UBOT> {text}", "ts": str(time.time())},
                           event_id=event_id)
    mention("deploy web/v1.8.0", "EvMention1")
    assert world.new_run("Deploy v1.8.0 of web to production").service == "web"
    mention("deploy v1.8.1", "EvMention2")
    wait_until(lambda: "Which service is" in world.told("UFRAN"), what="the question")
    assert not [r for r in world.store.runs.recent(limit=100) if "v1.8.1" in r.goal]


def test_a_schedule_added_in_a_channel_is_its_services(world: OrgWorld) -> None:
    world.signer.command("/deckhand", 'schedule add "every day at 02:00" deploy v2.0.0',
                         user="UAPI", channel="CAPI",
                         response_url=f"{world.standin.url}/response/UAPI")
    schedule = wait_until(lambda: next((s for s in world.store.schedules.all()
                                        if "v2.0.0" in s.request), None), what="the schedule")
    assert (schedule.service, schedule.channel) == ("api", "CAPI")
