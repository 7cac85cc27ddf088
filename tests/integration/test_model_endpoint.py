"""A team's own model server (issue 44): a wrong model name, a server without structured
output, per-endpoint settings from the config — through the real openai client against the
stand-in behaving that way."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import openai
import pytest

from agents.config import Config, load_config
from agents.errors import ModelNotServed, ModelRejected, ModelTimeout, PlannerError
from agents.planning.llm import LLMPlanner, RetryPolicy
from agents.planning.prompt import (
    TOOLS_IN_FULL,
    estimate_tokens,
    largest_plan_prompt,
    plan_to_wire,
    tools_for,
)
from agents.requests.playbooks import PlaybookPlanner
from agents.settings import PlannerEndpoint, Settings
from agents.store import Store
from bot.cli import main
from tests.fixtures.openai_standin import API_KEY, OpenAIStandin, Reply
from tests.fixtures.otlp import Receiver
from tests.fixtures.polling import wait_until
from tests.fixtures.slack_standin import SlackStandin
from tests.fixtures.slack_world import start_world

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
REQUEST = "put v2.3.1 on staging"


@pytest.fixture(scope="module")
def config() -> Config:
    return load_config(EXAMPLES / "deckhand.yml")


def planner_for(config: Config, standin: OpenAIStandin, *, model: str = "standin-model",
                timeout: float = 5.0, **options: Any) -> LLMPlanner:
    client = openai.OpenAI(api_key=API_KEY, base_url=standin.base_url, timeout=timeout,
                           max_retries=0)
    return LLMPlanner(config, client=client, model=model,
                      retry=RetryPolicy(attempts=3, sleep=_no_sleep), **options)


def _no_sleep(seconds: float) -> None:
    raise AssertionError(f"nothing here may be retried (asked to wait {seconds} s)")


def staging_answer(config: Config) -> dict[str, Any]:
    return plan_to_wire(PlaybookPlanner(config.playbooks).plan("deploy v2.3.1 to staging",
                                                               requested_by="gold"))


def formats(standin: OpenAIStandin) -> list[str | None]:
    return [(r.response_format or {}).get("type") for r in standin.requests]


# -- a wrong model name -------------------------------------------------------------------


def test_wrong_model_is_named_with_what_the_server_serves(
        config: Config, openai_standin: OpenAIStandin) -> None:
    openai_standin.serve(["gemma3-270m", "qwen2.5-0.5b"])
    planner = planner_for(config, openai_standin, model="gemma3")

    with pytest.raises(ModelNotServed) as err:
        planner.plan(REQUEST, requested_by="U1")

    message = str(err.value)
    assert "has no model 'gemma3'; it serves: gemma3-270m, qwen2.5-0.5b" in message
    assert "planner.model" in message
    # one chat request: the 400 was not misread as a refused format and tried again
    assert formats(openai_standin) == ["json_schema"]
    assert openai_standin.listings == 1 and planner.format == "json_schema"


def test_a_400_without_models_api_says_the_servers_own_words(
        config: Config, openai_standin: OpenAIStandin) -> None:
    """FastAPI-shaped error body, no /models: the message is the server's, not 'Error code'."""
    openai_standin.reply(Reply(status=400, body={"detail": "Model gemma3 is not loaded"}))
    planner = planner_for(config, openai_standin, model="gemma3")

    with pytest.raises(ModelRejected) as err:
        planner.plan(REQUEST, requested_by="U1")

    assert "refused the request (HTTP 400): Model gemma3 is not loaded" in str(err.value)
    assert formats(openai_standin) == ["json_schema"]


def test_a_400_with_no_message_for_a_served_model_tries_the_next_format(
        config: Config, openai_standin: OpenAIStandin) -> None:
    """No words to go by: the model checks out at /models, so the format is what it refused."""
    openai_standin.serve(["standin-model"])
    openai_standin.reply(Reply(status=400, raw=b"", content_type="text/plain"))
    openai_standin.reply_json(staging_answer(config))
    planner = planner_for(config, openai_standin)

    plan = planner.plan(REQUEST, requested_by="U1")

    assert plan.steps and formats(openai_standin) == ["json_schema", "json_object"]


def test_a_400_about_the_context_is_not_read_as_a_wrong_model(
        config: Config, openai_standin: OpenAIStandin) -> None:
    """llama.cpp lists its own alias and answers to any name: its 400s are about the request."""
    openai_standin.serve(["/models/gemma.gguf"], any_name=True)
    openai_standin.reply_error(400, "the request exceeds the available context size, try "
                                    "increasing it")
    planner = planner_for(config, openai_standin, model="gemma3")

    with pytest.raises(ModelRejected) as err:
        planner.plan(REQUEST, requested_by="U1")

    assert "(HTTP 400): the request exceeds the available context size" in str(err.value)
    assert "set planner.context_tokens and run `deckhand check`" in str(err.value)
    assert openai_standin.listings == 0 and formats(openai_standin) == ["json_schema"]


