"""Run commands on the deckhand host as subprocesses (the demo, CI hosts, local tools)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from tools.errors import CommandRefused, RunnerError
from tools.runners.base import (
    GATE,
    GO,
    NO,
    CancelToken,
    CommandResult,
    OutputCollector,
    OutputSink,
    PidSink,
)

KILL_GRACE = 2.0
"""Seconds between SIGTERM and SIGKILL when a command is stopped."""


class LocalRunner:
    """Runs ``/bin/sh -c COMMAND`` in its own process group.

    The overall deadline and cancellation kill the whole group, so children the
    command started do not outlive it. stderr is merged into stdout.
    """

    def __init__(self, *, cwd: Path | None = None, env: Mapping[str, str] | None = None):
        self.cwd = cwd
        self.env = dict(env) if env is not None else None

    def run(self, command: str, *, timeout: float, on_output: OutputSink | None = None,
            cancel: CancelToken | None = None, on_start: PidSink | None = None) -> CommandResult:
        started = time.monotonic()
        proc = self._spawn(command, gated=on_start is not None)
        if on_start is not None:  # its own session: the pid is the process-group id
            _answer_gate(proc, on_start)
        output = OutputCollector(on_output)
        reader = threading.Thread(target=_pump, args=(proc, output), daemon=True)
        reader.start()
        stopped = _Stopper(proc)
        unregister = cancel.on_cancel(stopped.stop) if cancel else (lambda: None)
        try:
            reader.join(timeout)
            timed_out = reader.is_alive()
            held_open = timed_out and proc.poll() is not None  # ended; a child holds stdout
            if timed_out:
                stopped.stop()
                reader.join()
            code = proc.wait()
        finally:
            unregister()
        output.close()
        was_cancelled = bool(cancel and cancel.cancelled and stopped.fired and not timed_out)
        return CommandResult(
            exit_code=None if stopped.fired else code,
            tail=output.tail(),
            duration=time.monotonic() - started,
            timed_out=timed_out,
            cancelled=was_cancelled,
            output_held_open=held_open,
        )

    def check_ready(self) -> None:
        """This machine is always there."""

    def kill_group(self, pid: int) -> None:
        """SIGTERM group ``pid``, SIGKILL what is left after the grace period."""
        _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + KILL_GRACE
        while time.monotonic() < deadline and _group_alive(pid):
            time.sleep(0.05)
        _signal_group(pid, signal.SIGKILL)

    def _spawn(self, command: str, *, gated: bool) -> subprocess.Popen[bytes]:
        # gated: the shell waits on stdin for the start gate's answer (see base.GATE)
        argv = ["/bin/sh", "-c", GATE + 'eval "$1"', "deckhand", command] if gated \
            else ["/bin/sh", "-c", command]
        try:
            return subprocess.Popen(
                argv, stdin=subprocess.PIPE if gated else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                cwd=self.cwd, env=self.env, start_new_session=True,
            )
        except OSError as exc:
            raise RunnerError(f"could not start local command: {exc.strerror}") from exc


def _answer_gate(proc: subprocess.Popen[bytes], on_start: PidSink) -> None:
    """Ask the start gate; a refused command's shell exits without running it."""
    assert proc.stdin is not None  # noqa: S101 - Popen was given stdin=PIPE when gated
    try:
        refusal = on_start(proc.pid)
    except BaseException:
        proc.stdin.close()  # EOF: the shell exits, running nothing
        proc.wait()
        raise
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.write(GO if refusal is None else NO)
        proc.stdin.close()
    if refusal is not None:
        if proc.stdout is not None:
            proc.stdout.close()
        proc.wait()
        raise CommandRefused(f"not started: {refusal}")


def _pump(proc: subprocess.Popen[bytes], output: OutputCollector) -> None:
    assert proc.stdout is not None  # noqa: S101 - Popen was given stdout=PIPE
    fd = proc.stdout.fileno()
    while chunk := os.read(fd, 65536):
        output.feed(chunk)
    proc.stdout.close()


class _Stopper:
    """Kills a process group once: SIGTERM, then SIGKILL after a grace period."""

    def __init__(self, proc: subprocess.Popen[bytes]):
        self.proc = proc
        self.fired = False
        self._lock = threading.Lock()

    def stop(self) -> None:
        with self._lock:
            if self.fired or self.proc.poll() is not None and not _group_alive(self.proc.pid):
                return
            self.fired = True
        _signal_group(self.proc.pid, signal.SIGTERM)
        threading.Thread(target=self._kill_later, daemon=True).start()

    def _kill_later(self) -> None:
        deadline = time.monotonic() + KILL_GRACE
        while time.monotonic() < deadline and _group_alive(self.proc.pid):
            time.sleep(0.05)
        _signal_group(self.proc.pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
