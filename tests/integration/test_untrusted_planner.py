"""Issue 19, "an untrusted planner": a hostile model answers through the real openai client
(loopback stand-in); each test asserts what ran (canary files, hosts) and what approvers saw.
Finding 2 (promotion order) is covered with the targets work, not here."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from rich.console import Console

from agents.config import Config
from agents.errors import PlanError, PlannerError
from agents.plan.diff import diff_plans
from agents.planning.prompt import plan_to_wire
from agents.requests.playbooks import PlaybookPlanner
from agents.run.record import RunStatus
from agents.services import Services, build_services
from agents.settings import Settings
from agents.store import Store
from bot.cli import main
from bot.cli.demo import probe
from bot.scheduler import Scheduler, occurrence_handler
from bot.slack import blocks as bk
from bot.terminal.console import ConsoleFlow, Decision
from tests.fixtures.openai_standin import API_KEY, OpenAIStandin, Reply, completion
from tools.catalog import ParamSpec, Tool


@pytest.fixture
def services(sample_config: Config, store: Store, openai_standin: OpenAIStandin) -> Services:
    return llm_services(sample_config, store, openai_standin)


def llm_services(config: Config, store: Store, standin: OpenAIStandin) -> Services:
    settings = Settings(OPENAI_API_KEY=SecretStr(API_KEY), OPENAI_BASE_URL=standin.base_url,
                        OPENAI_MODEL="standin-model", OPENAI_TIMEOUT=5)
    return build_services(config, settings, store=store)


def flow(services: Services, decision: Decision = Decision.REJECT) -> tuple[ConsoleFlow, Console]:
    console = Console(record=True, width=240)
    return ConsoleFlow(services, console, user="alice", ask=lambda: decision,
                       confirm=lambda word: word), console


def step(id: str, tool: str, params: dict[str, Any] | None = None,  # noqa: A002
         depends_on: list[str] | None = None, success: dict[str, Any] | None = None
         ) -> dict[str, Any]:
    return {"id": id, "tool": tool, "description": "", "success": success,
            "params": [{"name": k, "value": v} for k, v in (params or {}).items()],
            "depends_on": depends_on or []}


def wire(steps: list[dict[str, Any]], goal: str = "a goal") -> dict[str, Any]:
    return {"cannot_plan": None, "goal": goal, "steps": steps, "rollback": []}


def playbook_wire(config: Config, request: str) -> dict[str, Any]:
    return plan_to_wire(PlaybookPlanner(config.playbooks).plan(request, requested_by="gold"))


def notifications(config: Config) -> str:
    log = Path(str(config.vars["notify_log"]))
    return log.read_text() if log.exists() else ""


def repairs(standin: OpenAIStandin) -> list[str]:
    return [str(r.messages[-1]["content"]) for r in standin.requests[1:]]


# -- 1. success belongs to tools.yml; plans only add, and approvers see it -------------------


def test_1_a_plan_cannot_redefine_success(services: Services, sample_config: Config,
                                          openai_standin: OpenAIStandin) -> None:
    hostile = playbook_wire(sample_config, "deploy v2.4.0-broken")
    for s in hostile["steps"]:
        if s["tool"] == "smoke_test":
            s["success"] = {"exit_code": 1, "output_pattern": None}
    for _ in range(3):
        openai_standin.reply_json(hostile)
    console_flow, _ = flow(services, Decision.APPROVE)

    with pytest.raises(PlannerError, match="would relax tool smoke_test's check"):
        console_flow.handle("ship v2.4.0-broken everywhere", yes=True)

    assert all("exit code 0" in text for text in repairs(openai_standin))
    assert services.store.runs.recent() == []
    assert "v2.4.0-broken" not in {p.body for p in probe(sample_config)}


def test_1_added_criteria_are_enforced_and_shown_everywhere(
        services: Services, sample_config: Config, openai_standin: OpenAIStandin) -> None:
    answer = playbook_wire(sample_config, "deploy v2.3.1 to staging")
    smoke = next(s for s in answer["steps"] if s["tool"] == "smoke_test")
    smoke["success"] = {"exit_code": 0, "output_pattern": "^GET /health -> 299"}
    openai_standin.reply_json(answer)
    console_flow, console = flow(services, Decision.APPROVE)

    run = console_flow.handle("get v2.3.1 onto staging", yes=True)  # no playbook: the LLM

    assert run is not None and run.status is RunStatus.ROLLED_BACK
    assert "output never matched '^GET /health -> 299'" in str(run.steps["smoke_staging"].error)
    assert "output matches '^GET /health -> 299'" in console.export_text()
    plan = services.store.plans.get(run.plan_id, run.plan_version)
    shown = json.dumps(bk.plan_blocks(plan, run, services.config.policy))
    assert "success also needs" in shown and "^GET /health -&gt; 299" in shown
    relaxed = plan.revised(steps=[s.model_copy(update={"success": None}).model_dump()
                                  for s in plan.steps])
    lines = [line.text for line in diff_plans(plan, relaxed).lines()]
    assert any("success: exit 0 · output matches '^GET /health -> 299' → tool only" in t
               for t in lines)


# -- 3. regexes are RE2: linear time, compiled at validation ---------------------------------


def test_3_a_catastrophic_pattern_runs_in_linear_time(
        services: Services, sample_config: Config, openai_standin: OpenAIStandin) -> None:
    message = "a" * 30 + "!"
    openai_standin.reply_json(wire([step("notify", "notify_team", {"message": message},
                                         success={"exit_code": 0,
                                                  "output_pattern": "^notified: (a+)+$"})]))
    console_flow, _ = flow(services, Decision.APPROVE)

    started = time.perf_counter()
    run = console_flow.handle("tell the team", yes=True)

    assert time.perf_counter() - started < 10  # backtracking `re` takes minutes here
    assert run is not None and run.status is RunStatus.FAILED
    assert "output never matched" in str(run.steps["notify"].error)


def test_3_an_invalid_pattern_is_a_validation_error(
        services: Services, openai_standin: OpenAIStandin) -> None:
    bad = wire([step("look", "status", {"environment": "staging"},
                     success={"exit_code": None, "output_pattern": "("})])
    good = wire([step("look", "status", {"environment": "staging"})])
    openai_standin.reply_json(bad)
    openai_standin.reply_json(good)

    plan = services.make_plan("is staging up", requested_by="alice", face="cli")

    assert plan.steps[0].success is None and len(openai_standin.requests) == 2
    assert "invalid regular expression '('" in repairs(openai_standin)[0]
    with pytest.raises(ValueError, match="invalid regular expression"):
        Tool(name="t", description="d", command="true", outputs={"x": "(a"})
    with pytest.raises(ValueError, match="invalid escape"):
        Tool(name="t", description="d", command="true", outputs={"x": r"(a)\1"})


# -- 4. no approval unless tools.yml opts a tool out ----------------------------------------


def test_4_the_model_alone_cannot_message_the_team(
        services: Services, sample_config: Config, openai_standin: OpenAIStandin) -> None:
    openai_standin.reply_json(wire([step("say", "notify_team", {
        "message": "deploy of v9.9.9 to production approved and done"})]))
    console_flow, console = flow(services, Decision.REJECT)

    assert console_flow.handle("tell everyone it is done").status is RunStatus.REJECTED

    assert notifications(sample_config) == ""
    assert "Rejected — nothing was run" in console.export_text()
    assert [r.status for r in services.store.runs.recent()] == [RunStatus.REJECTED]
    with pytest.raises(PlanError, match="without approval"):
        services.queue_read_only(services.store.plans.get(services.store.runs.recent()[0].plan_id, 1),
                                 user="mallory")


def test_4_status_opted_out_in_tools_yml_still_runs_at_once(
        services: Services, openai_standin: OpenAIStandin) -> None:
    openai_standin.reply_json(wire([step("look", "status", {"environment": "staging"})]))
    console_flow, console = flow(services, Decision.REJECT)  # would reject if asked

    run = console_flow.handle("what is on staging")

    assert run is not None and run.status is RunStatus.SUCCEEDED
    assert "no approval needed" in console.export_text()


# -- 5. the model never sees a secret; help never echoes one --------------------------------


def test_5_secret_defaults_never_reach_the_model(
        sample_config: Config, store: Store, openai_standin: OpenAIStandin) -> None:
    sample_config.secrets.append("hunter2-db-password")
    defaults = {"db": ParamSpec(default="hunter2-db-password", required=False),
                "slack": ParamSpec(default="xoxb-1234567890-abcdefghij", required=False),
                "key": ParamSpec(default="plain-looking-value", secret=True, required=False),
                "level": ParamSpec(default="info", required=False)}
    sample_config.catalog.tools["report"] = Tool(name="report", description="send a report",
                                                 command="true {db} {slack} {key} {level}",
                                                 params=defaults)
    services = llm_services(sample_config, store, openai_standin)
    openai_standin.reply_json(wire([step("look", "status", {"environment": "staging"})]))

    services.make_plan("what is on staging", requested_by="alice", face="cli")

    system = str(openai_standin.requests[0].messages[0]["content"])
    assert "report: send a report" in system and "default 'info'" in system
    for secret in ("hunter2-db-password", "xoxb-1234567890-abcdefghij", "plain-looking-value"):
        assert secret not in json.dumps(openai_standin.requests[0].body)
    assert system.count("default set by the operator") == 3


def test_5_help_never_echoes_a_secret(sample_config: Config, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    code = main(["plan", "use token xoxb-1234567890-abcdefghij now", "--config",
                 str(sample_config.path)])
    out = capsys.readouterr()
    assert code == 2 and "don't know how to plan" in out.out
    assert "xoxb-1234567890" not in out.out + out.err


# -- 6. model text is data in the terminal --------------------------------------------------


def test_6_markup_in_model_text_is_shown_not_parsed(
        services: Services, openai_standin: OpenAIStandin) -> None:
    openai_standin.reply_json(wire([step("say", "notify_team", {"message": "[/x] hello"})],
                                   goal="[/] tell [bold]them"))
    console_flow, console = flow(services, Decision.REJECT)

    assert console_flow.handle("say hello").status is RunStatus.REJECTED

    text = console.export_text()
    assert "[/] tell [bold]them" in text and "message=[/x] hello" in text
    assert [r.status for r in services.store.runs.recent()] == [RunStatus.REJECTED]


# -- 7. malformed 200 answers are planner errors --------------------------------------------


@pytest.mark.parametrize(("reply", "message"), [
    (Reply(raw=b"<html><body>502 Bad Gateway</body></html>"), "body that is not JSON"),
    (Reply(raw=b"<html>login</html>", content_type="text/html"), "did not answer with a chat"),
    (Reply(body={**completion("x"), "choices": [{"index": 0, "message": None,
                                                 "finish_reason": "stop"}]}),
     "a choice without a message"),
])
def test_7_malformed_answers_are_planner_errors(services: Services,
                                                openai_standin: OpenAIStandin,
                                                reply: Reply, message: str) -> None:
    openai_standin.reply(reply)
    with pytest.raises(PlannerError, match=message):
        services.make_plan("do something new", requested_by="alice", face="cli")
    assert services.store.runs.recent() == []


# -- 8. repairs send a bounded excerpt --------------------------------------------------------


def test_8_repair_requests_stay_bounded(services: Services,
                                        openai_standin: OpenAIStandin) -> None:
    huge = json.dumps(wire([step("look", "status", {"environment": "staging"})],
                           goal="x" * 300_000))
    for _ in range(3):
        openai_standin.reply_content(huge)

    with pytest.raises(PlannerError, match="no valid plan after 2 repair"):
        services.make_plan("do something new", requested_by="alice", face="cli")

    sizes = [len(json.dumps(r.body)) for r in openai_standin.requests]
    assert sizes[1] < sizes[0] + 8_000 and sizes[2] == sizes[1]
    assert "more characters cut" in json.dumps(openai_standin.requests[2].body)


def test_8_a_huge_whitespace_answer_is_refused_in_linear_time(
        services: Services, openai_standin: OpenAIStandin) -> None:
    for _ in range(3):
        openai_standin.reply_content("{" + " " * 300_000 + "x```")
    started = time.perf_counter()
    with pytest.raises(PlannerError, match="not valid JSON"):
        services.make_plan("do something new", requested_by="alice", face="cli")
    assert time.perf_counter() - started < 10  # the fence regex took minutes here


# -- 9. smaller: output types, input lengths, coalesced firings ------------------------------


def test_9_an_output_of_the_wrong_kind_is_refused_at_planning(
        services: Services, openai_standin: OpenAIStandin) -> None:
    bad = wire([step("build", "build_image", {"version": "v2.3.1"}),
                step("test", "run_tests", {"version": "${steps.build.artifact}"}, ["build"])])
    for _ in range(3):
        openai_standin.reply_json(bad)
    with pytest.raises(PlannerError, match="cannot take output 'artifact'"):
        services.make_plan("build and test", requested_by="alice", face="cli")


def test_9_over_long_requests_get_a_clear_error(sample_config: Config,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    config = ["--config", str(sample_config.path)]
    assert main(["plan", "deploy v" + "1" * 10_000 + ".0.0", *config]) == 2
    assert main(["plan", "deploy v" + "1" * 600 + ".0.0", *config]) == 2
    out = capsys.readouterr()
    assert "at most 2000 can be planned" in out.out
    assert "goal: String should have at most 500 characters" in out.out
    assert "Traceback" not in out.out + out.err


def test_9_a_coalesced_firing_says_how_many_occurrences_it_stands_for(
        sample_config: Config, store: Store, redis_url: str) -> None:
    from tests.integration.test_schedules import T0, add

    services = build_services(sample_config, Settings(DECKHAND_TZ="Europe/Berlin"), store=store)
    add(services, '"*/10 * * * *" status staging')
    said: list[str] = []
    own = Store.connect(redis_url)
    replica = Scheduler(schedules=own.schedules, audit=own.audit, grace=timedelta(minutes=30),
                        name="late",
                        on_occurrence=occurrence_handler(services, lambda o: said.append(
                            o.message)))
    replica.tick(T0 + timedelta(minutes=45))
    assert len(said) == 1 and "stands for 3 occurrences, 2 missed one(s) coalesced" in said[0]


# -- 1 and 4 in Slack: a notification waits for approval; added criteria are on the plan ------


def test_slack_shows_criteria_and_holds_a_notification_for_approval(
        sample_config: Config, store: Store, slack_standin: Any, openai_standin: OpenAIStandin,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.fixtures.slack_world import start_world

    for name, value in (("OPENAI_API_KEY", API_KEY), ("OPENAI_MODEL", "standin-model"),
                        ("OPENAI_BASE_URL", openai_standin.base_url)):
        monkeypatch.setenv(name, value)
    openai_standin.reply_json(wire([step("say", "notify_team", {"message": "all done"},
                                         success={"exit_code": 0,
                                                  "output_pattern": "^notified: all"})]))
    world = start_world(sample_config, store, slack_standin)
    try:
        world.deploy("announce that it is done")
        shown = world.plan_message().text_of_blocks()
        assert "success also needs" in shown and "^notified: all" in shown
        assert [r.status for r in store.runs.recent()] == [RunStatus.AWAITING_APPROVAL]
        assert notifications(sample_config) == ""
    finally:
        world.runtime.stop()


def test_4_a_replan_that_adds_a_notification_is_approved_again(sample_config: Config) -> None:
    from agents.plan.model import Plan
    from agents.planning.planner import changes_mutating_steps

    look = {"id": "look", "tool": "status", "params": {"environment": "staging"}}
    say = {"id": "say", "tool": "notify_team", "params": {"message": "done"}}
    old = Plan(goal="g", steps=[look])
    catalog = sample_config.catalog
    assert changes_mutating_steps(old, old.revised(steps=[look, say]), catalog)
    assert not changes_mutating_steps(old, old.revised(steps=[look]), catalog)
