"""Workflow Builder: the custom step "Deploy with deckhand" (request, channel).

It posts the plan for approval exactly like ``/deploy`` and completes the step with the
run's outcome when the run ends (``functions.completeSuccess`` when it succeeded,
``functions.completeError`` when it was rejected, failed, rolled back or could not start).
The step's completion handles live in the memory of the replica that received the step;
that replica watches its waiting runs in the store (every ``WATCH_EVERY`` seconds, and at
once when its relay says one changed), so the step completes whichever process runs the
plan and whichever replica says its thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slack_bolt import App, Complete, Fail

from agents.run.record import Run, RunStatus
from bot.slack.bot import Bot
from bot.slack.listeners.common import first_delivery
from tools.errors import DeckhandError

log = logging.getLogger("deckhand.slack.workflow")

FUNCTION = "deploy_with_deckhand"
WATCH_EVERY = 2.0


@dataclass
class Steps:
    """Workflow steps waiting for their run to end, by run id."""

    pending: dict[str, tuple[Complete, Fail]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def wait_for(self, run: Run, complete: Complete, fail: Fail) -> None:
        with self.lock:
            self.pending[run.id] = (complete, fail)

    def waiting(self) -> list[str]:
        with self.lock:
            return list(self.pending)

    def ended(self, run: Run) -> tuple[Complete, Fail] | None:
        if not run.status.terminal:
            return None
        with self.lock:
            return self.pending.pop(run.id, None)


def register(app: App, bot: Bot) -> None:
    steps = Steps()
    bot.watchers.append(lambda run: _finish(bot, steps, run))
    threading.Thread(target=_watch, args=(bot, steps), daemon=True,
                     name="workflow-steps").start()

    @app.function(FUNCTION)
    def deploy_step(event: dict[str, Any], inputs: dict[str, Any], complete: Complete,
                    fail: Fail) -> None:
        if not first_delivery(bot, f"fn:{event.get('function_execution_id')}"):
            return
        request = str(inputs.get("request") or "").strip()
        channel = str(inputs.get("channel") or "")
        user = str(inputs.get("requested_by") or "workflow")
        bot.work.submit(FUNCTION, lambda: _start(bot, steps, request, user, channel,
                                                 complete, fail))


def _start(bot: Bot, steps: Steps, request: str, user: str, channel: str,
           complete: Complete, fail: Fail) -> None:
    if not request or not channel:
        fail(error="Give the step a request (e.g. `v2.3.1 to staging`) and a channel.")
        return
    if not request.lower().startswith("deploy "):
        request = f"deploy {request}"
    try:
        run = bot.propose(request, user=user, channel=channel, ask=False)  # nobody to ask
    except DeckhandError as exc:
        fail(error=f"deckhand could not plan that: {exc}")
        return
    if run is None:  # not reached: propose raises WhichService when it may not ask
        fail(error="deckhand could not plan that: name the service in the request")
        return
    steps.wait_for(run, complete, fail)
    _finish(bot, steps, bot.store.runs.get(run.id))  # it may have ended already


def _watch(bot: Bot, steps: Steps) -> None:
    """Complete this replica's waiting steps whose runs ended, wherever they ran (until the
    bot stops)."""
    while not bot.stopping.wait(WATCH_EVERY):
        for run_id in steps.waiting():
            try:
                _finish(bot, steps, bot.store.runs.get(run_id))
            except DeckhandError as exc:  # the store is away: the next look finds it
                log.warning("workflow step of %s: %s", run_id, exc)


def _finish(bot: Bot, steps: Steps, run: Run) -> None:
    """When a waiting run ends: complete its step (off the caller's thread)."""
    handles = steps.ended(run)
    if handles is None:
        return
    complete, fail = handles
    finish: Callable[[], Any]
    if run.status is RunStatus.SUCCEEDED:
        outputs = {"run_id": run.id, "outcome": run.status.value}
        finish = lambda: complete(outputs=outputs)  # noqa: E731 - one line, read in place
    else:
        error = f"run {run.id} {run.status.value.replace('_', ' ')}" + (
            f": {run.reason}" if run.reason else "")
        finish = lambda: fail(error=error)  # noqa: E731
    bot.work.submit(f"{FUNCTION} outcome", finish)
