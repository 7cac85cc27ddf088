"""Gates run like commands: the executor hands the rendered gate (JSON) to this runner, which
evaluates it here, streams each measured line as output, and answers exit 0 (passed) or 1.

So a gate gets what a command gets — a deadline, retries, cancel, output in the thread and
the run record — without the executor knowing what a gate is. The result is a
``GateCommandResult``: it also carries the judged samples and the one-line reason.
The deadline (the tool's ``timeout``) bounds the whole gate, HTTP calls included.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pydantic import TypeAdapter, ValidationError

from tools.errors import ToolError
from tools.gates import GateResult, GateSpec, evaluate
from tools.runners.base import CancelToken, CommandResult, OutputSink, PidSink

_SPEC: TypeAdapter[GateSpec] = TypeAdapter(GateSpec)


@dataclass(frozen=True)
class GateCommandResult(CommandResult):
    """A command result that also says what the gate measured."""

    gate: GateResult = field(default_factory=lambda: GateResult(False))


class GateRunner:
    """Evaluates gates on the deckhand machine (a Runner)."""

    def run(self, command: str, *, timeout: float, on_output: OutputSink | None = None,
            cancel: CancelToken | None = None, on_start: PidSink | None = None
            ) -> GateCommandResult:
        try:
            spec = _SPEC.validate_json(command)
        except ValidationError as exc:
            first = exc.errors()[0]["msg"] if exc.errors() else "invalid"
            raise ToolError(f"not a gate: {exc.error_count()} problem(s): {first}") from exc
        token = cancel or CancelToken()
        started = time.monotonic()
        deadline = started + timeout

        def wait(seconds: float) -> bool:
            """Sleep, waking for a cancel; past the deadline counts as cancelled."""
            remaining = deadline - time.monotonic()
            return seconds >= remaining or token.wait(seconds)

        result = evaluate(spec, wait, deadline=deadline)
        timed_out = time.monotonic() >= deadline
        if timed_out and result.ok:  # judged too late: a gate never passes past its deadline
            result.failed(f"deadline exceeded ({timeout:g}s)")
        for line in result.lines:
            if on_output is not None:
                on_output(line)
        # timed_out stays False: past its deadline a gate fails with "deadline exceeded" as
        # its own last line, which says more than "the process was killed" (there is none)
        return GateCommandResult(exit_code=0 if result.ok else 1, tail="\n".join(result.lines),
                                 duration=time.monotonic() - started, timed_out=False,
                                 cancelled=token.cancelled, gate=result)

    def kill_group(self, pid: int) -> None:
        """Nothing to stop: a gate runs inside deckhand."""

    def check_ready(self) -> None:
        """A gate needs nothing but deckhand itself."""
