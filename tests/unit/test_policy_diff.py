"""Issue 32: ``deckhand policy diff OLD NEW`` says what a config change changes for each
environment, computed through eligibility (a host shared with production makes staging
production's too), exits like diff (0 same, 1 changed, 2 invalid) and has --json."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from bot.cli import main

OLD = """
inventory:
  hosts:
    a: {connection: local}
    b: {connection: local}
  environments:
    production: {hosts: [a]}
    staging: {hosts: [b]}
policy:
  environments:
    production: {approvers: {users: [alice, bob]}}
"""

NEW = """
inventory:
  hosts:
    a: {connection: local}
    b: {connection: local}
  environments:
    production: {hosts: [a, b]}
    staging: {hosts: [b]}
    qa: {hosts: [a]}
policy:
  environments:
    production: {approvers: {users: [alice, carol]}, min_approvals: 2, self_approval: false}
  limits:
    production: {runs_per_hour: 3, hosts_per_run: 50}
  break_glass: {users: [ic]}
  freeze:
    - {environments: [production], reason: release week, start: "2030-01-01T00:00:00",
       end: "2030-01-08T00:00:00"}
"""


def configs(tmp_path: Path, old: str = OLD, new: str = NEW) -> tuple[Path, Path]:
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "deckhand.yml").write_text(textwrap.dedent(old))
    (tmp_path / "new.yml").write_text(textwrap.dedent(new))
    return tmp_path / "old", tmp_path / "new.yml"  # a directory, or the file itself


def diff(capsys: pytest.CaptureFixture[str], *args: Path | str) -> tuple[int, str]:
    code = main(["policy", "diff", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_every_environment_as_approvers_would_see_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = configs(tmp_path)
    code, out = diff(capsys, old, new)
    assert code == 1
    lines = [line.rstrip() for line in out.splitlines()]
    production = lines[lines.index("production:") + 1:lines.index("staging:")]
    assert production == [
        "  who may approve: production: alice, bob → production: alice, carol",
        "  approvers by name: added carol; removed bob",
        "  approvals needed: 1 → 2",
        "  self-approval allowed: yes → no",
        "  rules: added policy.default (staging has no entry), policy.default (qa has no entry)",
        "  freeze windows: added 2030-01-01T00:00:00 to 2030-01-08T00:00:00 (UTC): release week",
        "  break-glass granted by: none → ic",
        "  limits: none → 3 production run(s) per hour per person; 50 production host(s) per run",
        "  hosts: added b"]
    # staging's YAML did not change, but its host is now production's: its approvers did,
    # and production's freeze and limits hold a staging deploy too (issue 29.2)
    staging = lines[lines.index("staging:") + 1:lines.index("qa: added")]
    assert staging == ["  who may approve: anyone → production: alice, carol",
                       "  approvers by name: added alice, carol",
                       "  approvals needed: 1 → 2",
                       "  self-approval allowed: yes → no",
                       "  rules: added policy.environments.production",
                       "  freeze windows: added 2030-01-01T00:00:00 to 2030-01-08T00:00:00 "
                       "(UTC): release week (via production: shares a host)",
                       "  break-glass granted by: none → ic",
                       "  limits: none → 3 production run(s) per hour per person; 50 "
                       "production host(s) per run"]
    qa = lines[lines.index("qa: added") + 1:lines.index("(no environment):")]
    assert qa[:3] == ["  who may approve: production: alice, carol",
                      "  approvers by name: alice, carol", "  approvals needed: 2"]
    assert "  hosts: a" in qa
    assert "  freeze windows: 2030-01-01T00:00:00 to 2030-01-08T00:00:00 (UTC): release week " \
           "(via production: shares a host)" in qa


def test_exit_codes_json_and_one_line_for_an_invalid_config(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = configs(tmp_path)
    assert diff(capsys, old, old / "deckhand.yml") == (
        0, f"no policy change between {old / 'deckhand.yml'} and {old / 'deckhand.yml'}\n")
    code, out = diff(capsys, old, new, "--json")
    document = json.loads(out)
    assert code == 1 and document["changed"] is True
    rows = {row["environment"]: row for row in document["environments"]}
    assert rows["qa"]["status"] == "added" and rows["staging"]["status"] == "changed"
    needed = [c for c in rows["production"]["changes"] if c["field"] == "needed"]
    assert needed == [{"field": "needed", "old": 1, "new": 2}]
    assert [c["new"] for c in rows["production"]["changes"] if c["field"] == "limits"] == [
        "3 production run(s) per hour per person; 50 production host(s) per run"]

    new.write_text(textwrap.dedent(NEW).replace("  limits:\n    production:",
                                                "  limits:\n    prod:"))
    code, out = diff(capsys, old, new)
    assert code == 2
    assert out.strip().splitlines() == [
        f"error: NEW is not a valid config: {new}:14 policy.limits.prod: unknown environment "
        f"'prod' (known: production, qa, staging)"]
