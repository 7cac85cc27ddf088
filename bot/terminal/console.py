"""The terminal front end: plan, ask Approve / Modify / Reject, run with a live table, summarise.

The same flow as Slack, with no Slack: it is the embedded default behind ``deckhand run``
and ``deckhand demo``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from enum import IntEnum, StrEnum
from pathlib import Path

from rich.console import Console, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.prompt import Prompt
from rich.text import Text

from agents import tracing
from agents.engine.desk import RunDesk
from agents.engine.worker import Worker
from agents.errors import ApprovalRefused, IllegalTransition, PlanInvalid, StoreError
from agents.faces import Face
from agents.ids import short_id
from agents.plan.diff import diff_plans
from agents.plan.dryrun import LABEL as DRY_LABEL
from agents.plan.dryrun import dry_plan, verdict
from agents.plan.model import Plan
from agents.plan.yaml import plan_from_yaml, plan_to_yaml
from agents.policy.approvals import approvals_needed
from agents.policy.rules import UNSCOPED, Policy
from agents.run.mirror import RunMirror
from agents.run.record import Event, Run, RunStatus
from agents.run.results import step_output
from agents.services import Services
from bot.terminal.judgment import GoNoGoPrompt
from bot.terminal.keys import HINT, TerminalKeys, terminal_keys
from bot.terminal.render import diff_text, live_view, plan_table, summary

log = logging.getLogger("deckhand.terminal")

Editor = Callable[[str], str]
"""Takes the plan as YAML text, returns the edited text."""
Confirm = Callable[[str], str]
"""Asks the user to type a name (an environment, or ``local``); returns what they typed."""
SAME_STORE = "the same REDIS_URL, or without it the same state directory on this machine"
"""Where other approvers' `deckhand approve` must point to see this terminal's run."""


class NoAnswer(EOFError):
    """The decision prompt met the end of its input: nobody decided, so the run is
    cancelled (said so), never approved and never recorded as someone's rejection."""

_PRESS_POLL = 0.05
"""Seconds between looks at the Ctrl-C count while a run executes here."""


class _Presses:
    """Ctrl-C presses while a run executes here: SIGINT's handler only counts them (it can
    never raise in the middle of the code handling an earlier one). Only on the main thread
    and where SIGINT was Python's KeyboardInterrupt (not ignored, not someone else's)."""

    def __init__(self) -> None:
        self.count = 0
        self.counting = False

    def __enter__(self) -> _Presses:
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            signal.signal(signal.SIGINT, self._pressed)
            self.counting = True
        return self

    def _pressed(self, signum: int, frame: object) -> None:
        self.count += 1

    def __exit__(self, *exc: object) -> None:
        if self.counting:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self.counting = False


class ExitCode(IntEnum):
    """How ``deckhand run`` (and ``approve``) end; documented in docs/start.md."""

    SUCCEEDED = 0
    FAILED = 1  # the run failed: rolled back, rollback failed, cancelled or interrupted
    INVALID = 2  # invalid input: config, request, plan or arguments
    REFUSED = 3  # rejected, or the approval / confirmation was refused
    NEEDS_APPROVALS = 4  # approved here, but policy needs more approvers than this terminal
    INTERNAL = 70  # a bug in deckhand (EX_SOFTWARE); the traceback is printed


EXIT_ABANDONED = 130
"""Exit status when a second Ctrl-C abandons a rollback in progress."""


class Decision(StrEnum):
    APPROVE = "approve"
    MODIFY = "modify"
    REJECT = "reject"
    LEAVE = "leave"
    """Leave the run awaiting approval, for other approvers (a shared store only)."""


