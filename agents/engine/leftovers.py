"""What an unconfirmed kill left running, stopped later — and said.

A command deckhand stopped (timeout, cancel) whose host did not confirm the kill (frozen,
unreachable) may run on once the host answers again; its record keeps the process group
(``HostResult.pid``). When the run ended with such a host, every worker's idle sweep tries
the kill again (``RetryKills.sweep``) for ``WINDOW`` seconds after the run's end: once a
host confirms it, the record forgets the group, the audit says ``leftover_stopped`` and the
run's thread (through its feed, from whichever process relays it) says it was stopped. The
first retry that fails too says so once, and until when deckhand keeps trying; past
``WINDOW`` it says once that it gave up (a process group id is reused, in time: never kill
by an old one), naming the group to stop by hand.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from agents.errors import StoreError
from agents.run.record import Phase, Run
from agents.store import AuditLog, RunFeed, Runs
from tools.errors import DeckhandError
from tools.inventory import LOCAL_HOST, Host
from tools.runners.base import Runner

log = logging.getLogger("deckhand.leftovers")

WINDOW = 3600.0
"""Seconds after a run's end its leftovers' kills are retried."""
SCAN = 100
"""Recent runs looked at per sweep (newest first)."""


@dataclass(frozen=True)
class Leftover:
    """A process group an unconfirmed kill may have left running on ``host``."""

    phase: Phase
    step: str
    host: str
    pid: int

    @property
    def key(self) -> str:
        return f"leftover:{self.phase.value}:{self.step}:{self.host}:{self.pid}"

    def describe(self) -> str:
        return f"{self.step} on {self.host} (process group {self.pid})"


def leftovers(run: Run) -> list[Leftover]:
    """The run's host results that finished with a process group the host never confirmed
    stopped."""
    return [Leftover(phase, state.id, result.host, result.pid)
            for phase in Phase for state in run.states(phase).values()
            for result in state.hosts.values()
            if result.pid is not None and result.status.done]


class RetryKills:
    """Retries the kills of ended runs' leftovers (see the module)."""

    def __init__(self, *, runs: Runs, audit: AuditLog, feed: RunFeed,
                 runner_for: Callable[[Host], Runner], hosts: Callable[[], dict[str, Host]],
                 actor: str, clock: Callable[[], float] = time.time) -> None:
        self.runs, self.audit, self.feed = runs, audit, feed
        self.runner_for, self.hosts, self.actor, self.clock = runner_for, hosts, actor, clock

    def sweep(self) -> list[str]:
        """One pass over recent ended runs; what it did, one line each."""
        done = []
        for run in self.runs.recent(limit=SCAN):
            if not run.status.terminal or run.finished_at is None:
                continue
            for left in leftovers(run):
                outcome = self._retry(run, left)
                if outcome:
                    done.append(f"run {run.id}: {left.describe()}: {outcome}")
        return done

    def _retry(self, run: Run, left: Leftover) -> str | None:
        assert run.finished_at is not None  # noqa: S101 - sweep checked
        if self.clock() - run.finished_at > WINDOW:
            return self._say_once(run, left, "gave up", (
                f"⚠️ deckhand stopped trying to kill {left.describe()}: no confirmation within "
                f"{WINDOW / 3600:g}h of the run's end. It may still run: stop it by hand "
                f"(`kill -- -{left.pid}` on {left.host}, if that group is still the command's)."))
        host = self.hosts().get(left.host) or LOCAL_HOST
        try:
            self.runner_for(host).kill_group(left.pid)
        except DeckhandError as exc:
            until = time.strftime("%H:%M UTC", time.gmtime(run.finished_at + WINDOW))
            return self._say_once(run, left, "unconfirmed", (
                f"⚠️ {left.describe()} may still be running: the kill is still not confirmed "
                f"({exc}). deckhand keeps trying until {until}."))
        self._stopped(run, left)
        return "stopped"

    def _stopped(self, run: Run, left: Leftover) -> None:
        def forget(record: Run) -> None:
            state = record.states(left.phase).get(left.step)
            result = state.hosts.get(left.host) if state else None
            if result is not None and result.pid == left.pid:
                result.pid = None

        self.runs.update(run.id, forget)
        self.audit.record("leftover_stopped", actor=self.actor, run_id=run.id,
                                plan_id=run.plan_id, step=left.step, host=left.host,
                                pid=left.pid, outcome="stopped", later=True)
        self._say(run, left, "stopped", (
            f"✅ {left.describe()}, left running by a kill the host did not confirm, is "
            f"stopped now: the host confirmed it."))
        log.warning("run %s: %s stopped (its kill had not been confirmed)", run.id,
                    left.describe())

    def _say_once(self, run: Run, left: Leftover, what: str, text: str) -> str | None:
        """Say ``text`` unless this was said of ``left`` already (marked in the record)."""
        if run.meta.get(left.key) == what:
            return None
        said: list[bool] = []

        def mark(record: Run) -> None:
            said.append(record.meta.get(left.key) == what)
            record.meta[left.key] = what

        self.runs.update(run.id, mark)
        if said and said[0]:
            return None
        self.audit.record("leftover_stopped", actor=self.actor, run_id=run.id,
                                plan_id=run.plan_id, step=left.step, host=left.host,
                                pid=left.pid, outcome=what, later=True)
        self._say(run, left, what, text)
        return what

    def _say(self, run: Run, left: Leftover, what: str, text: str) -> None:
        try:
            self.feed.append(run.id, "say", {"text": text,
                                                       "key": f"{left.key}:{what}"},
                                       pending=bool(run.meta.get("slack")))
        except StoreError as exc:  # the record and the audit have it; the thread waits
            log.error("run %s: cannot tell its thread about %s (%s)", run.id,
                      left.describe(), exc)
