"""Spans for deckhand's own nouns — plan, approval, run, step, host — through the
OpenTelemetry API only (STYLE 20). Until a face configures the SDK (``bot/telemetry.py``,
from the standard ``OTEL_*`` variables) every call here is a no-op costing next to nothing.

One trace per run, whatever processes touch it: the trace context of the span that planned
a run is kept in the plan (``planner.traceparent``) and the run record
(``meta["traceparent"]``); whoever approves or executes it later — another replica, a
worker in another process, a takeover — continues that trace.

Nothing secret goes into a span: ids, names, counts, statuses and redacted errors only
(never the request text, parameters or output).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.propagate import extract, inject
from opentelemetry.trace import Span, Status, StatusCode

AttributeValue = str | int | float | bool | tuple[str, ...]
Attributes = Mapping[str, AttributeValue | None]

_tracer = trace.get_tracer("deckhand")


def current_traceparent() -> str | None:
    """The W3C ``traceparent`` of the current span (None when tracing is off)."""
    carrier: dict[str, str] = {}
    inject(carrier)
    return carrier.get("traceparent")


def trace_id(traceparent: str | None) -> str | None:
    """The 32-hex trace id inside a W3C ``traceparent`` (None when absent or malformed)."""
    parts = (traceparent or "").split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or parts[1] == "0" * 32:
        return None
    return parts[1] if all(c in "0123456789abcdef" for c in parts[1]) else None


def reference(traceparent: str | None, link: str | None = None) -> str | None:
    """How to find a run's trace: the team's UI link (``link`` with ``{trace_id}``), else
    the bare id; None when the run was not traced."""
    found = trace_id(traceparent)
    if found is None:
        return None
    return link.replace("{trace_id}", found) if link else found


def context_of(traceparent: str | None) -> otel_context.Context | None:
    """The context to continue a stored trace in (None: start a new one)."""
    return extract({"traceparent": traceparent}) if traceparent else None


@contextmanager
def span(name: str, attributes: Attributes | None = None, *,
         parent: otel_context.Context | None = None) -> Iterator[Span]:
    """A span named ``name``, current inside the block, under ``parent`` if given.

    An exception marks it as an error (its type only: messages may hold secrets).
    """
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        yield trace.INVALID_SPAN  # off: skip the no-op span's context switch (~10 µs)
        return
    clean = {k: v for k, v in (attributes or {}).items() if v is not None}
    with _tracer.start_as_current_span(name, context=parent, attributes=clean,
                                       record_exception=False,
                                       set_status_on_exception=False) as current:
        try:
            yield current
        except BaseException as exc:
            current.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise


def finish(current: Span, *, ok: bool, **attributes: AttributeValue | None) -> None:
    """Record how a span's work ended."""
    current.set_attributes({k: v for k, v in attributes.items() if v is not None})
    current.set_status(Status(StatusCode.OK if ok else StatusCode.ERROR))
