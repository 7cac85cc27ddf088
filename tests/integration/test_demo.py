"""The terminal flow end to end on the real sample app (local hosts, real HTTP)."""

from pathlib import Path

import pytest
from rich.console import Console

from agents.config import Config
from agents.run.record import RunStatus
from agents.services import build_services
from bot.cli import main
from bot.cli.demo import probe, run_demo
from bot.terminal.console import ConsoleFlow, Decision


def test_demo_deploys_then_rolls_back_a_broken_release(tmp_path: Path) -> None:
    console = Console(record=True, width=120)
    assert run_demo(console, workdir=tmp_path) == 0
    text = console.export_text()
    assert "SUCCEEDED" in text and "ROLLED_BACK" in text
    assert "smoke_staging" in text and "health check failed" in text


def test_run_with_yes_deploys_every_host(sample_config: Config) -> None:
    services = build_services(sample_config)
    flow = ConsoleFlow(services, Console(record=True, width=120), user="alice",
                       confirm=lambda word: word)
    run = flow.handle("deploy v2.3.1", yes=True)
    assert run is not None and run.status is RunStatus.SUCCEEDED
    assert {p.body for p in probe(sample_config)} == {"v2.3.1"}


def test_modify_with_invalid_yaml_keeps_the_plan_then_valid_edit_is_new_version(
        sample_config: Config) -> None:
    services = build_services(sample_config)
    edits = iter([
        "goal: [unclosed",                                           # invalid YAML
        "goal: g\nsteps: [{id: a, tool: rm_rf, params: {}}]\n",       # unknown tool
        "goal: status only\nsteps:\n- {id: s, tool: status, params: {environment: staging}}\n",
    ])
    decisions = iter([Decision.MODIFY, Decision.MODIFY, Decision.MODIFY, Decision.REJECT])
    console = Console(record=True, width=120)
    flow = ConsoleFlow(services, console, user="bob", editor=lambda _: next(edits),
                       ask=lambda: next(decisions))
    plan = services.make_plan("deploy v2.3.1", requested_by="bob", face="cli")
    assert flow.approve(plan, yes=False) is None
    text = console.export_text()
    assert "invalid YAML" in text
    assert "unknown tool 'rm_rf'" in text
    assert "Plan updated to version 2" in text


def test_unknown_request_lists_what_can_be_done(
        sample_config: Config, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "make me a sandwich", "--config", str(sample_config.path), "--yes"])
    out = capsys.readouterr().out
    assert code == 2
    assert "don't know how to plan" in out and "deploy v2.3.1" in out


def test_injection_in_request_is_refused_before_anything_runs(
        sample_config: Config, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "deploy v2.3.1;touch${IFS}/tmp/deckhand-pwned", "--config",
                 str(sample_config.path), "--yes"])
    assert code == 2
    assert "does not match the pattern" in capsys.readouterr().out
    assert not Path("/tmp/deckhand-pwned").exists()


def test_read_only_request_skips_the_prompt(sample_config: Config) -> None:
    services = build_services(sample_config)
    console = Console(record=True, width=120)

    def never_asked() -> Decision:
        raise AssertionError("a read-only request must not ask for approval")

    run = ConsoleFlow(services, console, user="eve", ask=never_asked).handle("status staging")
    assert run is not None and run.status is RunStatus.SUCCEEDED
    assert "no approval needed" in console.export_text()
