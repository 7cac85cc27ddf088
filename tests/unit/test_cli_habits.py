"""Issue 33: habits people bring to a CLI — every --help has examples, --config is accepted
everywhere (and `check CONFIG` positionally), completion completes file paths."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.cli import build_parser, main
from bot.cli.init import template_text

ROOT = Path(__file__).parents[2]


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
             ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from commands(sub, (*path, name))


def test_every_command_and_subcommand_help_has_examples() -> None:
    missing = [" ".join(path) for path, sub in commands(build_parser())
               if "examples:\n  deckhand" not in (sub.epilog or "")
               and "examples:\n  " not in (sub.epilog or "")]
    assert missing == []
    found = dict(commands(build_parser()))
    for path in (("mcp",), ("hosts", "check"), ("hosts", "trust"), ("stop",), ("pause",),
                 ("resume",), ("judge",), ("policy", "diff")):
        assert "deckhand " + " ".join(path) in (found[path].epilog or ""), path
    for action in ("verify", "export", "ship"):  # audit's actions are a positional word
        assert f"deckhand audit {action}" in (found[("audit",)].epilog or ""), action


TAKES_NO_CONFIG = {("demo",): "copies the sample's own config", ("completion",): "reads none",
                   ("init",): "writes one; its argument says where"}


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for action in parser._actions for o in action.option_strings}


def test_every_command_and_group_takes_config() -> None:
    """Groups too, so `deckhand GROUP --config X ACTION` works as well as after ACTION."""
    missing = [" ".join(path) for path, sub in commands(build_parser())
               if path not in TAKES_NO_CONFIG and "--config" not in options(sub)]
    assert missing == []


def test_config_before_the_action_of_every_group(
        config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("DECKHAND_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path.parent)  # no ./deckhand.yml to fall back on
    assert main(["schedules", "--config", str(config), "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["policy", "--config", str(config), "diff", str(config)]) == 0
    assert "no policy change" in capsys.readouterr().out


def test_policy_diff_compares_old_with_the_config_in_use(
        config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    old = tmp_path / "old.yml"
    old.write_text(config.read_text())
    stricter = tmp_path / "new.yml"
    text = config.read_text()
    assert "min_approvals: 1" in text
    stricter.write_text(text.replace("min_approvals: 1", "min_approvals: 2", 1))
    assert main(["policy", "diff", str(config), "--config", str(stricter), "--json"]) == 1
    changed = json.loads(capsys.readouterr().out)
    assert changed["changed"] is True
    monkeypatch.chdir(tmp_path)  # ./deckhand.yml is the config in use
    assert main(["policy", "diff", str(stricter), "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == {
        **changed, "environments": [{**e, "changes": [{**c, "old": c["new"], "new": c["old"]}
                                                      for c in e["changes"]]}
                                    for e in changed["environments"]]}
    assert main(["policy", "diff", str(old), str(stricter), "--config", str(config)]) == 2
    assert "two configs given" in capsys.readouterr().out


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "deckhand.yml"
    path.write_text(template_text())
    return path


def test_check_takes_the_config_positionally_or_with_config(
        config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.chdir(tmp_path.parent)  # no ./deckhand.yml to fall back on
    assert main(["check", str(config)]) == 0
    assert main(["check", "--config", str(config)]) == 0
    assert main(["check", "-c", str(config)]) == 0
    assert " ".join(capsys.readouterr().out.split()).count(f"{config} is valid") == 3
    other = tmp_path / "other.yml"
    assert main(["check", str(config), "--config", str(other)]) == 2
    assert "two configs given" in capsys.readouterr().out


def test_config_given_before_a_subcommand_is_kept(
        config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path.parent)
    assert main(["hosts", "--config", str(config), "check", "--json"]) == 0
    assert '"staging-1"' in capsys.readouterr().out


@pytest.mark.parametrize(("shell", "marker"), [("bash", "_shtab_compgen_files"),
                                               ("zsh", "_files")])
def test_completion_completes_paths_for_config_and_cases(
        shell: str, marker: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    if shell == "bash":
        for name in ("_shtab_deckhand_run___config_COMPGEN",
                     "_shtab_deckhand_audit___copy_COMPGEN",
                     "_shtab_deckhand_policy_diff___config_COMPGEN",
                     "_shtab_deckhand_schedules___config_COMPGEN",
                     "_shtab_deckhand_eval___cases_COMPGEN",
                     "_shtab_deckhand_check___config_COMPGEN",
                     "_shtab_deckhand_check_pos_0_COMPGEN",
                     "_shtab_deckhand_hosts_check___config_COMPGEN"):
            assert f"{name}={marker}" in script, name
    else:
        assert "--cases" in script and ":config:_files" in script
        cases_line = next(line for line in script.splitlines() if '"--cases' in line)
        assert cases_line.endswith(':_files"')


def plan_json(config: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["plan", *argv, "--format", "json", "--config", str(config)]) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_e_sets_a_parameter_explicitly(config: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    by_name = plan_json(config, capsys, "deploy", "-e", "version=1.0.5")
    assert by_name["planner"]["name"] == "playbook deploy"
    assert {s["params"].get("version") for s in by_name["steps"]} == {"v1.0.5"}
    overridden = plan_json(config, capsys, "ship v1.0.0 to staging", "-e", "version=v2.0.0")
    assert {s["params"].get("version") for s in overridden["steps"]} == {"v2.0.0"}
    aliased = plan_json(config, capsys, "status", "--set", "environment=prod")
    assert [s["params"] for s in aliased["steps"]] == [{"environment": "production"}]


@pytest.mark.parametrize(("argv", "said"), [
    (["deploy", "-e", "verison=1.0.5"], "playbook deploy has no parameter 'verison'; it "
                                        "takes: version"),
    (["deploy", "-e", "oops"], "-e 'oops': write KEY=VALUE"),
    (["status", "-e", "environment=mars"], "unknown environment 'mars'"),
    (["deploy", "-e", "version=; rm -rf /"], "version"),
])
def test_a_wrong_e_is_one_clear_error(config: Path, capsys: pytest.CaptureFixture[str],
                                      argv: list[str], said: str) -> None:
    assert main(["plan", *argv, "--config", str(config)]) == 2
    out = capsys.readouterr()
    assert said in out.out + out.err and "Traceback" not in out.out + out.err


def test_every_json_option_is_documented_in_docs_json() -> None:
    """`--json` help points at docs/json.md: every command offering it has its section."""
    headings = [line for line in (ROOT / "docs" / "json.md").read_text().splitlines()
                if line.startswith("## ")]
    offering = [" ".join(path) for path, sub in commands(build_parser())
                if "--json" in options(sub)]
    assert len(offering) >= 10
    missing = [path for path in offering
               if not any(f"`deckhand {path}" in h and "--json" in h for h in headings)]
    assert missing == []
