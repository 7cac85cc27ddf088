"""Prompt versions and plan provenance: the real LLMPlanner through openai.OpenAI against the
stand-in, runs in a real Redis, `deckhand runs show --llm`, the quality metrics and the GenAI
span of each model call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import openai
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agents.config import Config, load_config
from agents.plan.diff import diff_plans
from agents.plan.model import Plan, PlannerInfo
from agents.plan.targets import resolve
from agents.planning.llm import LLMPlanner, RetryPolicy
from agents.planning.prompt import plan_to_wire
from agents.prompts.templates import PromptSet
from agents.requests.playbooks import PlaybookPlanner
from agents.run.record import Approval, Event, EventKind, Run, RunStatus
from agents.store import Store
from bot.cli import main
from bot.metrics import Metrics
from tests.fixtures.openai_standin import API_KEY, OpenAIStandin
from tests.fixtures.otlp import Receiver
from tests.fixtures.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PROMPTS = ROOT / "agents" / "prompts"
SECRET = "hunter2-correct-horse-battery"
TOKEN = "sk-live0123456789abcdefghijkl"


def _config(tmp_path: Path, prompts: dict[str, str] | None = None) -> Config:
    """The example config (plus a configured secret) in ``tmp_path``; ``prompts`` maps
    template names to replacement texts, written next to it."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "tools.yml").write_text((EXAMPLES / "tools.yml").read_text())
    text = (EXAMPLES / "deckhand.yml").read_text() + f"\nsecrets: [{SECRET}]\n"
    if prompts:
        text += "planner:\n  prompts:\n"
        for name, body in prompts.items():
            (tmp_path / f"{name}.txt").write_text(body)
            text += f"    {name}: {name}.txt\n"
    (tmp_path / "deckhand.yml").write_text(text)
    return load_config(tmp_path / "deckhand.yml")


def _planner(config: Config, standin: OpenAIStandin) -> LLMPlanner:
    client = openai.OpenAI(api_key=API_KEY, base_url=standin.base_url, timeout=5,
                           max_retries=0)
    return LLMPlanner(config, client=client, model="standin-model",
                      retry=RetryPolicy(attempts=1, sleep=lambda _: None))


def _wire(config: Config, request: str = "deploy v2.3.1 to staging") -> dict[str, Any]:
    return plan_to_wire(PlaybookPlanner(config.playbooks).plan(request, requested_by="gold"))


def test_plans_record_prompt_version_model_usage_and_answer(
        tmp_path: Path, openai_standin: OpenAIStandin) -> None:
    planner = _planner(_config(tmp_path), openai_standin)
    openai_standin.reply_json(_wire(planner.config), prompt_tokens=1200, completion_tokens=300)

    info = planner.plan("put v2.3.1 on staging", requested_by="U1").planner

    assert planner.prompt_versions() == PromptSet().versions()
    assert (info.name, info.prompt, info.prompt_version) == ("llm", "plan",
                                                             PromptSet().version("plan"))
    assert (info.model, info.response_model) == ("standin-model", "standin-model")
    assert (info.temperature, info.seed) == (0.0, None)
    assert "seed" not in openai_standin.requests[0].body
    assert (info.prompt_tokens, info.completion_tokens, info.repairs) == (1200, 300, 0)
    assert info.latency_ms > 0
    assert info.answer is not None and json.loads(info.answer) == _wire(planner.config)


def test_a_seed_is_sent_and_recorded_when_set(tmp_path: Path,
                                              openai_standin: OpenAIStandin) -> None:
    planner = _planner(_config(tmp_path), openai_standin)
    openai_standin.reply_json(_wire(planner.config))
    planner.seed = 7
    assert planner.plan("put v2.3.1 on staging", requested_by="U1").planner.seed == 7
    assert openai_standin.requests[0].body["seed"] == 7


def test_a_changed_template_changes_the_version_recorded_on_new_plans(
        tmp_path: Path, openai_standin: OpenAIStandin) -> None:
    before = _planner(_config(tmp_path / "a"), openai_standin)
    changed = (PROMPTS / "plan.txt").read_text().replace("Plan this request",
                                                         "Plan this deploy request")
    after = _planner(_config(tmp_path / "b", {"plan": changed}), openai_standin)
    for _ in range(2):
        openai_standin.reply_json(_wire(before.config))

    old = before.plan("put v2.3.1 on staging", requested_by="U1").planner.prompt_version
    new = after.plan("put v2.3.1 on staging", requested_by="U1").planner.prompt_version

    assert old == before.prompt_versions()["plan"] and new == after.prompt_versions()["plan"]
    assert old != new
    first, second = (r.messages for r in openai_standin.requests)
    assert first[0] == second[0]  # the system prefix did not change: caches still hit
    assert second[1]["content"].startswith("Plan this deploy request")