# -- no structured output -----------------------------------------------------------------


def test_a_server_without_structured_output_is_asked_in_the_prompt(
        config: Config, openai_standin: OpenAIStandin) -> None:
    openai_standin.refuse_formats({"json_schema", "json_object"})
    chatty = f"Sure! Here is the plan:\n{json.dumps(staging_answer(config))}\nHope it helps."
    openai_standin.reply_content(chatty)
    openai_standin.reply_content(json.dumps(staging_answer(config)))
    planner = planner_for(config, openai_standin)

    first = planner.plan(REQUEST, requested_by="U1")
    planner.plan(REQUEST, requested_by="U1")

    assert [s.tool for s in first.steps] == [s.tool for s in PlaybookPlanner(
        config.playbooks).plan("deploy v2.3.1 to staging", requested_by="g").steps]
    # refused twice, then the prompt alone; the next plan starts there
    assert formats(openai_standin) == ["json_schema", "json_object", None, None]
    assert "response_format" not in openai_standin.requests[-1].body
    assert "matching this JSON schema" in openai_standin.requests[-1].messages[0]["content"]
    assert planner.format == "prompt"


def test_prompt_mode_answers_are_validated_and_repaired(
        config: Config, openai_standin: OpenAIStandin) -> None:
    bad = staging_answer(config)
    bad["steps"][0]["params"] = [{"name": "version", "value": "2.3.1"}]
    openai_standin.reply_content("```json\n" + json.dumps(bad) + "\n```")
    openai_standin.reply_content(json.dumps(staging_answer(config)))
    planner = planner_for(config, openai_standin, format="prompt")

    plan = planner.plan(REQUEST, requested_by="U1")

    assert plan.planner.repairs == 1 and formats(openai_standin) == [None, None]


def test_a_server_refusing_even_the_prompt_mode_says_why(
        config: Config, openai_standin: OpenAIStandin) -> None:
    openai_standin.reply_error(400, "response_format is not supported")
    planner = planner_for(config, openai_standin, format="prompt")

    with pytest.raises(ModelRejected, match="HTTP 400.*response_format is not supported"):
        planner.plan(REQUEST, requested_by="U1")


# -- per-endpoint settings in the config ---------------------------------------------------


def endpoint_config(tmp_path: Path, standin: OpenAIStandin, **planner: Any) -> Config:
    text = (EXAMPLES / "deckhand.yml").read_text()
    body = json.dumps({"base_url": standin.base_url, **planner})
    path = tmp_path / "deckhand.yml"
    (tmp_path / "tools.yml").write_text((EXAMPLES / "tools.yml").read_text())
    path.write_text(f"{text}\nplanner: {body}\n")
    return load_config(path)


def test_the_configs_endpoint_wins_over_the_environment(
        tmp_path: Path, openai_standin: OpenAIStandin) -> None:
    config = endpoint_config(tmp_path, openai_standin, model="gemma3-270m", timeout=7,
                             max_tokens=300, format="json_object", retries=0)
    settings = Settings(OPENAI_API_KEY=API_KEY, OPENAI_BASE_URL="http://127.0.0.1:9/v1",
                        OPENAI_MODEL="other", OPENAI_TIMEOUT=60)
    openai_standin.reply_json(staging_answer(config))

    planner = LLMPlanner.from_settings(config, settings)
    planner.plan(REQUEST, requested_by="U1")

    sent = openai_standin.requests[0].body
    assert sent["model"] == "gemma3-270m" and sent["max_tokens"] == 300
    assert sent["response_format"] == {"type": "json_object"}
    assert planner.retry.attempts == 1 and planner.client.timeout == 7


def test_a_timeout_from_the_config_is_not_retried(
        tmp_path: Path, openai_standin: OpenAIStandin) -> None:
    config = endpoint_config(tmp_path, openai_standin, timeout=0.2, retries=3)
    openai_standin.reply_error(200, "never in time", delay=30)
    openai_standin.reply_error(200, "never in time", delay=30)
    planner = LLMPlanner.from_settings(config, Settings(OPENAI_API_KEY=API_KEY,
                                                        OPENAI_MODEL="standin-model"))
    planner.retry = RetryPolicy(attempts=4, sleep=_no_sleep)

    with pytest.raises(ModelTimeout, match="within 0.2 s; not asked again"):
        planner.plan(REQUEST, requested_by="U1")
    assert len(openai_standin.requests) == 1


