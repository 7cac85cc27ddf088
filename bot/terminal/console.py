"""The terminal front end: plan, ask Approve / Modify / Reject, run with a live table, summarise.

The same flow as Slack, with no Slack: it is the embedded default behind ``deckhand run``
and ``deckhand demo``.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.prompt import Prompt

from agents.approvals import approvals_needed
from agents.dryrun import LABEL as DRY_LABEL
from agents.dryrun import dry_plan
from agents.errors import ApprovalRefused, PlanInvalid
from agents.ids import short_id
from agents.plan import Plan
from agents.plan_diff import diff_plans
from agents.plan_yaml import plan_from_yaml, plan_to_yaml
from agents.runs import Event, Run, RunStatus
from agents.services import Services
from agents.worker import Worker
from bot.terminal.render import diff_text, plan_table, status_table, summary

Editor = Callable[[str], str]
"""Takes the plan as YAML text, returns the edited text."""


EXIT_ABANDONED = 130
"""Exit status when a second Ctrl-C abandons a rollback in progress."""


class Decision(StrEnum):
    APPROVE = "approve"
    MODIFY = "modify"
    REJECT = "reject"


class ConsoleFlow:
    """Drives one request from plan to summary in the terminal."""

    def __init__(self, services: Services, console: Console, *, user: str,
                 editor: Editor | None = None, ask: Callable[[], Decision] | None = None):
        self.services = services
        self.console = console
        self.user = user
        self.editor = editor or edit_in_editor
        self.ask = ask or self._prompt_decision

    def handle(self, request: str, *, yes: bool = False,
               break_glass: str | None = None) -> Run | None:
        """Plan ``request``, get it approved, run it. None if it was rejected or refused.

        ``break_glass``: why it must go ahead during a freeze (one more approval needed).
        """
        plan = self.services.make_plan(request, requested_by=self.user,
                                       break_glass=break_glass)
        if self.services.is_read_only(plan):
            self.console.print(plan_table(plan))
            self.console.print("[dim]Read-only: running it now, no approval needed.[/]")
            run = self.services.queue_read_only(plan, user=self.user)
            return self.execute(plan, run.id)
        store = self.services.store
        store.save_plan(plan)
        run = store.create_run(Run.for_plan(plan, break_glass=break_glass))
        store.audit("planned", actor=self.user, run_id=run.id, plan_id=plan.id, request=request,
                    break_glass=break_glass)
        if break_glass:
            self.console.print(f"🚨 {self.services.break_glass_note(plan, break_glass)}",
                               markup=False)
        approved = self.approve(plan, yes=yes, run_id=run.id)
        if approved is None:
            store.transition(run.id, RunStatus.REJECTED, reason=f"rejected by {self.user}")
            store.audit("rejected", actor=self.user, run_id=run.id, plan_id=plan.id)
            self.console.print("[yellow]Rejected — nothing was run.[/]")
            return None
        return self._approve_and_execute(approved, run.id)

    def dry_run(self, request: str) -> Run:
        """Plan ``request`` and run its checks only: no approval, no locks, nothing changed."""
        plan = self.services.make_plan(request, requested_by=self.user)
        self.console.print(plan_table(plan))
        self.console.print(f"[bold cyan]{DRY_LABEL}[/]: each step runs its tool's check")
        dry = dry_plan(plan, self.services.config.catalog)
        with Live(status_table(dry.plan, Run.for_plan(dry.plan)), console=self.console,
                  refresh_per_second=8) as live:
            run, _ = self.services.dry_run(plan, user=self.user, listeners=[
                lambda event, current: live.update(status_table(dry.plan, current))])
        self.console.print(summary(dry.plan, run))
        for step in run.steps.values():
            for host in step.hosts.values():
                for line in host.tail.splitlines()[-3:]:
                    self.console.print(f"  {step.id} on {host.host}: {line}", markup=False,
                                       highlight=False)
        if dry.unchecked:
            self.console.print(f"not checked (no check: in tools.yml): "
                               f"{', '.join(dry.unchecked)}", markup=False)
        self.console.print(f"[bold cyan]{DRY_LABEL}[/]")
        return run

    def approve(self, plan: Plan, *, yes: bool, run_id: str | None = None) -> Plan | None:
        """Show the plan and loop on Modify until it is approved (or rejected)."""
        while True:
            self.console.print(plan_table(plan))
            for line in self.services.changelog(plan):
                self.console.print(line, markup=False, highlight=False)
            if yes:
                return plan
            decision = self.ask()
            if decision is Decision.APPROVE:
                return plan
            if decision is Decision.REJECT:
                return None
            revised = self.modify(plan)
            if revised is not plan and run_id is not None:
                self.services.store.save_plan(revised)
                self.services.store.revise(run_id, revised)
                self.services.store.audit("modified", actor=self.user, run_id=run_id,
                                          plan_id=plan.id, version=revised.version)
            plan = revised

    def modify(self, plan: Plan) -> Plan:
        """Let the user edit the plan as YAML; invalid edits are shown and the old plan kept."""
        text = self.editor(plan_to_yaml(plan))
        try:
            revised = plan_from_yaml(plan, text)
            self.services.check(revised)
        except (PlanInvalid, ValueError) as exc:
            self.console.print(f"[red]The edited plan was not accepted:[/]\n{exc}")
            return plan
        if revised.hash == plan.hash:
            self.console.print("[dim]No change.[/]")
            return plan
        self.console.print(f"[green]Plan updated to version {revised.version}.[/]")
        self.console.print(diff_text(diff_plans(plan, revised)))
        return revised

    def _approve_and_execute(self, plan: Plan, run_id: str) -> Run | None:
        store = self.services.store
        try:
            run = store.approve(run_id, user=self.user, plan_version=plan.version,
                                plan_hash=plan.hash, policy=self.services.config.policy)
        except ApprovalRefused as exc:
            self.console.print(f"[red]Approval refused:[/] {exc}")
            return None
        if run.status is RunStatus.AWAITING_APPROVAL:
            needed = approvals_needed(run, self.services.config.policy)
            self.console.print(f"[yellow]Approved by you; {needed} more approval(s) needed "
                               f"before run {short_id(run_id)} starts.[/]")
            return run
        return self.execute(plan, run_id)

    def execute(self, plan: Plan, run_id: str) -> Run:
        """Run an approved, queued run here, with a live table; Ctrl-C cancels (and rolls back)."""
        worker = Worker(self.services, self.services.store, name=f"console-{os.getpid()}")
        initial = self.services.store.run(run_id)
        with Live(status_table(plan, initial), console=self.console,
                  refresh_per_second=8) as live:
            def on_event(event: Event, current: Run) -> None:
                live.update(status_table(plan, current))

            result = self._run_interruptibly(worker, run_id, on_event)
        final = result or self.services.store.run(run_id)
        if result is None:
            shown = short_id(run_id)
            self.console.print(f"Run {shown} was picked up by worker {final.worker}; follow it "
                               f"with `deckhand runs show {shown}`.")
        self.console.print(summary(plan, final))
        return final

    def _run_interruptibly(self, worker: Worker, run_id: str,
                           listener: Callable[[Event, Run], None]) -> Run | None:
        """Execute here; the first Ctrl-C cancels (running steps stop, rollback runs) and
        waits for it, a second one says what stopping now leaves behind, and exits."""
        box: dict[str, Run | None] = {}
        done = threading.Event()  # not thread.is_alive(): after a KeyboardInterrupt cut a
        # join() short, CPython may report a running thread as dead

        def work() -> None:
            try:
                box["run"] = worker.process(run_id, listeners=[listener])
            finally:
                done.set()

        # not a daemon: the interpreter must not end the rollback by exiting
        threading.Thread(target=work, name=f"run-{run_id}").start()
        interrupted = False
        while not done.is_set():
            try:
                done.wait(0.2)
            except KeyboardInterrupt:
                if interrupted:
                    self._abandon(run_id)
                interrupted = True
                self.services.store.request_cancel(run_id, user=self.user)
                self.console.print("[magenta]Cancelling: running steps are stopped, then "
                                   "rollback runs. Wait for it (Ctrl-C again to abandon "
                                   "it).[/]")
        return box.get("run")

    def _abandon(self, run_id: str) -> None:
        run = self.services.store.run(run_id)
        hosts = ", ".join(run.changed_hosts) or "none yet"
        self.console.print(f"Stopping now: run {run_id} is {run.status.value} and its "
                           f"rollback will not finish here. Hosts it changed: {hosts}; they "
                           f"may serve the new version. `deckhand runs show {run_id}` shows "
                           f"what ran; with REDIS_URL another worker takes the run over "
                           f"when its lease ends.", style="bold red", markup=False)
        self.console.file.flush()
        os._exit(EXIT_ABANDONED)

    def _prompt_decision(self) -> Decision:
        choice = Prompt.ask("[bold]Approve, Modify or Reject?[/]", choices=["a", "m", "r"],
                            default="r", console=self.console)
        return {"a": Decision.APPROVE, "m": Decision.MODIFY, "r": Decision.REJECT}[choice]


def edit_in_editor(text: str) -> str:
    """Open ``$VISUAL``/``$EDITOR`` (default vi) on ``text`` and return the result."""
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as handle:
        handle.write(text)
        path = Path(handle.name)
    try:
        subprocess.run([*editor.split(), str(path)], check=False)
        return path.read_text(encoding="utf-8")
    finally:
        path.unlink(missing_ok=True)