def test_a_repair_is_counted_and_the_answer_kept_is_the_one_that_became_the_plan(
        tmp_path: Path, openai_standin: OpenAIStandin) -> None:
    planner = _planner(_config(tmp_path), openai_standin)
    bad = _wire(planner.config)
    bad["steps"][0]["tool"] = "format_disk"
    openai_standin.reply_json(bad, prompt_tokens=1000, completion_tokens=200)
    openai_standin.reply_json(_wire(planner.config), prompt_tokens=1100, completion_tokens=250)

    info = planner.plan("put v2.3.1 on staging", requested_by="U1").planner

    assert (info.repairs, info.prompt_tokens, info.completion_tokens) == (1, 2100, 450)
    assert info.answer is not None and "format_disk" not in info.answer
    assert info.prompt_version == PromptSet().version("plan")  # repairs are part of it


def test_no_secret_reaches_the_recorded_answer_or_provenance(
        tmp_path: Path, openai_standin: OpenAIStandin) -> None:
    planner = _planner(_config(tmp_path), openai_standin)
    echoed = _wire(planner.config)
    echoed["steps"][0]["description"] = f"tests with {SECRET} and {TOKEN}"
    openai_standin.reply_json(echoed)
    openai_standin.reply_json(echoed)

    plan = planner.plan(f"put v2.3.1 on staging, password {SECRET} key {TOKEN}",
                        requested_by="U1")
    revised = planner.modify(plan, f"use {SECRET} and {TOKEN}", requested_by="U1")

    for info in (plan.planner, revised.planner):
        recorded = info.model_dump_json()
        assert SECRET not in recorded and TOKEN not in recorded
        assert info.answer is not None and "[REDACTED]" in info.answer
    assert revised.planner.note.startswith("modified: use [REDACTED]")
    sent = json.dumps([r.body for r in openai_standin.requests])
    assert SECRET not in sent and TOKEN not in sent


def test_the_answer_kept_is_bounded(tmp_path: Path, openai_standin: OpenAIStandin) -> None:
    planner = _planner(_config(tmp_path), openai_standin)
    padded = json.dumps(_wire(planner.config)) + " " * 20000
    openai_standin.reply_content(padded)
    info = planner.plan("put v2.3.1 on staging", requested_by="U1").planner
    assert info.answer is not None and len(info.answer) < 8300
    assert info.answer.endswith("more characters cut)")


def test_a_modify_diff_says_which_prompt_made_the_new_version(
        tmp_path: Path, openai_standin: OpenAIStandin) -> None:
    planner = _planner(_config(tmp_path), openai_standin)
    openai_standin.reply_json(_wire(planner.config))
    openai_standin.reply_json(_wire(planner.config, "deploy v2.3.2 to staging"))
    plan = planner.plan("put v2.3.1 on staging", requested_by="U1")
    revised = planner.modify(plan, "use v2.3.2", requested_by="U1")

    versions = planner.prompt_versions()
    assert revised.planner.prompt == "modify"
    assert revised.planner.prompt_version == versions["modify"]
    assert diff_plans(plan, revised).lines()[0].text == (
        f"made by: plan@{versions['plan']} · standin-model → "
        f"modify@{versions['modify']} · standin-model")


def test_runs_show_llm_prints_what_made_each_version(
        tmp_path: Path, store: Store, redis_url: str, openai_standin: OpenAIStandin,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path)
    planner = _planner(config, openai_standin)
    openai_standin.reply_json({"cannot_plan": None, "goal": "", "steps": [], "rollback": []})
    openai_standin.reply_json(_wire(config), prompt_tokens=1200, completion_tokens=300)
    plan = store.plans.save(planner.plan("put v2.3.1 on staging", requested_by="U1"))
    run = store.runs.create(Run.for_plan(plan, resolve(plan, config.catalog, config.inventory)))
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    assert main(["runs", "show", run.id, "--llm", "--config", str(config.path)]) == 0

    out = capsys.readouterr().out
    assert f"v1  plan@{planner.prompt_versions()['plan']}" in out
    assert "standin-model (answered: standin-model)" in out
    assert "temperature 0 · seed none" in out
    assert "1300 in · 350 out" in out and "1 repair(s)" in out
    assert '"tool": "run_tests"' in out  # the answer that became the plan

    playbook = store.plans.save(PlaybookPlanner(config.playbooks).plan(
         "deploy v2.3.1 to staging", requested_by="U1"))
    other = store.runs.create(Run.for_plan(playbook, resolve(playbook, config.catalog,
                                                             config.inventory)))
    assert main(["runs", "show", other.id, "--llm", "--config", str(config.path)]) == 0
    assert "v1  playbook deploy-staging · no model" in capsys.readouterr().out


