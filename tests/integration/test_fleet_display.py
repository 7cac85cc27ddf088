"""A 500-host run stays readable: the Slack thread, the App Home, the terminal and
``deckhand runs show`` summarize hosts per step (counts by state, failures up to a bound
with "+N more") within Slack's limits, instead of one line per host."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console
from slack_sdk import WebClient

from agents.plan.model import Plan
from agents.plan.targets import PlanTargets, StepTargets
from agents.policy.rules import Policy
from agents.run.record import Event, EventKind, Phase, Run, RunStatus
from agents.services import build_services
from agents.store import Store
from bot.cli import main
from bot.slack.home_blocks import HomeData, home_view
from bot.terminal.render import status_table, summary
from tests.fixtures.builders import (
    SHELL_TOOLS,
    fan_out_events,
    fleet,
    make_plan,
    production_fleet,
    say_events,
    thread_writer,
)
from tests.fixtures.slack_standin import SlackStandin, check_limits

HOSTS = fleet(500)
FAILED = HOSTS[100:112]
RUNNING = HOSTS[200:208]
MOST_NAMES = 40
"""More host names than this in one message would be a list, not a summary."""


def _plan() -> Plan:
    return make_plan([{"id": "deploy", "tool": "change",
                       "params": {"environment": "production", "label": "v2"}}],
                     rollback=[{"id": "undo", "tool": "undo",
                                "params": {"environment": "production"}}], goal="deploy v2")


def _events(run: Run, *, ended: bool) -> list[Event]:
    events = [Event(kind=EventKind.RUN_STARTED, run_id=run.id)]
    events += fan_out_events(run.id, "deploy", HOSTS, failed=FAILED,
                             running=() if ended else RUNNING)
    if ended:
        events += [Event(kind=EventKind.STEP_FINISHED, run_id=run.id, step_id="deploy",
                         status="failed", error="web-100: exit code 1 (and 11 more host(s))"),
                   Event(kind=EventKind.ROLLBACK_STARTED, run_id=run.id, phase=Phase.ROLLBACK,
                         error="step deploy failed"),
                   Event(kind=EventKind.RUN_FINISHED, run_id=run.id, status="rollback_failed",
                         error="step deploy failed")]
    return events


def _fleet_run(plan: Plan, *, ended: bool) -> Run:
    run = Run.for_plan(plan, _targets(plan), status=RunStatus.APPROVED)
    for event in _events(run, ended=ended):
        run.apply(event)
    return run


def _targets(plan: Plan) -> PlanTargets:
    """What a resolved plan says: every step on production's 500 hosts."""
    return PlanTargets({s.id: StepTargets(environments=("production",), hosts=tuple(HOSTS),
                                          outside=False) for s in plan.all_steps})


def _names(text: str) -> int:
    return len(re.findall(r"web-\d{3}", text))


def test_the_slack_thread_summarizes_500_hosts(slack_standin: SlackStandin,
                                              store: Store) -> None:
    client = WebClient(token="xoxb-t", base_url=f"{slack_standin.url}/api/")
    plan = _plan()
    run = Run.for_plan(plan, _targets(plan), status=RunStatus.APPROVED)
    writer = thread_writer(client, store, [plan], policy=Policy())
    say_events(writer, run, _events(run, ended=True))
    assert slack_standin.violations == []
    calls = slack_standin.of("chat.postMessage") + slack_standin.of("chat.update")
    texts = [c.text_of_blocks() for c in calls]
    assert all(_names(t) <= MOST_NAMES for t in texts), max(texts, key=_names)
    status = [t for t in texts if "*Run `" in t][-1]  # the status message, as it ends
    assert "488/500 hosts (12 failed)" in status
    assert "failed on `web-100`" in status and "+4 more" in status
    everything = "\n".join(texts)
    assert "failed on 12/500 hosts" in everything  # the failure reply, after 5 tails
    assert "hosts changed: 500: web-000" in everything and "+480 more" in everything


def test_the_app_home_summarizes_a_running_500_host_step() -> None:
    run = _fleet_run(_plan(), ended=False)
    view = home_view(HomeData(user="U1", now=run.started_at or 0.0, active=[run]), Policy())
    assert check_limits("views.publish", {"view": view}) == []
    text = str(view)
    assert "`deploy` 480/500 hosts (8 running, 12 failed)" in text
    assert _names(text) <= MOST_NAMES


def test_the_terminal_table_and_summary_stay_a_screenful() -> None:
    plan = _plan()
    run = _fleet_run(plan, ended=True)
    console = Console(record=True, width=100, file=io.StringIO())
    console.print(status_table(plan, run, {"deploy": 500, "undo": 500}))
    console.print(summary(plan, run))
    text = console.export_text()
    assert len(text.splitlines()) < 30 and _names(text) <= MOST_NAMES
    assert "488/500" in text and "failed on 12:" in text and "+4 more" in text
    assert "deploy failed on 12/500 hosts" in text and "hosts changed (500)" in text


def test_runs_show_summarizes_a_500_host_run(tmp_path: Path, store: Store, redis_url: str,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    config = production_fleet(tmp_path, HOSTS, SHELL_TOOLS, host_dirs=True)
    services = build_services(config, store=store)
    plan = store.plans.save(_plan())
    run = Run.for_plan(plan, services.targets(plan), status=RunStatus.APPROVED)
    for event in _events(run, ended=True):
        run.apply(event)
    store.runs.create(run)
    monkeypatch.setenv("REDIS_URL", redis_url)
    assert main(["runs", "show", run.id, "--config", str(config.path)]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) < 40 and _names(out) <= MOST_NAMES
    assert "488/500" in out and "+" in out and "more" in out
