"""The one retry policy for Slack Web API calls: slack_sdk's retry handlers, configured here
and installed on the client once (``make_client``), so no caller loops or sleeps on its own.

A 429 is retried after its Retry-After; 500/503 answers and dropped connections a couple of
times. Most calls give up after ``RATE_LIMITED`` rate-limited answers, so a listener never
waits on Slack for long; a message that must land (the plan a person will approve, a run's
final status) is sent inside ``patiently()``, which lets the same handler wait through a
longer storm (``PATIENT``); one that is useless late (opening a modal: its trigger expires
in 3 s) is sent ``at_once()``, and a 429 is raised instead of waited out. Failures are
counted by the observing handler (``observe.py``).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from slack_sdk.http_retry import RetryHandler
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
    ServerErrorRetryHandler,
)
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState

RATE_LIMITED = 5
"""Retries of a rate-limited call, each after Slack's Retry-After."""
PATIENT = 30
"""The same, for a message that must land (see ``patiently``)."""

_budget: contextvars.ContextVar[int] = contextvars.ContextVar("slack_budget",
                                                              default=RATE_LIMITED)


@contextlib.contextmanager
def _retrying(budget: int) -> Iterator[None]:
    token = _budget.set(budget)
    try:
        yield
    finally:
        _budget.reset(token)


def patiently() -> contextlib.AbstractContextManager[None]:
    """Calls made inside (on this thread) wait through up to ``PATIENT`` rate-limited answers."""
    return _retrying(PATIENT)


def at_once() -> contextlib.AbstractContextManager[None]:
    """Calls made inside (on this thread) raise on a 429 instead of waiting it out."""
    return _retrying(0)


class _RateLimited(RateLimitErrorRetryHandler):
    """Slack's own 429 handler (it sleeps Retry-After), with the budget of the calling context."""

    def __init__(self) -> None:
        super().__init__(max_retry_count=PATIENT)

    def _can_retry(self, *, state: RetryState, request: HttpRequest,
                   response: HttpResponse | None = None, error: Exception | None = None
                   ) -> bool:
        return state.current_attempt < _budget.get() and super()._can_retry(
            state=state, request=request, response=response, error=error)


def web_api_retries() -> list[RetryHandler]:
    """The handlers every Slack Web API client of deckhand's is built with."""
    return [_RateLimited(), ServerErrorRetryHandler(max_retry_count=2),
            ConnectionErrorRetryHandler(max_retry_count=2)]
