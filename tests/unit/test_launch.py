"""The ``deckhand`` entry point answers --version without loading deckhand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_version_loads_nothing_of_deckhand_and_other_commands_reach_the_cli() -> None:
    probe = ("import sys; from bot.launch import main; code = main(['--version']); "
             "print(code, sorted(m for m in sys.modules if m.split('.')[0] in "
             "('bot', 'agents', 'tools', 'rich', 'redis', 'pydantic', 'paramiko')))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out[0].startswith("deckhand ")
    assert out[1] == "0 ['bot', 'bot.launch']"
    shown = subprocess.run([sys.executable, "-m", "bot.launch", "help"], cwd=ROOT,
                           capture_output=True, text=True)
    assert "deckhand" in shown.stdout + shown.stderr and "Traceback" not in shown.stderr
