"""Issue 41 §2: `deckhand check` refuses rules that can never be met and values of the wrong
type — each at its file:line, saying what to write instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.cli import main

BASE = """
inventory:
  hosts:
    web-1: {connection: local}
  environments:
    staging: {hosts: [web-1]}
tools:
  deploy:
    description: put a version on every host of an environment
    command: "echo {version}"
    target: environment
    params: {version: {pattern: '^v\\\\d+$'}}
    mutates: true
    rollback: undo
  undo:
    description: undo
    command: "true"
    target: environment
    mutates: true
policy:
"""


def check(tmp_path: Path, policy: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    path = tmp_path / "deckhand.yml"
    path.write_text(BASE + policy)
    code = main(["check", str(path)])
    return code, " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(("policy", "said"), [
    ("  environments: {staging: {approvers: {users: [alice, bob]}, min_approvals: 3}}",
     "policy.environments.staging.min_approvals: needs 3 approvals but the rule names 2 "
     "approver(s) (alice, bob)"),
    ("  environments: {staging: {approvers: {users: [alice, alice]}}}",
     "policy.environments.staging.approvers.users.1: 'alice' is listed twice"),
    ("  environments: {staging: {approvers: {users: ['alice ']}}}",
     "policy.environments.staging.approvers.users.0: 'alice ' has spaces around it (or is "
     "empty); no user or group is named that: write 'alice'"),
    ("  environments: {staging: {approvers: {users: [alice]}}}\n  break_glass: {users: []}",
     "policy.break_glass: names nobody"),
    ("  environments: {staging: {approvers: {users: [alice]}}}\n"
     "  limits: {staging: {runs_per_hour: true}}",
     "policy.limits.staging.runs_per_hour: Input should be a valid integer"),
    ("  environments: {staging: {approvers: {users: [alice]}}}\n"
     "  limits: {staging: {runs_per_hour: '3'}}",
     "policy.limits.staging.runs_per_hour: Input should be a valid integer"),
    ("  environments: {staging: {approvers: {users: [alice]}, min_approvals: '1'}}",
     "policy.environments.staging.min_approvals: Input should be a valid integer"),
])
def test_check_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str,
                       said: str) -> None:
    code, out = check(tmp_path, policy, capsys)
    assert code == 2 and said in out, out


def test_a_rule_that_can_be_met_passes(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, out = check(tmp_path, "  environments: {staging: {approvers: {users: [alice, bob], "
                      "groups: [sre]}, min_approvals: 3}}\n  break_glass: {users: [ic]}\n"
                      "  limits: {staging: {runs_per_hour: 3}}", capsys)
    assert code == 0, out  # a group may hold the third person
