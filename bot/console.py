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

import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.live import Live
from rich.prompt import Prompt

from agents.errors import PlanInvalid
from agents.plan import Plan
from agents.runs import Approval, Event, Run, RunStatus
from agents.services import Services
from bot.render import plan_table, status_table, summary
from tools.runner import CancelToken

Editor = Callable[[str], str]
"""Takes the plan as YAML text, returns the edited text."""


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

    def handle(self, request: str, *, yes: bool = False) -> Run | None:
        """Plan ``request``, get it approved, run it. None if the user rejected it."""
        plan = self.services.make_plan(request, requested_by=self.user)
        plan = self.approve(plan, yes=yes)
        if plan is None:
            self.console.print("[yellow]Rejected — nothing was run.[/]")
            return None
        return self.execute(plan)

    def approve(self, plan: Plan, *, yes: bool) -> Plan | None:
        """Show the plan and loop on Modify until it is approved (or rejected)."""
        while True:
            self.console.print(plan_table(plan))
            if yes:
                return plan
            decision = self.ask()
            if decision is Decision.APPROVE:
                return plan
            if decision is Decision.REJECT:
                return None
            plan = self.modify(plan)

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
        return revised

    def execute(self, plan: Plan) -> Run:
        """Run an approved plan with a live status table; Ctrl-C cancels (and rolls back)."""
        run = Run.for_plan(plan, status=RunStatus.APPROVED)
        run.approvals.append(Approval(user=self.user, plan_version=plan.version,
                                      plan_hash=plan.hash))
        cancel = CancelToken()
        with Live(status_table(plan, run), console=self.console, refresh_per_second=8) as live:
            def on_event(event: Event, current: Run) -> None:
                live.update(status_table(plan, current))

            result = self._run_interruptibly(plan, run, cancel, on_event)
        self.console.print(summary(plan, result))
        return result

    def _run_interruptibly(self, plan: Plan, run: Run, cancel: CancelToken,
                           listener: Callable[[Event, Run], None]) -> Run:
        box: dict[str, Run] = {}
        worker = threading.Thread(target=lambda: box.setdefault(
            "run", self.services.executor.execute(plan, run, cancel=cancel,
                                                  listeners=[listener])), daemon=True)
        worker.start()
        while worker.is_alive():
            try:
                worker.join(0.2)
            except KeyboardInterrupt:
                cancel.cancel(f"interrupted by {self.user} from the terminal")
                self.console.print("[magenta]Cancelling: running steps are stopped, then "
                                   "rollback runs. Wait for it to finish.[/]")
        return box["run"]

    def _prompt_decision(self) -> Decision:
        choice = Prompt.ask("[bold]Approve, Modify or Reject?[/]", choices=["a", "m", "r"],
                            default="r", console=self.console)
        return {"a": Decision.APPROVE, "m": Decision.MODIFY, "r": Decision.REJECT}[choice]


def plan_to_yaml(plan: Plan) -> str:
    """The editable part of a plan (goal, steps, rollback) as YAML."""
    body = plan.model_dump(include={"goal", "steps", "rollback"}, mode="json",
                           exclude_none=True)
    return yaml.safe_dump(body, sort_keys=False, allow_unicode=True)


def plan_from_yaml(plan: Plan, text: str) -> Plan:
    """A new version of ``plan`` from edited YAML; ValueError says what is wrong."""
    try:
        body = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"invalid YAML: {exc}") from exc
    if not isinstance(body, dict):
        raise ValueError("the plan must be a mapping with goal, steps and rollback")
    unknown = set(body) - {"goal", "steps", "rollback"}
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}: only goal, steps and rollback "
                         f"can be edited")
    try:
        return plan.revised(**body)
    except ValidationError as exc:
        raise ValueError(_short_validation(exc)) from exc


def _short_validation(exc: ValidationError) -> str:
    return "\n".join(f"  - {'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())


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