# -- quality from real use -----------------------------------------------------------------


def _llm(version: str, model: str = "m1") -> PlannerInfo:
    return PlannerInfo(name="llm", model=model, prompt="plan", prompt_version=version)


def _stored_run(store: Store, config: Config, info: PlannerInfo, **meta: Any) -> tuple[Run, Plan]:
    plan = PlaybookPlanner(config.playbooks).plan("deploy v2.3.1 to staging", requested_by="U1")
    plan = store.plans.save(plan.model_copy(update={"planner": info}))
    targets = resolve(plan, config.catalog, config.inventory)
    return store.runs.create(Run.for_plan(plan, targets, meta=meta)), plan


def _drive(store: Store, run: Run, *moves: RunStatus | Event) -> Run:
    """Move a stored run through the state machine (and fold events) in one CAS each."""
    for move in moves:
        def change(current: Run, move: RunStatus | Event = move) -> None:
            if isinstance(move, Event):
                current.apply(move)
                return
            if move is RunStatus.APPROVED:
                current.approvals.append(Approval(user="bob", plan_version=current.plan_version,
                                                  plan_hash=current.plan_hash))
            current.move(move)
            current.started_at = current.started_at or (
                1.0 if move is RunStatus.RUNNING else None)
        run = store.runs.update(run.id, change)
    return run


