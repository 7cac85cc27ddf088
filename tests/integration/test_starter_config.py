"""The config `deckhand init` writes fails a deploy when a part of its command fails, and
`deckhand check` warns about a mutating command that would report success anyway."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agents.run.record import RunStatus, StepStatus
from agents.store import Store
from bot.cli import main
from tools.catalog import Tool
from tools.command_lint import silent_failure


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DECKHAND_CONFIG", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    assert main(["init"]) == 0
    return tmp_path


def test_a_host_whose_directory_is_a_file_fails_the_deploy(workspace: Path) -> None:
    hosts = workspace / ".deckhand" / "hosts"
    assert main(["run", "deploy v1.0.0", "--yes"]) == 0
    shutil.rmtree(hosts / "prod-2")
    (hosts / "prod-2").write_text("not a directory\n")  # mkdir and cp fail there

    assert main(["run", "deploy v1.3.0", "--yes"]) == 1  # not SUCCEEDED
    assert (hosts / "prod-1" / "current").read_text().strip() == "v1.0.0"  # rolled back
    assert (hosts / "prod-2").read_text() == "not a directory\n"  # nothing claims v1.3.0


def test_the_record_does_not_claim_the_version_a_failed_part_never_installed(
        workspace: Path, store: Store, redis_url: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)  # the record, the history and `where` shared
    hosts = workspace / ".deckhand" / "hosts"
    assert main(["run", "deploy v1.0.0", "--yes"]) == 0
    shutil.rmtree(hosts / "prod-2")
    (hosts / "prod-2").write_text("not a directory\n")
    assert main(["run", "deploy v1.3.0", "--yes"]) == 1
    capsys.readouterr()
    (run, _) = store.runs.recent(limit=2)  # newest first
    assert run.status is not RunStatus.SUCCEEDED, run.reason
    prod_2 = run.steps["deploy_production"].hosts["prod-2"]
    assert prod_2.status is StepStatus.FAILED and "mkdir" in (prod_2.error or "")
    known = store.history.current(None, "production").hosts["prod-2"]
    assert known.run_id == run.id and known.version is None  # may be anywhere: not v1.3.0
    audit = [(e.action, e.details.get("step"), e.details.get("status"))
             for e in store.audit.entries(run_id=run.id)]
    assert ("step_finished", "deploy_production", "failed") in audit
    assert main(["where", "--json"]) == 0
    (production,) = [w for w in json.loads(capsys.readouterr().out)
                     if w["environment"] == "production"]
    assert "v1.3.0" not in json.dumps(production), production  # neither host claims it


def test_check_warns_about_a_mutating_command_whose_last_part_cannot_fail(
        workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check"]) == 0
    assert "warning" not in capsys.readouterr().out  # the starter config is clean
    config = workspace / "deckhand.yml"
    config.write_text(config.read_text().replace("set -e; d={host.dir}", "d={host.dir}"))
    assert main(["check"]) == 0
    out = capsys.readouterr().out
    assert "tool deploy" in out and "cannot fail" in out and "set -e" in out


@pytest.mark.parametrize(("command", "warned"), [
    ("mkdir -p /x; cp a /x/b; echo done", True),
    ("mkdir -p /x\ncp a /x/b\ntrue", True),
    ("set -e; mkdir -p /x; echo done", False),
    ("set -eu\nmkdir /x\necho done", False),
    ("mkdir -p /x && cp a /x/b && echo done", False),
    ("mkdir -p /x; cp a /x/b", False),
    ("echo 'a; echo b'", False),
    ("mkdir /x; cp a b || echo failed", False),
])
def test_which_commands_can_hide_a_failure(command: str, warned: bool) -> None:
    tool = Tool(name="t", description="t", command=command, mutates=True)
    assert (silent_failure(tool) is not None) is warned
    assert silent_failure(tool.model_copy(update={"mutates": False})) is None
