"""Which run and plan the current code works for, for log lines (``bot.logs`` formats them)
and for traces (the current OpenTelemetry span).

Context variables follow the code that set them, but not into new threads: threads a run
starts (step pools, heartbeats, front-end senders) take the values with ``inherit()``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

from opentelemetry import context as otel_context

_RUN: ContextVar[str | None] = ContextVar("deckhand_run_id", default=None)
_PLAN: ContextVar[str | None] = ContextVar("deckhand_plan_id", default=None)


@contextlib.contextmanager
def bound(*, run_id: str | None, plan_id: str | None) -> Iterator[None]:
    """Log lines inside this block (and threads started with ``inherit``) name the run."""
    run_token, plan_token = _RUN.set(run_id), _PLAN.set(plan_id)
    try:
        yield
    finally:
        _RUN.reset(run_token)
        _PLAN.reset(plan_token)


def current() -> dict[str, str | None]:
    """The run id and plan id in effect here (None outside a run)."""
    return {"run_id": _RUN.get(), "plan_id": _PLAN.get()}


def inherit() -> Callable[[], None]:
    """Capture the current ids; call the result first thing in another thread.

    Works as a ``ThreadPoolExecutor(initializer=...)``.
    """
    run_id, plan_id = _RUN.get(), _PLAN.get()
    trace_context = otel_context.get_current()  # spans made there belong to the same trace

    def apply() -> None:
        _RUN.set(run_id)
        _PLAN.set(plan_id)
        otel_context.attach(trace_context)

    return apply
