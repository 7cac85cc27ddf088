"""Pause, resume and stop a run: the one door every face uses (Slack buttons, the terminal,
MCP).

Who may: the requester and whoever may approve the run's environments — ``steer_problem``,
the same answer Stop, Modify and Reject use. Every request and every refusal is audited with
who asked and through which face (``via``: button, cli, mcp, terminal).

The first Stop wins (one compare-and-set, ``Runs.request_cancel``, which writes its one
``cancel_requested`` entry in the same EXEC); a later one raises AlreadyStopping, naming who
stopped it, which each face tells its asker privately (audited as ``stop_refused``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import StrEnum

from agents.errors import ApprovalRefused
from agents.faces import face_of
from agents.policy.approvals import steer_problem
from agents.policy.rules import Policy
from agents.run.record import Run
from agents.store import AuditLog, Runs, Write


class Control(StrEnum):
    PAUSE = "pause"
    RESUME = "resume"
    STOP = "stop"


AUDITED = {Control.PAUSE: "pause_requested", Control.RESUME: "resume_requested",
           Control.STOP: "cancel_requested"}
"""The audit action of each granted request (a stop is the cancel it has always been)."""


def steer(policy: Policy, control: Control, run_id: str, *, runs: Runs, audit: AuditLog,
          user: str, via: str, user_groups: Iterable[str] = ()) -> Run:
    """Pause, resume or stop ``run_id`` for ``user``: the run as it then stands.
    ApprovalRefused (audited as ``<control>_refused``) if ``user`` may not, or the run is
    in no state for it (finished, not paused, …)."""
    run = runs.get(run_id)
    try:
        problem = steer_problem(run, user=user, user_groups=list(user_groups), policy=policy)
        if problem:
            raise ApprovalRefused(problem)
        entry = audit.write(AUDITED[control], actor=user, run_id=run_id,
                            plan_id=run.plan_id, via=via)
        _REQUEST[control](runs, run, user, via, entry)  # the entry lands with the request
    except ApprovalRefused as exc:
        audit.refused(control.value, action=f"{control.value}_refused", actor=user,
                      face=face_of(via), rule=str(exc), run_id=run_id, via=via)
        raise
    return runs.get(run_id)


def _pause(runs: Runs, run: Run, user: str, via: str, entry: Write) -> None:
    runs.request_pause(run.id, user=user, via=via, writes=[entry])


def _resume(runs: Runs, run: Run, user: str, via: str, entry: Write) -> None:
    runs.request_resume(run.id, writes=[entry])


def _stop(runs: Runs, run: Run, user: str, via: str, entry: Write) -> None:
    # a rollback is never stopped: refused, unless it is the stop's own (then "already
    # stopping", naming who stopped it); its entry is written by the same compare-and-set
    runs.request_cancel(run.id, user=user, via=via, stop_rollback=False)


_REQUEST: dict[Control, Callable[[Runs, Run, str, str, Write], None]] = {
    Control.PAUSE: _pause, Control.RESUME: _resume, Control.STOP: _stop}
