"""Issue 29.6: control sequences and bidi overrides never reach the terminal raw.

The real CLI in a subprocess (``python -m bot.cli plan`` / ``run --yes``), with a goal from
the planner holding ``ESC[2J ESC[31m`` and U+202E and a ``--user`` holding an escape: the
bytes on stdout and stderr carry none of them; they are shown spelled out (``\\x1b``).
Log lines too, whichever handler writes them (the log door in ``tools.redact``).
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rich.table import Table

from bot.terminal.border import TerminalConsole, visible

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = "note \x1b[2J\x1b[31mred \u202eevil \x9b31m \u2066x\u2069"
USER = "bob\x1b]0;owned\x07\x1b[8m"
RAW = [b"\x1b", b"\x07", "\u202e".encode(), "\u2066".encode(), "\x9b".encode()]

CONFIG = """
inventory:
  hosts: {box: {connection: local}}
  environments: {lab: {hosts: [box]}}
tools:
  note:
    description: records a note
    command: "echo noted"
    target: environment
    mutates: true
    rollback: unnote
  unnote:
    description: undoes a note
    command: "echo unnoted"
    target: environment
playbooks:
  - name: note
    description: notes something
    match: ['^note (?P<text>.+)$']
    examples: ["note hello"]
    goal: "Note {text}"
    steps: [{id: note, tool: note, params: {environment: lab}}]
    rollback: [{id: unnote, tool: unnote, params: {environment: lab}}]
"""


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    config = tmp_path / "deckhand.yml"
    config.write_text(textwrap.dedent(CONFIG))
    env = {k: v for k, v in os.environ.items()
           if k not in ("DECKHAND_CONFIG", "REDIS_URL", "OPENAI_API_KEY")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "bot.cli", *args, "--config", str(config)],
                          cwd=tmp_path, env=env, capture_output=True, timeout=120,
                          stdin=subprocess.DEVNULL, check=False)


def _assert_no_raw(result: subprocess.CompletedProcess[bytes]) -> None:
    for stream in (result.stdout, result.stderr):
        for raw in RAW:
            assert raw not in stream, (raw, stream.decode(errors="replace")[-2000:])


def test_plan_shows_a_hostile_goal_spelled_out(tmp_path: Path) -> None:
    for form in ("table", "yaml"):  # json is ASCII-escaped by json.dumps itself
        result = _cli(tmp_path, "plan", HOSTILE, "--format", form)
        assert result.returncode == 0, result.stderr.decode()
        _assert_no_raw(result)
        if form == "table":
            assert b"\\x1b" in result.stdout and b"\\u202e" in result.stdout


def test_run_and_its_summary_show_a_hostile_goal_and_user_spelled_out(tmp_path: Path) -> None:
    result = _cli(tmp_path, "run", HOSTILE, "--yes", "--user", USER)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    _assert_no_raw(result)
    out = result.stdout.decode()
    assert "SUCCEEDED" in out and "approved by bob\\x1b]0;owned" in out  # rich drops BEL


def test_a_real_terminal_keeps_deckhands_colours_but_not_the_hostile_ones() -> None:
    sink = io.StringIO()
    console = TerminalConsole(file=sink, force_terminal=True, color_system="standard",
                              width=100)
    table = Table(title=HOSTILE)
    table.add_column("who")
    table.add_row(USER)
    console.print(table)
    console.print(HOSTILE, style="bold red", markup=False)
    text = sink.getvalue()
    assert "\x1b[1;31m" in text  # rich's own styling still reaches the terminal
    for raw in ("\x1b[2J", "\x1b]0;", "\x07", "\u202e", "\u2066", "\x9b"):
        assert raw not in text
    assert visible("a\x1b[2Jb\u202ec\n\td") == "a\\x1b[2Jb\\u202ec\n\td"


def test_every_console_is_the_border() -> None:
    """No face builds a plain rich Console: each one prints through TerminalConsole."""
    plain = [str(path.relative_to(ROOT)) for path in (ROOT / "bot").rglob("*.py")
             if path.name not in ("border.py", "door.py")  # the door itself
             and re.search(r"(?<!Terminal)Console\(", path.read_text())]
    assert plain == []


LOG_LINE = """
import logging, sys
import bot.cli  # what every deckhand process loads first (its doors with it)
from bot.logs import configure_logging
if sys.argv[1] != "none":  # none: Python's last-resort handler, as a plain CLI has
    configure_logging(sys.argv[1])
logging.getLogger("deckhand.planner").warning("the planner chose rollback: %s", sys.argv[2])
try:
    raise RuntimeError(sys.argv[2])
except RuntimeError:
    logging.getLogger("deckhand.worker").exception("step crashed")
"""


@pytest.mark.parametrize("fmt", ["none", "text", "json"])
def test_log_lines_show_foreign_control_characters_spelled_out(fmt: str) -> None:
    """A log line is a terminal's too (serve and worker in a terminal, a CLI's warnings):
    the log door spells out what a model's reason or an error message carried."""
    result = subprocess.run([sys.executable, "-c", LOG_LINE, fmt, HOSTILE], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr.decode()
    _assert_no_raw(result)
    err = result.stderr.decode()
    assert "the planner chose rollback: note " in err and "RuntimeError: note " in err
    spelled = "\\\\x1b[2J" if fmt == "json" else "\\x1b[2J"  # JSON escapes the backslash
    assert err.count(spelled) == 2 and err.count(spelled.replace("x1b[2J", "u202e")) == 2
