"""The terminal's prompts as a person meets them, through a pty: Modify keeps a refused edit,
a missing editor and the end of input each give one clear line, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from agents.config import load_config
from agents.errors import ApprovalRefused
from agents.run.record import RunStatus
from agents.store import Store
from bot.cli import main

ROOT = Path(__file__).resolve().parents[2]

EDITOR = """#!/usr/bin/env python3
import os, pathlib, sys
path, log = pathlib.Path(sys.argv[1]), pathlib.Path(os.environ["EDIT_LOG"])
n = len(list(log.glob("*.yml")))
text = path.read_text()
(log / f"{n}.yml").write_text(text)
fixed = text.replace("run_testz", "run_tests") if n else text.replace("tool: run_tests", "tool: run_testz")
path.write_text(fixed.replace("Deploy v1.0.0", "Deploy v1.0.0 (edited)"))
"""


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DECKHAND_CONFIG", raising=False)
    assert main(["init"]) == 0
    (tmp_path / "edits").mkdir()
    editor = tmp_path / "editor.py"
    editor.write_text(EDITOR)
    editor.chmod(0o755)
    return tmp_path


def _spawn(workspace: Path, editor: str) -> pexpect.spawn:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EDITOR": editor, "VISUAL": "",
           "EDIT_LOG": str(workspace / "edits"), "COLUMNS": "100", "TERM": "dumb"}
    return pexpect.spawn(sys.executable, ["-m", "bot.cli", "run", "deploy v1.0.0"],
                         cwd=str(workspace), env=env, encoding="utf-8", timeout=60)


def test_modify_reopens_the_refused_edit_with_errors_on_top(workspace: Path) -> None:
    child = _spawn(workspace, str(workspace / "editor.py"))
    child.expect(r"Approve, Modify or Reject\?")
    child.sendline("m")
    child.expect("not accepted")
    child.expect(r"Approve, Modify or Reject\?")
    child.sendline("m")
    child.expect("Plan updated to version 2")
    child.expect(r"Approve, Modify or Reject\?")
    child.sendline("a")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    second = (workspace / "edits" / "1.yml").read_text()
    assert second.startswith("# ! This edit was not accepted:")
    assert "unknown tool 'run_testz'" in second.split("\ngoal:")[0]
    assert "tool: run_testz" in second  # the user's edit, not the old plan
    assert (workspace / ".deckhand/hosts/prod-1/current").read_text().strip() == "v1.0.0"


def test_missing_editor_then_end_of_input(workspace: Path) -> None:
    child = _spawn(workspace, "/nonexistent/editor")
    child.expect(r"Approve, Modify or Reject\?")
    child.sendline("m")
    child.expect("Cannot start the editor")
    child.expect(r"Approve, Modify or Reject\?")
    child.sendeof()
    child.expect("No answer")
    child.expect(pexpect.EOF)
    output = child.before or ""
    child.close()
    assert child.exitstatus == 3  # closed unapproved (ExitCode.REFUSED): nothing ran
    assert "Traceback" not in output
    assert not (workspace / ".deckhand/hosts/prod-1/current").exists()


def test_no_input_at_all_rejects_with_one_line(workspace: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "bot.cli", "run", "deploy v1.0.0"],
                          cwd=workspace, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 3  # closed unapproved (ExitCode.REFUSED)
    assert "No answer (end of input): cancelling, nothing was run" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def _spawn_shared(workspace: Path, redis_url: str) -> pexpect.spawn:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REDIS_URL": redis_url, "COLUMNS": "100",
           "TERM": "dumb"}
    return pexpect.spawn(sys.executable, ["-m", "bot.cli", "run", "deploy v1.0.0"],
                         cwd=str(workspace), env=env, encoding="utf-8", timeout=60)


@pytest.mark.parametrize(("leave", "code", "why"), [
    ("ctrl-c", 130, "left the approval prompt without deciding (Ctrl-C or end of input)"),
    ("end of input", 3, "no answer at the approval prompt (end of input)")])  # 3: REFUSED
def test_leaving_the_prompt_cancels_the_run_with_who_and_why(
        workspace: Path, redis_url: str, store: Store, leave: str, code: int, why: str) -> None:
    child = _spawn_shared(workspace, redis_url)
    child.expect(r"Approve, Modify or Reject\?")
    if leave == "ctrl-c":
        child.sendintr()
    else:
        child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == code
    (run,) = store.runs.recent(limit=10)
    assert run.status is RunStatus.CANCELLED  # nobody rejected it: nobody decided
    assert run.reason == f"cancelled by {run.requested_by}: {why}"
    entries = store.audit.entries(run_id=run.id)
    (entry,) = [e for e in entries if e.action == "cancelled"]
    assert entry.actor == run.requested_by and why in entry.details["reason"]
    assert "rejected" not in [e.action for e in entries]
    with pytest.raises(ApprovalRefused, match="cancelled"):  # nobody can approve it behind the person's back
        store.runs.approve(run.id, face="cli", user="someone-else", plan_version=run.plan_version,
                           plan_hash=run.plan_hash, policy=load_config(workspace / "deckhand.yml").policy)


def test_leaving_the_run_for_other_approvers_is_said_explicitly(
        workspace: Path, redis_url: str, store: Store) -> None:
    child = _spawn_shared(workspace, redis_url)
    child.expect(r"l: leave it for other approvers")
    child.sendline("l")
    child.expect("Left for other approvers")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 4  # ExitCode.NEEDS_APPROVALS
    (run,) = store.runs.recent(limit=10)
    assert run.status is RunStatus.AWAITING_APPROVAL
    assert "left_for_approvers" in [e.action for e in store.audit.entries(run_id=run.id)]
