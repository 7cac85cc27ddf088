"""Spans for deckhand's own nouns — plan, approval, run, step, host — through the
OpenTelemetry API only (STYLE 20). Until a face configures the SDK (``bot/telemetry.py``,
from the standard ``OTEL_*`` variables) every call here is a no-op costing next to nothing.

One trace per run, whatever processes touch it: the trace context of the span that planned
a run is kept in the plan (``planner.traceparent``) and the run record
(``meta["traceparent"]``); whoever approves or executes it later — another replica, a
worker in another process, a takeover — continues that trace.

The trace's root is the request, ``deckhand.request``, from planning to the run's end: its
ids are reserved when planning starts (``request_root``; the plan span is its child) and
it is emitted, with the outcome as its status, when the run ends — by the executor, or by
the store for a run that ends without executing (rejected, expired, cancelled while
queued), or at once for a request refused as a plan (``request_ended``). A trace view then
shows the run's outcome as the trace's.

A worker that dies mid-run never ends its run span: each worker records its attempt's span
(id and start) in the run record, and the worker that takes the run over emits that span,
closed, as "worker lost", and links its own run span to it (``attempt_lost``).

Nothing secret goes into a span: ids, names, counts, statuses and redacted errors only
(never the request text, parameters or output).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.propagate import extract, inject
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

AttributeValue = str | int | float | bool | tuple[str, ...]
Attributes = Mapping[str, AttributeValue | None]

_tracer = trace.get_tracer("deckhand")
ATTEMPT = "trace_attempt"
"""The run record's meta key for the executing worker's run span: its ``traceparent``,
``start`` (ns since the epoch), ``worker`` and whether it ``ended``."""
ROOT = "trace_root"
"""The plan's and the run record's key for the request's root span, reserved at planning:
its ``traceparent`` and ``start`` (ns since the epoch)."""
LOST = "worker lost"
_reuse: ContextVar[tuple[int | None, int] | None] = ContextVar("deckhand_ids", default=None)


def reused_span_id() -> int | None:
    """The span id the span being started must have (an id generator at the edge asks):
    set only while a span is emitted under ids recorded earlier (a dead worker's run span,
    the request's root)."""
    reused = _reuse.get()
    return reused[1] if reused else None


def reused_trace_id() -> int | None:
    """The trace id a root span being started must have (the request's root, emitted at
    the run's end into the trace its plan started)."""
    reused = _reuse.get()
    return reused[0] if reused else None


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


def _off() -> bool:
    return isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


@contextmanager
def span(name: str, attributes: Attributes | None = None, *,
         parent: otel_context.Context | None = None, kind: SpanKind = SpanKind.INTERNAL,
         links: Sequence[SpanContext] = ()) -> Iterator[Span]:
    """A span named ``name``, current inside the block, under ``parent`` if given, linked
    to the spans of ``links``.

    An exception marks it as an error (its type only: messages may hold secrets).
    """
    if _off():
        yield trace.INVALID_SPAN  # off: skip the no-op span's context switch (~10 µs)
        return
    clean = {k: v for k, v in (attributes or {}).items() if v is not None}
    with _tracer.start_as_current_span(name, context=parent, kind=kind, attributes=clean,
                                       links=[Link(c) for c in links], record_exception=False,
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


def event(name: str, attributes: Attributes) -> None:
    """Note something that happened inside the current span (a retry): names and counts."""
    trace.get_current_span().add_event(
        name, {k: v for k, v in attributes.items() if v is not None})


def failed(current: Span, why: str) -> None:
    """Mark a span's work as failed, saying why (redacted: descriptions are exported)."""
    current.set_status(Status(StatusCode.ERROR, why))


# -- attempts: one run span per worker that executed the run --------------------------------


def attempt_started(meta: MutableMapping[str, Any], current: Span, *, worker: str | None
                    ) -> None:
    """Record in a run's ``meta`` the run span this worker now executes it under (written
    with the run's first event), so a worker taking the run over can end it."""
    found = current.get_span_context()
    if not found.is_valid:
        return
    meta[ATTEMPT] = {"traceparent": _traceparent(found), "start": time.time_ns(),
                     "worker": worker, "ended": False}  # every key: see keep_others_meta


def attempt_ended(meta: MutableMapping[str, Any]) -> None:
    """The recorded attempt ends with this event (its worker ends its span itself)."""
    if isinstance(meta.get(ATTEMPT), dict):
        meta[ATTEMPT]["ended"] = True


def attempt_lost(meta: Mapping[str, Any], *, parent: otel_context.Context | None,
                 run_id: str) -> SpanContext | None:
    """The run span of a worker that died mid-run (recorded, never ended), emitted now
    under its recorded id and start, ending now with status ERROR "worker lost"; its
    context, to link the taking-over worker's span to. None if there is none."""
    recorded = meta.get(ATTEMPT)
    if _off() or not isinstance(recorded, dict) or recorded.get("ended"):
        return None
    context = trace.get_current_span(context_of(recorded.get("traceparent"))).get_span_context()
    if not context.is_valid or not isinstance(recorded.get("start"), int):
        return None
    token = _reuse.set((None, context.span_id))
    try:
        lost = _tracer.start_span("deckhand.run", context=parent, start_time=recorded["start"],
                                  attributes={"deckhand.run.id": run_id,
                                              "deckhand.worker": recorded.get("worker") or "",
                                              "deckhand.run.status": "worker_lost"})
    finally:
        _reuse.reset(token)
    lost.set_status(Status(StatusCode.ERROR, LOST))
    lost.end(max(time.time_ns(), recorded["start"]))
    # the span as emitted: its recorded id where the edge's id generator honours it
    return lost.get_span_context()


def _traceparent(found: SpanContext) -> str:
    return f"00-{found.trace_id:032x}-{found.span_id:016x}-{int(found.trace_flags):02x}"


# -- the request: the trace's root, from planning to the run's end ----------------------------


def request_root() -> tuple[otel_context.Context | None, dict[str, Any] | None]:
    """Reserve the request's root span: the context to plan under (its child), and what to
    record (``ROOT``) to emit it by later. (None, None) when tracing is off."""
    if _off():
        return None, None
    reserved = SpanContext(trace_id=random.getrandbits(128) or 1,
                           span_id=random.getrandbits(64) or 1, is_remote=True,
                           trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return (trace.set_span_in_context(NonRecordingSpan(reserved)),
            {"traceparent": _traceparent(reserved), "start": time.time_ns()})


def request_ended(recorded: Any, *, status: str, ok: bool, why: str = "",
                  run_id: str | None = None, service: str | None = None) -> None:
    """Emit the request's root span (``recorded`` by ``request_root``), ending now, with the
    request's outcome (``why``: redacted by the caller, it is exported) and its service
    (``deckhand.service``; none for the legacy service). Nothing when it was not recorded
    or tracing is off."""
    if _off() or not isinstance(recorded, dict) or not isinstance(recorded.get("start"), int):
        return
    context = trace.get_current_span(context_of(recorded.get("traceparent"))).get_span_context()
    if not context.is_valid:
        return
    token = _reuse.set((context.trace_id, context.span_id))
    try:  # an empty context: a root, whatever span is current here
        root = _tracer.start_span("deckhand.request", context=otel_context.Context(),
                                  start_time=recorded["start"],
                                  attributes={"deckhand.run.id": run_id or "",
                                              "deckhand.run.status": status,
                                              **({"deckhand.service": service}
                                                 if service else {})})
    finally:
        _reuse.reset(token)
    root.set_status(Status(StatusCode.OK) if ok else
                    Status(StatusCode.ERROR, f"{status}: {why}"[:200] if why else status))
    root.end(max(time.time_ns(), recorded["start"]))
