"""The Slack work pool: bounded, tells users when full or when a job fails."""

from __future__ import annotations

import threading

from bot.slack.work import BUSY, WorkQueue
from tests.fixtures.polling import wait_until
from tools.errors import DeckhandError


def test_a_full_pool_refuses_and_tells_the_user() -> None:
    work, release, told = WorkQueue(threads=1, capacity=1), threading.Event(), []
    try:
        assert work.submit("blocker", lambda: release.wait(10))
        wait_until(lambda: work._jobs.empty(), what="the blocker to start")
        assert work.submit("queued", lambda: None)
        assert not work.submit("refused", lambda: None, tell=told.append)
        wait_until(lambda: told, what="the busy notice")
        assert told == [BUSY] and work.refused == 1
        assert not work.submit("silent", lambda: None, tell=told.append, tell_busy=False)
    finally:
        release.set()
        work.stop()
    assert told == [BUSY]


def test_failures_are_told_refusals_as_they_are_bugs_summarised() -> None:
    work, told = WorkQueue(threads=1), []

    def refuse() -> None:
        raise DeckhandError("run-x not found")

    def crash() -> None:
        raise KeyError("secret detail")
    try:
        work.submit("refuse", refuse, tell=told.append)
        work.submit("crash", crash, tell=told.append)
        wait_until(lambda: len(told) == 2, what="both tells")
    finally:
        work.stop()
    assert told[0] == "⚠️ run-x not found"
    assert "KeyError" in told[1] and "secret detail" not in told[1]
