"""One trace per run across processes, exported over OTLP/HTTP to a loopback receiver:
planned and approved by one command, approved by a second, executed by a worker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from agents.config import Config
from agents.store import Store
from tests.fixtures.otlp import Receiver
from tests.fixtures.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = ("deckhand.", "gen_ai.")


def _cli(args: list[str], env: dict[str, str], *, stdin: str = ""
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bot.cli", *args], env=env, cwd=ROOT,
                          input=stdin, capture_output=True, text=True, timeout=120,
                          check=False)


def test_a_run_is_one_trace_across_three_processes(sample_config: Config, store: Store,
                                                   redis_url: str, otlp: Receiver) -> None:
    path = sample_config.path
    path.write_text(path.read_text().replace("min_approvals: 1", "min_approvals: 2"))
    env = {**os.environ, "REDIS_URL": redis_url, "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint,
           "OTEL_SERVICE_NAME": "deckhand-test", "PYTHONPATH": str(ROOT)}
    config = ["--config", str(path)]
    first = _cli(["run", "deploy v2.3.1", "--yes", "--confirm", "production", "--user",
                  "alice", *config], env)
    assert "1 more approval" in first.stdout, first.stdout + first.stderr
    (run,) = store.runs.recent()
    assert _cli(["approve", run.id, "--user", "bob", "--confirm", "production", *config],
                env).returncode == 0
    assert _cli(["worker", "--once", *config], env).returncode == 0

    wait_until(lambda: otlp.named("deckhand.run"), what="the run's span")
    (plan,) = otlp.named("deckhand.plan")
    (executed,) = otlp.named("deckhand.run")
    assert executed.trace_id == plan.trace_id and executed.parent_id == plan.span_id
    (request,) = wait_until(lambda: otlp.named("deckhand.request"), what="the trace's root")
    assert (request.trace_id, request.parent_id) == (plan.trace_id, "")  # the trace's root
    assert plan.parent_id == request.span_id  # reserved at planning, emitted at the end
    assert request.start <= plan.start and request.end >= executed.end
    assert request.status == 1 and request.attributes["deckhand.run.id"] == run.id
    approvals = otlp.named("deckhand.approval")
    assert [a.attributes["deckhand.approver"] for a in approvals] == ["alice", "bob"]
    assert {a.trace_id for a in approvals} == {plan.trace_id}
    steps = otlp.starting("step ")
    assert len(steps) == 8 and {s.parent_id for s in steps} == {executed.span_id}
    assert all(s.name == f"step {s.attributes['deckhand.step.id']} "
                         f"({s.attributes['deckhand.tool']})"
               and s.attributes["gen_ai.operation.name"] == "execute_tool"
               and s.attributes["gen_ai.tool.name"] == s.attributes["deckhand.tool"]
               for s in steps)
    assert "step deploy_production (deploy)" in {s.name for s in steps}
    deploy = next(s for s in steps if s.attributes["deckhand.step.id"] == "deploy_production")
    hosts = [h for h in otlp.named("deckhand.host") if h.parent_id == deploy.span_id]
    assert sorted(h.attributes["deckhand.host"] for h in hosts) == ["prod-1", "prod-2"]
    assert executed.attributes["deckhand.run.status"] == "succeeded" and executed.status == 1
    assert plan.attributes["deckhand.planner"] == "playbook deploy"
    assert not [k for k in plan.attributes if k.startswith("gen_ai.")]  # not a model call
    assert {s.service for s in otlp.spans} == {"deckhand-test"}
    assert all(k.startswith(ALLOWED) for s in otlp.spans for k in s.attributes)
    shown = _cli(["runs", "show", run.id, *config],
                 {**env, "DECKHAND_TRACE_URL": "https://ui.example/t/{trace_id}?x=1"})
    assert f"trace: https://ui.example/t/{plan.trace_id}?x=1" in shown.stdout, shown.stdout


def test_tracing_is_off_without_an_endpoint(sample_config: Config, otlp: Receiver) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(ROOT)
    done = _cli(["run", "status production", "--config", str(sample_config.path)], env)
    assert done.returncode == 0 and otlp.spans == []


def test_the_terminal_summary_names_the_trace_and_a_failed_run_says_why(
        sample_config: Config, redis_url: str, store: Store, otlp: Receiver) -> None:
    env = {**os.environ, "REDIS_URL": redis_url, "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint,
           "PYTHONPATH": str(ROOT), "DECKHAND_TRACE_URL": "https://ui.example/t/{trace_id}"}
    done = _cli(["run", "deploy v2.4.0-broken", "--yes", "--confirm", "production", "--user",
                 "alice", "--config", str(sample_config.path)], env)
    assert done.returncode != 0, done.stdout + done.stderr
    (run,) = store.runs.recent()
    assert run.status.value == "rolled_back"

    (executed,) = wait_until(lambda: otlp.named("deckhand.run"), what="the run's span")
    assert f"trace: https://ui.example/t/{executed.trace_id}\n" in done.stdout, done.stdout
    assert executed.status == 2 and executed.status_message.startswith("rolled_back: ")
    assert run.reason and run.reason[:40] in executed.status_message
    names = {s.name for s in otlp.spans}
    assert {"step deploy_staging (deploy)", "rollback rollback_staging (rollback)"} <= names
    (request,) = wait_until(lambda: otlp.named("deckhand.request"), what="the trace's root")
    assert (request.trace_id, request.parent_id, request.status) == (executed.trace_id, "", 2)
    assert request.status_message.startswith("rolled_back: ")  # the trace says how it ended


def test_a_request_that_never_runs_ends_its_trace_too(
        sample_config: Config, redis_url: str, store: Store, otlp: Receiver) -> None:
    """Refused as a plan: the root ends at once; rejected: the root ends with the reject."""
    env = {**os.environ, "REDIS_URL": redis_url, "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint,
           "PYTHONPATH": str(ROOT)}
    config = ["--config", str(sample_config.path)]
    assert _cli(["plan", "deploy v2.3.1 to nowhere", *config], env).returncode != 0
    (refused,) = wait_until(lambda: otlp.named("deckhand.request"), what="the refused root")
    (plan,) = otlp.named("deckhand.plan")
    assert (refused.status, refused.status_message) == (2, "refused: NoPlanFound")
    assert plan.parent_id == refused.span_id and plan.trace_id == refused.trace_id
    assert "nowhere" not in str(refused.attributes) + refused.status_message  # no request text
    assert _cli(["plan", "deploy v2.3.1", *config], env).returncode == 0  # shown, never run
    shown = wait_until(lambda: [s for s in otlp.named("deckhand.request")
                                if s.attributes["deckhand.run.status"] == "planned"] or None,
                       what="the shown plan's root")
    assert [s.status for s in shown] == [1]

    done = _cli(["run", "deploy v2.3.1", "--user", "alice", *config], env, stdin="r\n")  # Reject
    assert done.returncode != 0, done.stdout + done.stderr
    (run,) = store.runs.recent()
    assert run.status.value == "rejected"
    roots = wait_until(lambda: [s for s in otlp.named("deckhand.request")
                                if s.attributes.get("deckhand.run.id") == run.id] or None,
                       what="the rejected request's root")
    assert [(r.status, r.status_message) for r in roots] == [(2, "rejected: rejected")]
    assert not otlp.named("deckhand.run")  # nothing executed


def test_request_plan_and_run_spans_name_their_service(
        sample_config: Config, redis_url: str, store: Store, otlp: Receiver) -> None:
    """``deckhand.service`` (never the resource's ``service.name``, which names deckhand)."""
    main = sample_config.path.parent.parent / "org.yml"
    main.write_text(f"services:\n  api: {sample_config.path.parent.name}/deckhand.yml\n")
    env = {**os.environ, "REDIS_URL": redis_url, "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint,
           "PYTHONPATH": str(ROOT)}
    done = _cli(["run", "status of staging", "--config", str(main)], env)
    assert done.returncode == 0, done.stdout + done.stderr
    (executed,) = wait_until(lambda: otlp.named("deckhand.run"), what="the run's span")
    (plan,) = otlp.named("deckhand.plan")
    (request,) = wait_until(lambda: otlp.named("deckhand.request"), what="the trace's root")
    assert [s.attributes.get("deckhand.service") for s in (request, plan, executed)] == [
        "api", "api", "api"]
    assert {s.service for s in otlp.spans} == {"deckhand"}  # the resource: deckhand itself
