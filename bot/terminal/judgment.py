"""``deckhand run``'s go/no-go between rollout batches: when the rollout holds, the live
table pauses and asks Continue or Roll back here (or names the command to type elsewhere).

The question is asked on a thread of its own, so the run's thread goes on holding (and
Ctrl-C on the main thread still cancels); the answer goes through the same store call as
every face (``store.judgments.decide``: the approval rules decide, refusals are audited).
"""

from __future__ import annotations

import contextlib
import threading

from rich.console import Console
from rich.live import Live
from rich.prompt import Prompt

from agents.engine.desk import RunDesk
from agents.errors import ApprovalRefused
from agents.run.judgment import clock_time, measured_line, results_line
from agents.run.mirror import RunMirror
from agents.run.record import Event, EventKind, Judgment, Run, Verdict
from agents.services import Services
from bot.terminal.keys import TerminalKeys


class GoNoGoPrompt:
    """An executor listener: passes every event to the live table's ``mirror``, and on each
    go/no-go hold asks here (see the module)."""

    def __init__(self, services: Services, console: Console, live: Live, *, user: str,
                 mirror: RunMirror, keys: TerminalKeys | None = None):
        self.services, self.console, self.live, self.user = services, console, live, user
        self.mirror = mirror
        self.keys = keys
        """The live table's key reader, if any: it stands aside while this prompt asks."""
        self._asked: dict[str, list[str]] = {}
        """Holds asked about, and the figures last shown for each (only changes are shown)."""

    def __call__(self, event: Event, run: Run) -> None:
        self.mirror(event, run)
        if event.kind is EventKind.JUDGMENT_AWAITED and event.judgment is not None:
            held = Judgment.model_validate(event.judgment)
            if held.hold in self._asked:  # newer figures of the same hold: asked already
                if held.gates != self._asked[held.hold] and not self.live.is_started:
                    self.console.print(f"   newer figures ({measured_line(held)}):",
                                       markup=False)
                    for gate in held.gates:
                        self.console.print(f"   gate {gate}", markup=False)
                self._asked[held.hold] = held.gates
                return
            self._asked[held.hold] = held.gates
            threading.Thread(target=self._ask, args=(run.id, held), daemon=True,
                             name=f"go-no-go-{run.id}").start()

    def _ask(self, run_id: str, held: Judgment) -> None:
        self.live.stop()
        then = "continues" if held.on_timeout is Verdict.CONTINUE else "rolls back"
        self.console.print(f"\n⏸  Go/no-go {held.where()}: {results_line(held)}", markup=False)
        for gate in held.gates:
            self.console.print(f"   gate {gate}", markup=False)
        self.console.print(f"   Nothing new starts until someone decides; with no decision by "
                           f"{clock_time(held.deadline)} it {then}. Elsewhere: deckhand judge "
                           f"{run_id} continue|rollback", markup=False)
        try:
            with self.keys.aside() if self.keys else contextlib.nullcontext():
                answer = Prompt.ask("[bold]Continue or Roll back?[/]", choices=["c", "r"],
                                    console=self.console)
        except (EOFError, OSError):  # no terminal: leave it to others, or the timeout
            self.console.print(f"   No answer here: waiting for `deckhand judge {run_id} "
                               f"continue|rollback` (needs REDIS_URL) or the timeout.",
                               markup=False)
            self.live.start()
            return
        self._decide(run_id, held, Verdict.CONTINUE if answer == "c" else Verdict.ROLLBACK)
        self.live.start()

    def _decide(self, run_id: str, held: Judgment, verdict: Verdict) -> None:
        try:
            RunDesk(self.services).judge(run_id, verdict, user=self.user, via="terminal",
                                         hold=held.hold)
        except ApprovalRefused as exc:
            self.console.print(f"refused: {exc}", markup=False)
