"""The span exporters deckhand installs (imported only when tracing is on): the SDK's OTLP
exporter, saying once, in one line, that the backend does not take spans, behind the one
that redacts every span on its way out."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import Link, Status

from agents.tracing import reused_span_id, reused_trace_id
from tools.redact import active, redact_data

log = logging.getLogger("deckhand.telemetry")


class WarnOnce(SpanExporter):
    """The OTLP exporter, saying once (one line) that the backend does not take spans."""

    def __init__(self, exporter: SpanExporter, *, endpoint: str):
        self._exporter, self._endpoint = exporter, endpoint
        self._warned = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._exporter.export(spans)
        except Exception as exc:  # never let the backend reach a command
            self._warn(repr(exc))
            return SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self._warn("export failed")
        return result

    def _warn(self, why: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning("traces: the OTLP backend at %s does not take spans (%s); deckhand "
                        "carries on without them (said once)", self._endpoint, why)

    def shutdown(self) -> None:
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._exporter.force_flush(timeout_millis)


class RedactingSpanExporter(SpanExporter):
    """A span exporter that hands ``inner`` redacted copies of the spans (the spans' door)."""

    def __init__(self, inner: SpanExporter):
        self.inner = inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self.inner.export([redacted_span(s) for s in spans])

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def redacted_span(span: ReadableSpan) -> ReadableSpan:
    """A copy of ``span`` with every text in it through the process's redactor."""
    def clean(attributes: Any) -> Any:
        return redact_data(active, dict(attributes or {}))

    status = span.status
    if status.description:
        status = Status(status.status_code, active(status.description))
    return ReadableSpan(
        name=active(span.name), context=span.context, parent=span.parent,
        resource=span.resource, attributes=clean(span.attributes),
        events=[Event(e.name, clean(e.attributes), e.timestamp) for e in span.events],
        links=[Link(link.context, clean(link.attributes)) for link in span.links],
        kind=span.kind, status=status, start_time=span.start_time, end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope)


class ReusingIdGenerator(RandomIdGenerator):
    """Random ids, except for a span ``agents.tracing`` asks to have given ids: a dead
    worker's run span, emitted by the worker taking the run over under the id its children
    and the run record already name; the request's root, emitted at the run's end under
    the ids its plan span was started as a child of."""

    def generate_span_id(self) -> int:
        return reused_span_id() or super().generate_span_id()

    def generate_trace_id(self) -> int:
        return reused_trace_id() or super().generate_trace_id()
