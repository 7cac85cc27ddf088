"""A read-only request's answer is its output: printed in the terminal, posted in Slack."""

from __future__ import annotations

from rich.console import Console

from agents.config import Config
from agents.run.record import HostResult, Run, RunStatus, StepState, StepStatus
from agents.run.results import bound, step_output
from agents.services import build_services
from bot.slack import blocks as bk
from bot.terminal.console import ConsoleFlow, Decision
from tests.fixtures.slack_world import SlackWorld


def _never() -> Decision:
    raise AssertionError("a read-only request must not ask for approval")


def test_terminal_prints_the_status_output(sample_config: Config) -> None:
    services = build_services(sample_config)
    console = Console(record=True, width=80)
    run = ConsoleFlow(services, console, user="eve", ask=_never).handle("status production")
    assert run is not None and run.status is RunStatus.SUCCEEDED
    text = console.export_text()
    assert "[prod-1]" in text and "[prod-2]" in text and "current: none" in text


def test_output_is_bounded_and_keeps_its_end() -> None:
    text = bound("x" * 10_000 + "END", 500)
    assert len(text) == 500 and text.endswith("END") and "cut" in text


def test_output_joins_hosts() -> None:
    run = Run(id="run-1", plan_id="p", plan_version=1, plan_hash="h", goal="g",
              requested_by="u", status=RunStatus.SUCCEEDED)
    hosts = {h: HostResult(host=h, status=StepStatus.SUCCEEDED, tail=f"{h} ok\n")
             for h in ("b", "a")}
    run.steps["status"] = StepState(id="status", status=StepStatus.SUCCEEDED, hosts=hosts)
    assert step_output(run) == "[a]\na ok\n[b]\nb ok"


def test_slack_code_block_is_escaped() -> None:
    [block] = bk.output_blocks("status", "<!channel> & ```boom```")
    text = block["text"]["text"]
    assert "<!channel>" not in text and "&lt;!channel&gt; &amp;" in text
    assert text.count("```") == 2


def test_slack_posts_the_output_in_the_thread(world: SlackWorld) -> None:
    event = {"type": "app_mention", "user": "UALICE", "channel": "CDEPLOY",
             "text": "<@UBOT> status staging", "ts": "1.1"}
    assert world.signer.event(event, event_id="EvStatus")[0] == 200
    posts = world.standin.wait_for(
        lambda: [c for c in world.standin.of("chat.postMessage")
                 if "output:" in c.text_of_blocks()], what="the status output")
    text = posts[0].text_of_blocks()
    assert "current: none" in text and "```" in text
    assert posts[0].payload.get("thread_ts")
