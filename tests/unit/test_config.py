from pathlib import Path

import pytest

from agents.config import load_config
from bot.cli import main
from tests.fixtures.builders import make_config
from tools.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "deckhand.yml"


def test_example_config_is_valid() -> None:
    config = load_config(EXAMPLE)
    assert {"deploy", "rollback", "smoke_test"} <= set(config.catalog.tools)
    assert config.inventory.environments["production"].hosts == ["prod-1", "prod-2"]


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yml"
    path.write_text("tools:\n  a: [1, 2\n")
    with pytest.raises(ConfigError, match=r"bad.yml:\d+: invalid YAML"):
        load_config(path)


def test_yaml_nested_too_deeply_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "deep.yml"
    path.write_text("tools: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match=r"deep.yml(:\d+)?: invalid YAML: nested too deeply"):
        load_config(path)


def test_every_problem_is_listed_with_its_location(tmp_path: Path) -> None:
    extra = """
    playbooks:
      - name: broken
        match: ['(unclosed']
        goal: x
        steps: [{id: a, tool: nope}]
    """
    tools = """
    tools:
      bad_pattern:
        description: d
        command: "echo {v} {undeclared}"
        params: {v: {pattern: '[a-'}}
      bad_rollback:
        description: d
        command: "true"
        mutates: true
        rollback: missing_tool
        timeout: -1
    bogus_section: 1
    """
    with pytest.raises(ConfigError) as caught:
        make_config(tmp_path, extra=extra, tools=tools)
    text = str(caught.value)
    assert "bogus_section: unknown section" in text
    assert "tools.bad_pattern.params.v.pattern" in text and "valid regular expression" in text
    assert "tools.bad_rollback.timeout" in text
    assert "playbooks.0.match" in text
    assert all(p.where.startswith(str(tmp_path)) and ":" in p.where
               for p in caught.value.problems)


def test_cross_checks_templates_and_playbook_examples(tmp_path: Path) -> None:
    extra = """
    playbooks:
      - name: p
        match: ['^go (?P<version>\\S+)$']
        examples: ["go v1.2.3", "stop"]
        goal: "go {version}"
        steps: [{id: a, tool: echo, params: {version: "{version}", path: /tmp/x}},
                {id: b, tool: ech, params: {}}]
    """
    tools_extra = "\n  undef:\n    description: d\n    command: 'echo {nope} {vars.none}'\n"
    from tests.fixtures.builders import SHELL_TOOLS
    tools = SHELL_TOOLS.replace("tools:\n", "tools:" + tools_extra, 1)
    with pytest.raises(ConfigError) as caught:
        make_config(tmp_path, extra=extra, tools=tools)
    text = str(caught.value)
    assert "uses {nope}, which is not a parameter of undef" in text
    assert "vars has no 'none'" in text
    assert "example 'stop' does not match" in text
    assert "unknown tool 'ech'" in text


def test_check_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(EXAMPLE)]) == 0
    bad = tmp_path / "bad.yml"
    bad.write_text("tools: {}\ninventory: {hosts: 3}\n")
    assert main(["check", str(bad)]) == 2
    out = capsys.readouterr().out
    assert "is valid" in out and "inventory.hosts" in out
    assert main(["check", str(tmp_path / "missing.yml")]) == 2
    assert "cannot read file" in capsys.readouterr().out


@pytest.mark.parametrize(("section", "where", "message"), [
    ("retention: {days: 0, export: a.jsonl}", "retention.days", "greater than or equal to 1"),
    ("retention: {days: 90}", "retention.export", "Field required"),
    ("retention: {days: 90, export: a.jsonl, keep: all}", "retention.keep", "not permitted"),
    ("retention: {days: ninety, export: a.jsonl}", "retention.days", "valid number"),
    ("retention: {days: 90, export: a.jsonl, every_hours: -1}", "retention.every_hours",
     "greater than or equal to 0"),
    ("history: {retention_days: 30}", "history.retention_days", "needs a retention section"),
])
def test_bad_retention_settings_are_one_clear_problem(tmp_path: Path, section: str, where: str,
                                                     message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        make_config(tmp_path, extra=section + "\n")
    assert len(caught.value.problems) == 1
    assert where in str(caught.value) and message in str(caught.value)


def test_retention_export_is_relative_to_the_config_file(tmp_path: Path) -> None:
    config = make_config(tmp_path, extra="retention: {days: 90, export: archive/runs.jsonl}\n")
    assert config.retention is not None and config.retention.every_hours == 24
    assert config.retention.export == str(tmp_path / "archive" / "runs.jsonl")


def test_ssh_settings_fail_closed_with_their_lines(tmp_path: Path) -> None:
    from tests.fixtures.sample import copy_examples

    path = copy_examples(tmp_path / "sample")
    text = path.read_text().replace("inventory:\n", "inventory:\n  ssh: {max_handshakes: 0, "
                                    "connect_attempts: many, idle_close: 300, retries: 3}\n", 1)
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    text = str(caught.value)
    for key in ("max_handshakes", "connect_attempts", "retries"):  # each on its own line
        assert f"deckhand.yml:15 inventory.ssh.{key}:" in text, text
    assert len(caught.value.problems) == 3
