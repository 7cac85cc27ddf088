"""Issue 12 finding 5: ``deckhand check`` never tracebacks, checks every playbook template,
reports every problem in one pass at its own line, without knock-on echoes."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from bot.cli import main
from tests.fixtures.builders import BASE, SHELL_TOOLS


def check(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = main(["check", str(path)])
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    return code, [line.strip() for line in out.out.splitlines() if line.strip().startswith("-")]


def line_of(path: Path, text: str, nth: int = 0) -> str:
    numbers = [n for n, line in enumerate(path.read_text().splitlines(), start=1)
               if line.strip().startswith(text)]
    return f"{path}:{numbers[nth]}"


@pytest.mark.parametrize("content", [b"- a\n- b\n", b"\x89PNG\r\n\x1a\n\x00\xff\xfe",
                                     b"tools: [1, 2]\n", b"just a string\n", b"[" * 5000])
def test_any_tools_file_content_is_a_problem_not_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes) -> None:
    (tmp_path / "tools.yml").write_bytes(content)
    config = tmp_path / "deckhand.yml"
    config.write_text(textwrap.dedent(BASE) + "tools: tools.yml\n")
    code, problems = check(config, capsys)
    # one problem, or one per entry when the list is read as a gantz-style tools file
    assert code == 2 and problems and all("tools.yml" in p for p in problems)


@pytest.mark.parametrize("content", [b"- a\n", b"\xff\xfe\x00", b"42\n", b""])
def test_any_config_content_is_a_problem_not_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes) -> None:
    config = tmp_path / "deckhand.yml"
    config.write_bytes(content)
    code, problems = check(config, capsys)
    assert code == 2 and len(problems) == 1


PLAYBOOKS = """
playbooks:
  - name: no_examples
    match: ['^go (?P<version>v\\S+)$']
    goal: "go {version}"
    steps:
      - {id: a, tool: log, params: {line: "{version}"}}
      - {id: b, tool: nope, params: {}}
      - {id: c, tool: log, params: {line: x}, depends_on: [missing]}
      - {id: a, tool: log, params: {line: y}, depends_on: [a]}
      - {id: d, tool: change, params: {environment: prod, label: "{verison}"}}
    rollback:
      - {id: u, tool: undo, params: {environment: production}}
"""


def test_template_without_examples_every_problem_once_at_its_step(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inventory = textwrap.dedent(BASE).replace("production: {hosts: [web-2, web-3]",
                                              "production: {hosts: [web-2, web-9]")
    config = tmp_path / "deckhand.yml"
    config.write_text(inventory + textwrap.dedent(SHELL_TOOLS) + textwrap.dedent(PLAYBOOKS))
    code, problems = check(config, capsys)
    assert code == 2
    expected = {
        (line_of(config, "production: {hosts:"), "production lists unknown host 'web-9'"),
        (line_of(config, "match:"), "{verison}"),
        (line_of(config, "- {id: b,"), "unknown tool 'nope'"),
        (line_of(config, "- {id: c,"), "depends on unknown step 'missing'"),
        (line_of(config, "- {id: a,", 1), "duplicate step id"),
        (line_of(config, "- {id: d,"), "unknown environment 'prod'"),
    }
    for where, message in expected:
        assert any(where + " " in p and message in p for p in problems), (where, message)
    assert len(problems) == len(expected), problems  # no "depends on itself", no echo