def _outcomes(metrics: Metrics) -> dict[tuple[str, ...], float]:
    text = generate_latest(metrics.registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in ("deckhand_plan_outcomes", "deckhand_plan_modified_changes"):
                labels = sample.labels
                key = (sample.name, labels["prompt_version"], labels["model"],
                       labels.get("outcome", ""))
                out[key] = sample.value
    return out


def test_quality_metrics_per_prompt_version_and_model(tmp_path: Path, store: Store) -> None:
    config = _config(tmp_path)
    done = (RunStatus.APPROVED, RunStatus.RUNNING)
    unchanged, _ = _stored_run(store, config, _llm("a" * 12))
    _drive(store, unchanged, *done, RunStatus.SUCCEEDED)
    modified, plan = _stored_run(store, config, _llm("a" * 12))
    edited = plan.revised(steps=[*plan.model_dump()["steps"][:-1]])  # drop the smoke test
    store.plans.save(edited)
    store.runs.revise(modified.id, edited, resolve(edited, config.catalog, config.inventory))
    _drive(store, modified, *done, RunStatus.ROLLING_BACK, RunStatus.ROLLED_BACK)
    waiting, _ = _stored_run(store, config, _llm("a" * 12))
    replanned, plan = _stored_run(store, config, _llm("b" * 12))
    revised = plan.revised(goal="another way")
    _drive(store, replanned, *done, Event(kind=EventKind.REPLANNED, run_id=replanned.id,
                                          plan=revised.model_dump(mode="json"),
                                          plan_hash=revised.hash), RunStatus.FAILED)
    playbook, _ = _stored_run(store, config, PlannerInfo(name="playbook deploy"))
    _drive(store, playbook, *done, RunStatus.SUCCEEDED)
    _stored_run(store, config, _llm("c" * 12), read_only=True)  # an answer, not a plan

    now = [time.time()]
    metrics = Metrics()
    metrics.watch_plan_quality(runs=store.runs, plans=store.plans, clock=lambda: now[0])
    first = _outcomes(metrics)
    a, b = "a" * 12, "b" * 12
    assert first[("deckhand_plan_outcomes", a, "m1", "planned")] == 3
    assert first[("deckhand_plan_outcomes", a, "m1", "approved_unchanged")] == 1
    assert first[("deckhand_plan_outcomes", a, "m1", "modified")] == 1
    assert first[("deckhand_plan_outcomes", a, "m1", "rolled_back")] == 1
    assert first[("deckhand_plan_outcomes", a, "m1", "rejected")] == 0
    assert first[("deckhand_plan_modified_changes", a, "m1", "")] == 1
    assert first[("deckhand_plan_outcomes", b, "m1", "replanned")] == 1
    assert first[("deckhand_plan_outcomes", b, "m1", "failed")] == 1
    assert first[("deckhand_plan_outcomes", "", "", "succeeded")] == 1  # the playbook's
    assert not any(key[1] == "c" * 12 for key in first)

    _drive(store, waiting, RunStatus.REJECTED)  # ended since the last scrape
    assert _outcomes(metrics) == first  # read at most once a minute
    now[0] += 60
    second = _outcomes(metrics)
    assert second[("deckhand_plan_outcomes", a, "m1", "rejected")] == 1
    assert {k: v for k, v in second.items() if "rejected" not in k} == {
        k: v for k, v in first.items() if "rejected" not in k}


# -- the GenAI span of each model call -----------------------------------------------------


@pytest.mark.parametrize("capture", [False, True])
def test_each_model_call_is_a_genai_span_naming_the_prompt_version(
        tmp_path: Path, openai_standin: OpenAIStandin, otlp: Receiver, capture: bool) -> None:
    config = _config(tmp_path)
    openai_standin.reply_json(_wire(config), prompt_tokens=1200, completion_tokens=300)
    env = {**os.environ, "OPENAI_API_KEY": API_KEY, "OPENAI_BASE_URL": openai_standin.base_url,
           "OPENAI_MODEL": "standin-model", "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint,
           "PYTHONPATH": str(ROOT),
           "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": str(capture).lower()}
    env.pop("REDIS_URL", None)
    done = subprocess.run([sys.executable, "-m", "bot.cli", "plan", f"put v2.3.1 on staging "
                           f"{SECRET}", "--config", str(config.path), "--format", "json"],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    provenance = json.loads(done.stdout)["planner"]

    (call,) = wait_until(lambda: otlp.named("chat standin-model"), what="the model call's span")
    (plan,) = otlp.named("deckhand.plan")
    assert call.parent_id == plan.span_id
    assert plan.attributes["deckhand.prompt.version"] == provenance["prompt_version"]
    assert plan.attributes["deckhand.planner.model"] == "standin-model"
    assert not [k for k in plan.attributes if k.startswith("gen_ai.")]  # the call has them
    assert call.kind == 3 and plan.kind == 1  # CLIENT: a call to a remote model
    attributes = call.attributes
    assert attributes["deckhand.prompt.name"] == "plan"
    assert attributes["deckhand.prompt.version"] == provenance["prompt_version"]
    assert attributes["deckhand.planner.attempt"] == 0
    assert (attributes["gen_ai.operation.name"], attributes["gen_ai.provider.name"]) == (
        "chat", "openai")
    assert attributes["gen_ai.request.model"] == attributes["gen_ai.response.model"]
    assert (attributes["gen_ai.usage.input_tokens"],
            attributes["gen_ai.usage.output_tokens"]) == (1200, 300)
    assert SECRET not in str([s.attributes for s in otlp.spans])
    assert all(SECRET.encode() not in body for body in otlp.bodies)
    if not capture:  # text only when the operator opts in
        assert not {"gen_ai.input.messages", "gen_ai.output.messages"} & set(attributes)
        return
    sent = json.loads(attributes["gen_ai.input.messages"])
    assert [m["role"] for m in sent] == ["system", "user"]
    assert "put v2.3.1 on staging" in sent[1]["parts"][0]["content"]  # the request, redacted
    (answer,) = json.loads(attributes["gen_ai.output.messages"])
    assert answer["finish_reason"] == "stop" and '"steps"' in answer["parts"][0]["content"]


def test_a_retried_model_call_says_so_on_its_span(tmp_path: Path, openai_standin: OpenAIStandin,
                                                  otlp: Receiver) -> None:
    config = _config(tmp_path)
    openai_standin.reply_error(429, "slow down", headers={"retry-after": "0"})
    openai_standin.reply_json(_wire(config))
    env = {**os.environ, "OPENAI_API_KEY": API_KEY, "OPENAI_BASE_URL": openai_standin.base_url,
           "OPENAI_MODEL": "standin-model", "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint,
           "PYTHONPATH": str(ROOT)}
    env.pop("REDIS_URL", None)
    request = "get v2.3.1 onto the staging boxes after lunch"  # no playbook takes it
    done = subprocess.run([sys.executable, "-m", "bot.cli", "plan", request, "--config",
                           str(config.path), "--format", "json"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr

    (call,) = wait_until(lambda: otlp.named("chat standin-model"), what="the model call's span")
    assert call.status == 1 and len(openai_standin.requests) == 2  # one span, two requests
    assert call.events == [("retry", {"deckhand.retry.reason": "rate_limited",
                                      "deckhand.retry.number": 1,
                                      "deckhand.retry.wait_s": 0.0})]