class ConsoleFlow:
    """Drives one request from plan to summary in the terminal."""

    def __init__(self, services: Services, console: Console, *, user: str,
                 editor: Editor | None = None, ask: Callable[[], Decision] | None = None,
                 confirm: Confirm | None = None, params: Mapping[str, str] | None = None,
                 limit: Sequence[str] = ()):
        self.services = services
        self.params = dict(params or {})
        """Parameters set explicitly (``-e key=value``) for every request planned here."""
        self.limit = list(limit)
        """``--limit``: the hosts, groups or environments runs are narrowed to."""
        self.console = console
        self.user = user
        self.editor = editor or edit_in_editor
        self.ask = ask or self._prompt_decision
        self.confirm = confirm or self._prompt_confirm
        self.exit_code = ExitCode.INTERNAL
        self.draft: str | None = None
        """A refused edit, errors on top as comments: Modify reopens it, not the old plan."""
        self._keys: TerminalKeys | None = None
        """The keys that steer the run while its live table shows (a terminal only)."""

    @property
    def desk(self) -> RunDesk:
        """The one door for the run verbs (``agents.engine.desk``)."""
        return RunDesk(self.services)

    def handle(self, request: str, *, yes: bool = False,
               break_glass: str | None = None) -> Run:
        """Plan ``request``, get it approved, run it; ``exit_code`` says how it ended.

        ``break_glass``: why it must go ahead during a freeze (one more approval needed).
        """
        plan = self.services.make_plan(request, requested_by=self.user, face="terminal",
                                       break_glass=break_glass, params=self.params,
                                       limit=self.limit)
        if self.services.is_read_only(plan):
            self.console.print(plan_table(plan, self.services.targets(plan)))
            self.console.print("[dim]Read-only: running it now, no approval needed.[/]")
            run = self.services.queue_read_only(plan, user=self.user)
            return self.show_output(self.execute(plan, run.id))
        run = self.desk.propose(plan, user=self.user, face=Face.TERMINAL,
                                break_glass=break_glass, request=request)
        if break_glass:
            self.console.print(f"🚨 {self.services.break_glass_note(plan, break_glass)}",
                               markup=False)
        try:
            approved = self.approve(plan, yes=yes, run_id=run.id)
            if approved is None:
                return self._close(run.id, f"rejected by {self.user}",
                                   "Rejected — nothing was run.")
            if isinstance(approved, Decision):  # left, said explicitly, for other approvers
                return self._leave(run.id)
            return self._approve_and_execute(approved, run.id)
        except NoAnswer:  # nobody decided: not a rejection, but closed all the same
            self._cancel_unstarted(run.id, "no answer at the approval prompt (end of input)")
            self.exit_code = ExitCode.REFUSED
            return self.services.store.runs.get(run.id)
        except (KeyboardInterrupt, EOFError):  # left a prompt: nobody approves it behind us
            self._cancel_unstarted(run.id, "left the approval prompt without deciding "
                                           "(Ctrl-C or end of input)")
            raise

    def _cancel_unstarted(self, run_id: str, why: str) -> None:
        """Close a run this person walked away from before it started: cancelled, with who
        and why, audited (one that started meanwhile is left to its worker)."""
        reason = f"cancelled by {self.user}: {why}"
        with contextlib.suppress(IllegalTransition):
            self.desk.close(run_id, RunStatus.CANCELLED, actor=self.user, action="cancelled",
                            reason=reason, face=Face.TERMINAL, expect={
                                RunStatus.AWAITING_APPROVAL, RunStatus.APPROVED,
                                RunStatus.QUEUED})

    def _leave(self, run_id: str) -> Run:
        """Said explicitly: the run waits for other approvers."""
        store = self.services.store
        store.audit.record("left_for_approvers", actor=self.user, run_id=run_id)
        self.console.print(f"[yellow]Left for other approvers: `deckhand approve "
                           f"{short_id(run_id)} --user NAME` on the same store ({SAME_STORE}); "
                           f"a `deckhand worker` then runs it.[/]")
        self.exit_code = ExitCode.NEEDS_APPROVALS
        return store.runs.get(run_id)

    def dry_run(self, request: str) -> Run:
        """Plan ``request`` and run its checks only: no approval, no locks, nothing changed."""
        plan = self.services.make_plan(request, requested_by=self.user, face="terminal",
                                       params=self.params, limit=self.limit)
        self.console.print(plan_table(plan, self.services.targets(plan)))
        self.console.print(f"[bold cyan]{DRY_LABEL}[/]: each step runs its tool's check")
        dry = dry_plan(plan, self.services.config.catalog)
        blank = Run.for_plan(dry.plan, self.services.targets(dry.plan))
        if not dry.plan.steps:  # nothing to check: no empty live table, just say so below
            run, _ = self.services.dry_run(plan, user=self.user)
        else:
            live, mirror = self._live_status(dry.plan, blank)
            with live:
                run, _ = self.services.dry_run(plan, user=self.user, listeners=[mirror])
            self.console.print()
        for step in run.steps.values():
            for host in step.hosts.values():
                for line in host.tail.splitlines()[-3:]:
                    self.console.print(f"  {step.id} on {host.host}: {line}", markup=False,
                                       highlight=False)
        for line in dry.nothing_to_check():
            self.console.print(f"  {line}", markup=False, highlight=False)
        self.console.print(verdict(run.status.value, checked=len(run.steps),
                                   unchecked=dry.unchecked), style="bold cyan", markup=False)
        return run

    def _close(self, run_id: str, reason: str, message: str) -> Run:
        """End a run nobody can approve here: recorded as rejected, exit REFUSED."""
        run = self.desk.reject(run_id, user=self.user, face=Face.TERMINAL, reason=reason,
                               recorded=reason)
        self.console.print(f"[yellow]{escape(message)}[/]")
        self.exit_code = ExitCode.REFUSED
        return run

    def approve(self, plan: Plan, *, yes: bool,
                run_id: str | None = None) -> Plan | Decision | None:
        """Show the plan and loop on Modify until it is approved (the plan), rejected
        (None) or left for other approvers (Decision.LEAVE)."""
        while True:
            self.console.print(plan_table(plan, self.services.targets(plan)))
            for line in self.services.changelog(plan):
                self.console.print(line, markup=False, highlight=False)
            if yes:
                return plan
            decision = self.ask()
            if decision is Decision.APPROVE:
                return plan
            if decision is Decision.REJECT:
                return None
            if decision is Decision.LEAVE:
                return decision
            revised = self.modify(plan)
            if revised is not plan and run_id is not None:
                self.desk.revise(run_id, revised, user=self.user, face=Face.TERMINAL)
            plan = revised

    def modify(self, plan: Plan) -> Plan:
        """Let the user edit the plan as YAML; a refused edit is kept (errors on top) for the
        next Modify, so one typo never means redoing the whole edit."""
        try:
            text = self.editor(self.draft or plan_to_yaml(plan))
        except OSError as exc:
            self.console.print(f"[red]Cannot start the editor ({exc.strerror or exc}):[/] set "
                               "$VISUAL or $EDITOR to an installed one, e.g. export EDITOR=nano")
            return plan
        edit = without_error_notes(text)
        if not edit.strip():
            self.draft = None
            self.console.print(f"[dim]Empty edit: back to version {plan.version}.[/]")
            return plan
        try:
            revised = plan_from_yaml(plan, edit, edited_by=self.user)
            self.services.check(revised)
        except (PlanInvalid, ValueError) as exc:
            self.draft = with_error_notes(edit, str(exc))
            self.console.print(f"[red]The edited plan was not accepted:[/]\n"
                               f"{escape(str(exc))}\n[dim]Modify again to fix your edit "
                               "(the errors are at its top).[/]")
            return plan
        self.draft = None
        if revised.hash == plan.hash:
            self.console.print("[dim]No change.[/]")
            return plan
        self.console.print(f"[green]Plan updated to version {revised.version}.[/]")
        self.console.print(diff_text(diff_plans(plan, revised)))
        return revised

    def show_output(self, run: Run) -> Run:
        """Print what a read-only run printed (redacted, bounded): it is the answer."""
        text = step_output(run)
        self.console.print(Text(text) if text else Text("(no output)", style="dim"))
        return run

    def _approve_and_execute(self, plan: Plan, run_id: str) -> Run:
        store, policy = self.services.store, self.services.config.policy
        run = store.runs.get(run_id)
        unreachable = self._uncollectable(run)
        if unreachable:
            return self._close(run_id, unreachable, unreachable)
        problem = self.desk.problem(run, user=self.user, face=Face.TERMINAL)
        if problem:  # refused before asking for a confirmation that could not count
            return self._refused(run_id, problem)
        typed = confirmation_problem(run, policy, self.confirm)
        if typed:
            return self._close(run_id, f"not confirmed by {self.user}: {typed}",
                               f"Not confirmed ({typed}) — nothing was run.")
        try:
            run = self.desk.approve(run_id, user=self.user, face=Face.TERMINAL,
                                    plan_version=plan.version, plan_hash=plan.hash)
        except ApprovalRefused as exc:  # audited by the store
            return self._refused(run_id, str(exc), audited=True)
        if run.status is RunStatus.AWAITING_APPROVAL:
            self.console.print(f"[yellow]Approved by you; {approvals_needed(run, policy)} more "
                               f"approval(s) needed: other approvers run `deckhand approve "
                               f"{short_id(run_id)} --user NAME` on the same store "
                               f"({SAME_STORE}); a `deckhand worker` then runs it.[/]")
            self.exit_code = ExitCode.NEEDS_APPROVALS
            return run
        return self.execute(plan, run_id)

    def _refused(self, run_id: str, why: str, *, audited: bool = False) -> Run:
        """This user may not approve (audited, unless the store already did): a shared
        store keeps the run for approvers who may."""
        if not audited:
            self.desk.refused(self.services.store.runs.get(run_id), user=self.user,
                              face=Face.TERMINAL, rule=why)
        if self.services.store.where.startswith("in-process"):
            return self._close(run_id, f"approval refused: {why}",
                               f"Approval refused: {why} — nothing was run.")
        self.console.print(f"[red]Approval refused:[/] {escape(why)}\nRun {run_id} waits for "
                           f"an approver: `deckhand approve {run_id} --user NAME`.")
        self.exit_code = ExitCode.REFUSED
        return self.services.store.runs.get(run_id)

    def _uncollectable(self, run: Run) -> str | None:
        """Why this terminal cannot collect the approvals ``run`` needs (None if it can).

        Its only approver is the user at it; further approvers need a shared store.
        """
        needed = approvals_needed(run, self.services.config.policy)
        if needed <= 1 or not self.services.store.where.startswith("in-process"):
            return None
        return (f"this plan needs {needed} approvals ({', '.join(run.scopes)}), and this "
                f"terminal can collect only yours: its store is in-process and ends with "
                f"it. Set REDIS_URL to a shared Redis and run again; other approvers then "
                f"use `deckhand approve RUN --user NAME`.")

    def execute(self, plan: Plan, run_id: str) -> Run:
        """Run an approved, queued run here, with a live table; Ctrl-C cancels (and rolls
        back); on a terminal, keys pause, resume and stop it (``bot.terminal.keys``)."""
        worker = Worker(self.services, self.services.store, name=f"console-{os.getpid()}")
        initial = self.services.store.runs.get(run_id)
        hosts = self.services.host_counts(plan)
        self._keys = terminal_keys(self.services, self.console, run_id, user=self.user)
        live, mirror = self._live_status(plan, initial, hosts,
                                         hint=HINT if self._keys else None)
        asks = GoNoGoPrompt(self.services, self.console, live, user=self.user, mirror=mirror,
                            keys=self._keys)
        with live, self._keys or contextlib.nullcontext():
            result = self._run_interruptibly(worker, run_id, asks)
        if not self.console.is_terminal:  # piped, Live leaves its last line open
            self.console.line()
        final = result or self.services.store.runs.get(run_id)
        if result is None:
            shown = short_id(run_id)
            self.console.print(f"Run {shown} was picked up by worker {final.worker}; follow it "
                               f"with `deckhand runs show {shown}`.")
        self.console.print(summary(plan, final))
        found = tracing.reference(final.meta.get("traceparent"), self.services.settings.trace_url)
        if found:  # as `runs show` and Slack's summary say it
            self.console.print(f"trace: {found}", highlight=False, soft_wrap=True)
        ok = final.status is RunStatus.SUCCEEDED
        self.exit_code = ExitCode.SUCCEEDED if ok else ExitCode.FAILED
        return final

    def _live_status(self, plan: Plan, run: Run, hosts: dict[str, int] | None = None, *,
                     hint: str | None = None) -> tuple[Live, RunMirror]:
        """A live status table, drawn (8 times a second) from a mirror of the run that the
        executor keeps current: no table is built per event, whatever the number of hosts."""
        mirror = RunMirror(run)

        def table() -> RenderableType:
            return mirror.read(lambda current: live_view(plan, current, hosts, hint)) or Text()

        return Live(console=self.console, refresh_per_second=8, get_renderable=table), mirror

    def _run_interruptibly(self, worker: Worker, run_id: str,
                           listener: Callable[[Event, Run], None]) -> Run | None:
        """Execute here; the first Ctrl-C cancels (running steps stop, rollback runs) and
        waits for it, a second one says what stopping now leaves behind, and exits.

        This thread never leaves while the run's thread works, whatever the terminal does:
        once it returned, the interpreter would start shutting down under the rollback
        ("cannot schedule new futures after interpreter shutdown"). So a Ctrl-C is not a
        KeyboardInterrupt here, which could surface anywhere (between two checks, inside
        the handling of the first one): SIGINT only counts a press (``_Presses``), and this
        loop acts on it; a store that cannot take the stop, or a terminal that is gone, is
        said and logged, and the wait goes on."""
        box: dict[str, Run | None] = {}
        done = threading.Event()  # not thread.is_alive(): after a KeyboardInterrupt cut a
        # join() short, CPython may report a running thread as dead

        def work() -> None:
            try:
                box["run"] = worker.process(run_id, listeners=[listener])
            finally:
                done.set()

        with _Presses() as presses:
            # not a daemon: the interpreter must not end the rollback by exiting
            threading.Thread(target=work, name=f"run-{run_id}").start()
            handled = 0
            while not done.is_set():
                try:
                    done.wait(_PRESS_POLL if presses.counting else 0.2)
                except KeyboardInterrupt:  # SIGINT not ours to count (not the main thread)
                    presses.count += 1
                if presses.count > handled:
                    if handled:
                        self._abandon(worker, run_id)
                    handled = presses.count
                    self._cancel(run_id)
        return box.get("run")

    def _cancel(self, run_id: str) -> None:
        """Ask the run's worker (this process) to stop it, through the store as every face
        does, and say so where anyone may still read it."""
        try:  # the first stop is audited with it (via: terminal); one already asked (a
            # Stop in Slack), or a run that just ended, is left as it is
            self.desk.cancel(run_id, user=self.user, via="terminal")
        except ApprovalRefused:  # stopping already, or ended meanwhile: nothing to add
            return
        except StoreError as exc:  # its worker stops it all the same once its lease lapses
            log.error("run %s: Ctrl-C could not reach the store (%s); the run stops once "
                      "its lease cannot be renewed", run_id, exc)
            return
        self._say("[magenta]Cancelling: running steps are stopped, then rollback runs. "
                  "Wait for it (Ctrl-C again to abandon it).[/]")

    def _say(self, text: str) -> None:
        """Print, if anyone can read it: a closed pipe or a lost terminal never ends the
        wait for a rollback (TerminalConsole silences such a stream itself)."""
        with contextlib.suppress(OSError, ValueError):
            self.console.print(text)

    def _abandon(self, worker: Worker, run_id: str) -> None:
        if self._keys is not None:  # os._exit skips every finally: give the terminal back
            self._keys.close()
        worker.keep(run_id)  # on the in-process store: what ran, kept past this exit
        try:
            run = self.services.store.runs.get(run_id)
            state, hosts = run.status.value, ", ".join(run.changed_hosts) or "none yet"
        except StoreError:
            state, hosts = "in an unknown state (the store does not answer)", "unknown"
        with contextlib.suppress(OSError, ValueError):  # said if anyone can read it
            self.console.print(f"Stopping now: run {run_id} is {state} and its "
                               f"rollback will not finish here. Hosts it changed: {hosts}; "
                               f"they may serve the new version. `deckhand runs show "
                               f"{run_id}` shows what ran; with REDIS_URL another worker "
                               f"takes the run over when its lease ends.", style="bold red",
                               markup=False)
            self.console.file.flush()
        os._exit(EXIT_ABANDONED)

    def _prompt_confirm(self, word: str) -> str:
        prompt = f"This changes [bold]{escape(word)}[/]. Type its name to confirm"
        try:
            return Prompt.ask(prompt, console=self.console)
        except (EOFError, OSError):  # no terminal to type into: nothing was confirmed
            return ""

    def _prompt_decision(self) -> Decision:
        choices, text = ["a", "m", "r"], "[bold]Approve, Modify or Reject?[/]"
        if not self.services.store.where.startswith("in-process"):  # others can approve
            choices, text = [*choices, "l"], text + " (l: leave it for other approvers)"
        try:
            choice = Prompt.ask(text, choices=choices, default="r", console=self.console)
        except EOFError:  # stdin closed or not a terminal: never approve by accident
            self.console.print("\nNo answer (end of input): cancelling, nothing was run. "
                               "Use --yes to approve without a prompt.")
            raise NoAnswer from None
        return {"a": Decision.APPROVE, "m": Decision.MODIFY, "r": Decision.REJECT,
                "l": Decision.LEAVE}[choice]


