"""Issue 41.6: an environment nobody wrote a rule for is open to anyone, the requester
included; `deckhand check` names every such environment and how to open it on purpose."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.cli import main

CONFIG = """
inventory:
  hosts: {box: {connection: local}}
  environments: {staging: {hosts: [box]}, qa: {hosts: [box]}, production: {hosts: [box]}}
tools:
  t: {description: d, command: "true", target: environment}
policy:
POLICY
"""


def _check(tmp_path: Path, policy: str, capsys: pytest.CaptureFixture[str]) -> str:
    path = tmp_path / "deckhand.yml"
    path.write_text(CONFIG.replace("POLICY", policy))
    assert main(["check", str(path)]) == 0
    return capsys.readouterr().out.replace("\n", " ")


def test_unwritten_environments_are_named_open(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = _check(tmp_path, "  environments:\n    production: {approvers: {users: [bob]}}",
                 capsys)
    assert "staging, qa: OPEN" in out and "the requester included" in out
    assert "policy.default: {approvers: {anyone: true}}" in out
    assert "production: OPEN" not in out


def test_a_written_default_is_open_on_purpose(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = _check(tmp_path, "  default: {approvers: {anyone: true}}", capsys)
    assert "OPEN —" not in out
