"""``deckhand runs show RUN --output`` and the ``--json`` forms of ``runs`` / ``runs show``.

The JSON fields are a documented, stable contract (docs/json.md): scripts parse them, so
fields are only ever added. Output text is redacted again at this border (the executor
redacted it once; a secret added to the config since is masked too) and bounded.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.text import Text

from agents.ids import short_id
from agents.plan.model import Plan
from agents.run.record import Judgment, Run, StepState
from agents.run.results import HostOutput, bound, outputs_of
from agents.services import Services
from tools.redact import Redactor

MAX_OUTPUT_CHARS = 20_000
"""Per host and step: an executor tail is already bounded; this bounds what is printed."""


def print_json(value: Any) -> None:
    """One JSON document on stdout (never through rich: no wrapping, no markup)."""
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=True) + "\n")
    sys.stdout.flush()


def run_summary_json(run: Run) -> dict[str, Any]:
    """A run as ``deckhand runs --json`` lists it."""
    return {"id": run.id, "short_id": short_id(run.id), "status": run.status.value,
            "goal": run.goal, "requested_by": run.requested_by,
            "environments": list(run.environments), "created_at": run.created_at,
            "started_at": run.started_at, "finished_at": run.finished_at,
            "duration_s": run.duration, "plan_id": run.plan_id,
            "plan_version": run.plan_version}


def run_detail_json(run: Run, plan: Plan) -> dict[str, Any]:
    """A run as ``deckhand runs show RUN --json`` shows it: its steps, hosts and approvals."""
    return {**run_summary_json(run), "plan_hash": run.plan_hash, "reason": run.reason,
            "changed_hosts": list(run.changed_hosts), "hosts": list(run.hosts),
            "approvals": [{"user": a.user, "at": a.at, "plan_version": a.plan_version}
                          for a in run.approvals],
            "paused": run.paused.model_dump() if run.paused is not None else None,
            "steps": [_step_json(state, plan) for state in run.steps.values()],
            "rollback": [_step_json(state, plan) for state in run.rollback.values()],
            "gates": [check.model_dump(mode="json") for check in run.gates],
            "holds": [_hold_json(held, run) for held in run.judgments]}


def _hold_json(held: Judgment, run: Run) -> dict[str, Any]:
    """A go/no-go hold: what it showed (the newest figures), its deadline, its decision."""
    return {**held.model_dump(mode="json"), "deadline": held.deadline,
            "awaiting": run.awaiting is held}


def _step_json(state: StepState, plan: Plan) -> dict[str, Any]:
    tool = next((s.tool for s in plan.all_steps if s.id == state.id), None)
    return {"id": state.id, "tool": tool, "status": state.status.value,
            "started_at": state.started_at, "finished_at": state.finished_at,
            "attempts": state.attempts, "error": state.error, "outputs": dict(state.outputs),
            "hosts": [{"host": h.host, "status": h.status.value, "exit_code": h.exit_code,
                       "attempts": h.attempts} for h in state.hosts.values()]}


def show_output(console: Console, services: Services, run: Run, *, step: str | None,
                host: str | None, as_json: bool) -> int:
    """Print what ``run``'s steps printed, host by host; 2 with one line for an unknown
    step or host. Paged through $PAGER when a person reads it at a terminal."""
    try:
        found = outputs_of(run, step=None if step == ALL_STEPS else step, host=host)
    except LookupError as exc:
        console.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2
    redact = Redactor.from_env([*services.config.secrets,
                                *services.settings.secret_values()])
    texts = [bound(redact(o.text), MAX_OUTPUT_CHARS) for o in found]
    if as_json:
        print_json({"run": run.id, "outputs": [_output_json(o, t)
                                               for o, t in zip(found, texts, strict=True)]})
        return 0
    if not found:
        console.print("No output recorded for this run yet.", markup=False)
        return 0
    if console.is_terminal:
        with console.pager(styles=True):
            _print_outputs(console, found, texts)
    else:
        _print_outputs(console, found, texts)
    return 0


ALL_STEPS = "\0all"
"""``--output`` given without a step: every step."""


def _output_json(output: HostOutput, text: str) -> dict[str, Any]:
    return {"phase": output.phase, "step": output.step, "host": output.host,
            "status": output.status, "exit_code": output.exit_code, "output": text}


def _print_outputs(console: Console, found: list[HostOutput], texts: list[str]) -> None:
    for output, text in zip(found, texts, strict=True):
        where = "rollback " if output.phase == "rollback" else ""
        code = "" if output.exit_code is None else f", exit {output.exit_code}"
        console.print(Text(f"── {where}{output.step} on {output.host} ({output.status}{code})",
                           style="bold"))
        console.print(Text(text.rstrip() or "(no output)"), soft_wrap=True)