def ask_service(console: Console, names: Sequence[str]) -> str | None:
    """Which service a request that named none is for, asked with the list; None when
    nobody answers (end of input): nothing is planned."""
    listed = ", ".join(names)
    try:
        return Prompt.ask(f"[bold]Which service?[/] ({escape(listed)})", choices=list(names),
                          show_choices=False, console=console)
    except (EOFError, OSError):  # no terminal to answer from: never guess
        console.print("\nNo answer (end of input): nothing was planned.")
        return None


def confirmation_problem(run: Run, policy: Policy, confirm: Confirm) -> str | None:
    """Ask for each environment whose policy says ``confirm`` to be typed; why not
    confirmed, or None. Changes outside every environment are confirmed as ``local``."""
    for scope in run.scopes:
        if not policy.strictest([scope]).confirm:
            continue
        word = "local" if scope == UNSCOPED else scope
        typed = confirm(word).strip()
        if typed != word:
            return f"typed {typed!r}, expected {word!r}"
    return None


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


NOTE = "# ! "
"""Prefix of the error lines put on top of a refused edit (removed before parsing)."""


def with_error_notes(edit: str, errors: str) -> str:
    """``edit`` with ``errors`` as YAML comments on top, for the editor to reopen."""
    notes = [f"{NOTE}{line}" for line in ["This edit was not accepted:", *errors.splitlines(),
                                          "Fix it and save, or delete everything to start "
                                          "over from the current version."]]
    return "\n".join(notes) + "\n" + edit


def without_error_notes(text: str) -> str:
    """``text`` without the error notes ``with_error_notes`` added on top."""
    lines = text.splitlines(keepends=True)
    while lines and lines[0].startswith(NOTE.rstrip()):
        lines.pop(0)
    return "".join(lines)
