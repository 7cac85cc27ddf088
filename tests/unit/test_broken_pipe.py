"""A closed pipe never ends deckhand: the `deckhand` entry point guards its output like
`python -m bot.cli`, and the terminal's console goes quiet on a broken pipe instead of
raising rich's SystemExit (each in a process of its own: both change file descriptors)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_the_console_script_entry_point_guards_its_output() -> None:
    done = _python("import sys; sys.argv = ['deckhand', 'plan', 'x', '--config', '/nowhere.yml']"
                   "; from bot.launch import main; code = main(); "
                   "sys.stderr.write(f'\\n{code} {type(sys.stdout).__name__}')")
    assert done.stderr.splitlines()[-1] == "2 GuardedStream", done.stderr


def test_a_console_whose_reader_is_gone_goes_quiet_and_the_process_carries_on() -> None:
    done = _python(
        "import os, sys\n"
        "from bot.terminal.border import TerminalConsole\n"
        "read, write = os.pipe(); os.close(read)\n"
        "console = TerminalConsole(file=os.fdopen(write, 'w'))\n"
        "console.print('into a pipe nobody reads')\n"
        "console.print('and again')\n"
        "print('still here', console.quiet)\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "still here True\n"  # stdout itself was left alone
    assert "output there is dropped from now on" in done.stderr  # said once, in the log