def test_a_bad_planner_key_is_a_config_error_naming_it(tmp_path: Path,
                                                       openai_standin: OpenAIStandin) -> None:
    from tools.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        endpoint_config(tmp_path, openai_standin, fromat="prompt")
    assert "has no key fromat" in str(err.value)
    with pytest.raises(ConfigError) as err:
        endpoint_config(tmp_path, openai_standin, format="yaml")
    assert "planner.format" in str(err.value) and "json_schema" in str(err.value)


def test_repairs_are_carried_by_the_error_when_no_plan_comes(
        config: Config, openai_standin: OpenAIStandin) -> None:
    bad = staging_answer(config)
    bad["steps"][0]["params"] = [{"name": "version", "value": "2.3.1"}]
    for _ in range(3):
        openai_standin.reply_json(bad)

    with pytest.raises(PlannerError) as err:
        planner_for(config, openai_standin).plan(REQUEST, requested_by="U1")
    assert err.value.repairs == 2 and type(err.value) is PlannerError


# -- a model failure is no refusal: the face, the audit and the trace say which it was ------


def test_a_wrong_model_is_a_failure_in_the_output_the_audit_and_the_trace(
        sample_config: Config, redis_url: str, store: Store, otlp: Receiver,
        openai_standin: OpenAIStandin) -> None:
    openai_standin.serve(["gemma3-270m"])
    env = {**os.environ, "REDIS_URL": redis_url, "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint,
           "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": API_KEY, "OPENAI_MODEL": "gemma3",
           "OPENAI_BASE_URL": openai_standin.base_url}
    done = subprocess.run([sys.executable, "-m", "bot.cli", "plan", "restart the api on prod-2",
                           "--config", str(sample_config.path)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)

    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode != 0
    assert ("No plan: the planner's model gave no answer (ModelNotServed); this is not a "
            "refusal.") in said
    assert "has no model 'gemma3'; it serves: gemma3-270m" in said
    entries = [e for e in store.audit.entries(limit=50) if e.action.startswith("plan_")]
    assert [(e.action, e.details["error"]) for e in entries] == [("plan_failed",
                                                                  "ModelNotServed")]
    (root,) = wait_until(lambda: otlp.named("deckhand.request"), what="the request's root")
    assert (root.status, root.status_message) == (2, "failed: ModelNotServed")
    (chat,) = otlp.named("chat gemma3")
    assert chat.attributes["error.type"] == "ModelNotServed"


# -- deckhand check: the prompt against the context, the endpoint asked once -----------------


def check(path: Path, standin: OpenAIStandin, monkeypatch: pytest.MonkeyPatch,
          capsys: pytest.CaptureFixture[str], *, model: str) -> tuple[int, str]:
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("OPENAI_MODEL", model)
    code = main(["check", str(path)])
    return code, " ".join(capsys.readouterr().out.split())


def test_check_says_when_the_prompt_cannot_fit_and_the_model_is_not_served(
        tmp_path: Path, openai_standin: OpenAIStandin, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    config = endpoint_config(tmp_path, openai_standin, context_tokens=4096, max_tokens=1024)
    openai_standin.serve(["gemma3-270m"])

    code, out = check(config.path, openai_standin, monkeypatch, capsys, model="gemma3")

    prompt = largest_plan_prompt(config)
    assert code == 1
    assert (f"planner prompt: up to {len(prompt):,} characters, about "
            f"{estimate_tokens(prompt):,} tokens, plus 1,024 for the answer") in out
    assert "more than planner.context_tokens 4,096" in out
    assert "has no model 'gemma3'; it serves: gemma3-270m" in out
    # its list first; a name it does not list, one token (llama.cpp answers any name)
    assert openai_standin.listings == 1
    assert [r.body["max_tokens"] for r in openai_standin.requests] == [1]


def test_check_with_a_model_that_fits_and_is_served(
        tmp_path: Path, openai_standin: OpenAIStandin, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    config = endpoint_config(tmp_path, openai_standin, context_tokens=32768)
    openai_standin.serve(["gemma3-270m"])

    code, out = check(config.path, openai_standin, monkeypatch, capsys, model="gemma3-270m")

    assert code == 0, out
    assert "fits planner.context_tokens 32,768" in out
    assert "answers and serves gemma3-270m" in out


def test_check_accepts_a_server_that_answers_a_name_it_does_not_list(
        tmp_path: Path, openai_standin: OpenAIStandin, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    config = endpoint_config(tmp_path, openai_standin)
    openai_standin.serve(["/models/gemma.gguf"], any_name=True)
    openai_standin.reply_content("OK")

    code, out = check(config.path, openai_standin, monkeypatch, capsys, model="gemma3")

    assert code == 0, out
    assert ("answered a one-token call to gemma3, though it lists only /models/gemma.gguf "
            "(it does not check the name)") in out


def test_check_asks_a_server_without_a_model_list_for_one_token(
        tmp_path: Path, openai_standin: OpenAIStandin, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    config = endpoint_config(tmp_path, openai_standin)
    openai_standin.reply_content("OK")

    code, out = check(config.path, openai_standin, monkeypatch, capsys, model="tiny")

    assert code == 0, out
    assert "answered a one-token call to tiny (it lists no models)" in out
    assert "set planner.context_tokens to have it checked" in out
    assert [r.body["max_tokens"] for r in openai_standin.requests] == [1]


# -- a large catalog: only the tools a request can need, and what was left out ----------------


def large_catalog(tmp_path: Path, extra: int = 60) -> Config:
    """The examples' tools plus ``extra`` read-only report tools: past TOOLS_IN_FULL."""
    tools = (EXAMPLES / "tools.yml").read_text()
    tools += "".join(f"\n  report_{n}:\n    description: Print inventory report {n} of the "
                     f"billing ledger.\n    command: \"echo {n}\"\n    target: local\n"
                     for n in range(extra))
    (tmp_path / "tools.yml").write_text(tools)
    path = tmp_path / "deckhand.yml"
    path.write_text((EXAMPLES / "deckhand.yml").read_text())
    return load_config(path)


def test_a_large_catalog_sends_the_tools_a_request_names_and_says_what_it_left_out(
        tmp_path: Path, openai_standin: OpenAIStandin) -> None:
    config = large_catalog(tmp_path)
    assert len(config.catalog.tools) > TOOLS_IN_FULL
    openai_standin.reply_json(staging_answer(config))
    planner = planner_for(config, openai_standin)

    plan = planner.plan("deploy v2.3.1 to staging, test it and tell the team",
                        requested_by="U1")

    sent = openai_standin.requests[0]
    schema = json.dumps(sent.response_format)
    tools = sorted(set(re.findall(r'"enum": \[([^\]]*)\]', schema)[0].replace('"', "")
                       .replace(" ", "").split(",")))
    assert {"deploy", "rollback", "notify_team", "run_tests"} <= set(tools)  # rollback: undo
    assert not [t for t in tools if t.startswith("report_")]
    system = sent.messages[0]["content"]
    left_out = len(config.catalog.tools) - len(tools)
    assert f"({left_out} other tools of this service are not listed" in system
    assert "- report_7:" not in system and "- deploy:" in system
    assert f"sent {len(tools)} of {len(config.catalog.tools)} tools; left out: " in \
        plan.planner.note
    assert "report_0" in plan.planner.note


def test_a_request_naming_no_tool_gets_the_whole_catalog(
        tmp_path: Path, openai_standin: OpenAIStandin) -> None:
    config = large_catalog(tmp_path)
    choice = tools_for(config, "zzz qqq")
    assert choice.sent == sorted(config.catalog.tools) and choice.left_out == []
    small = load_config(EXAMPLES / "deckhand.yml")
    assert tools_for(small, "deploy").left_out == []  # a small catalog is always sent whole


def test_slack_tells_a_model_failure_as_no_refusal(
        sample_config: Config, store: Store, slack_standin: SlackStandin,
        openai_standin: OpenAIStandin, monkeypatch: pytest.MonkeyPatch) -> None:
    openai_standin.serve(["gemma3-270m"])
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    sample_config.planner = PlannerEndpoint(base_url=openai_standin.base_url, model="gemma3",
                                            retries=0)
    world = start_world(sample_config, store, slack_standin)
    try:
        world.deploy("the api somewhere nice")
        told = world.standin.wait_for(lambda: world.told("1"), what="the failure, told")
    finally:
        world.runtime.stop()

    said = " ".join(" ".join(told).split())
    assert "No plan: the planner's model gave no answer (ModelNotServed); this is not a " \
           "refusal." in said
    assert "has no model 'gemma3'; it serves: gemma3-270m" in said
    actions = [e.action for e in store.audit.entries(limit=50)]
    assert "plan_failed" in actions and "plan_refused" not in actions
    assert store.runs.recent() == []  # nothing stored to approve


def test_the_main_configs_endpoint_is_every_services(tmp_path: Path) -> None:
    """One endpoint for the organisation: each service's Config carries the main file's."""
    from agents.org import load_org

    (tmp_path / "deckhand.yml").write_text(
        "services:\n"
        "  docs:\n"
        "    tools: {publish: {description: publish the docs, command: echo hi}}\n"
        "    inventory: {hosts: {d1: {connection: local}}, environments: {live: {hosts: [d1]}}}\n"
        "planner: {base_url: 'http://127.0.0.1:8080/v1', model: gemma3-270m, format: prompt,\n"
        "          context_tokens: 8192}\n")
    (docs,) = load_org(tmp_path / "deckhand.yml").services.values()
    assert (docs.planner.model, docs.planner.format, docs.planner.context_tokens) == (
        "gemma3-270m", "prompt", 8192)
