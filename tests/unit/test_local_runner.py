import os
from pathlib import Path

from tests.fixtures.polling import wait_until
from tools.runners.base import CancelToken
from tools.runners.local import LocalRunner


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_streams_lines_and_keeps_exit_code() -> None:
    lines: list[str] = []
    result = LocalRunner().run("echo one; echo two >&2; exit 3", timeout=10,
                               on_output=lines.append)
    assert result.exit_code == 3 and not result.ok
    assert sorted(lines) == ["one", "two"]
    assert "one" in result.tail


def test_megabytes_of_output_keep_a_bounded_tail() -> None:
    count = [0]
    result = LocalRunner().run("yes 0123456789 | head -c 8000000; echo END", timeout=60,
                               on_output=lambda _: count.__setitem__(0, count[0] + 1))
    assert result.ok
    assert len(result.tail) <= 8192 and result.tail.rstrip().endswith("END")
    assert count[0] > 700_000


def test_deadline_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    result = LocalRunner().run(f"sleep 300 & echo $! > {pidfile}; wait", timeout=0.5)
    assert result.timed_out and result.exit_code is None
    child = int(pidfile.read_text())
    wait_until(lambda: not pid_alive(child), timeout=10, what="the backgrounded child to die")


def test_cancel_stops_a_running_command() -> None:
    token = CancelToken()
    started: list[str] = []

    def on_line(line: str) -> None:
        started.append(line)
        token.cancel("test")

    result = LocalRunner().run("echo go; sleep 300", timeout=60, on_output=on_line,
                               cancel=token)
    assert result.cancelled and started == ["go"]


def test_environment_and_missing_command() -> None:
    result = LocalRunner(env={**os.environ, "DH_X": "42"}).run("echo $DH_X; nosuchcmd-xyz",
                                                               timeout=10)
    assert "42" in result.tail and result.exit_code == 127
