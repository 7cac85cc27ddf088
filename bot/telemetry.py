"""Traces at the edge: the OpenTelemetry SDK and its OTLP exporter, configured from the
standard variables, for every ``deckhand`` command (``agents`` only uses the API).

Off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set
(or when ``OTEL_SDK_DISABLED=true``). Honoured as the SDK defines them: ``OTEL_SERVICE_NAME``
and ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_EXPORTER_OTLP_HEADERS`` (e.g. an API key),
``OTEL_TRACES_SAMPLER`` / ``_ARG``. The exporter speaks OTLP over HTTP (``http/protobuf``);
another ``OTEL_EXPORTER_OTLP_PROTOCOL`` is refused with one line. Spans are batched; a
short-lived command flushes them when it exits (``shutdown``), for at most ``FLUSH_BOUND``
seconds: a backend that is down never delays a command more than that. A backend that
does not take spans is one warning line, once (the SDK's own retry lines are silenced).

Every span passes :class:`RedactingSpanExporter` on its way out (names, attributes, events,
links' attributes, status descriptions): the spans' door, whichever instrumentation made them.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import Link, Status

from agents.tracing import reused_span_id
from tools.redact import active, redact_data

log = logging.getLogger("deckhand.telemetry")
ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_provider: object | None = None
FLUSH_BOUND = 0.5
"""Seconds a command may spend, at exit, handing its last spans to the backend."""
EXPORT_TIMEOUT = 2.0
"""Seconds one export (with the SDK's retries) may take, unless OTEL_*_TIMEOUT says."""
SDK_LOGGERS = ("opentelemetry.exporter.otlp.proto.http",
               "opentelemetry.exporter.otlp.proto.http.trace_exporter",
               "opentelemetry.sdk.trace.export", "opentelemetry.sdk._shared_internal")


def configure_tracing(service: str = "deckhand") -> bool:
    """Install the SDK and exporter if an OTLP endpoint is set; True if tracing is on."""
    global _provider  # noqa: PLW0603 - one provider per process, as OpenTelemetry requires
    if _provider is not None or not _wanted():
        return _provider is not None
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    if protocol != "http/protobuf":
        log.error("OTEL_EXPORTER_OTLP_PROTOCOL=%s is not supported: deckhand exports OTLP "
                  "over HTTP (http/protobuf); traces are off", protocol)
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from bot.telemetry_exporter import WarnOnce

    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", service)})
    provider = TracerProvider(resource=resource, shutdown_on_exit=False,  # see shutdown
                              id_generator=ReusingIdGenerator())
    timeout = None if _timeout_set() else EXPORT_TIMEOUT
    exporter = WarnOnce(RedactingSpanExporter(OTLPSpanExporter(timeout=timeout)),
                        endpoint=_endpoint())
    provider.add_span_processor(BatchSpanProcessor(exporter))
    for name in SDK_LOGGERS:  # "Transient error … retrying" per batch: ours says it once
        logging.getLogger(name).setLevel(logging.CRITICAL)
    trace.set_tracer_provider(provider)
    _provider = provider
    return True


def shutdown(bound: float = FLUSH_BOUND) -> None:
    """Send the spans still buffered (call before a command exits), waiting at most
    ``bound`` seconds: what the backend has not taken by then is dropped, said once."""
    flush = getattr(_provider, "shutdown", None)
    if flush is None:
        return
    done = threading.Thread(target=flush, name="otel-flush", daemon=True)
    done.start()
    done.join(bound)
    if done.is_alive():
        log.warning("traces: the OTLP backend did not take the last spans within %gs; "
                    "they are dropped", bound)


def _endpoint() -> str:
    return next((os.environ[n] for n in ENDPOINTS if os.environ.get(n)), "?")


def _timeout_set() -> bool:
    return any(os.environ.get(name) for name in
               ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"))


def _wanted() -> bool:
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    return any(os.environ.get(name) for name in ENDPOINTS)


class ReusingIdGenerator(RandomIdGenerator):
    """Random ids, except for the one span ``agents.tracing`` asks to have a given id: a
    dead worker's run span, emitted by the worker taking the run over under the id its
    children and the run record already name."""

    def generate_span_id(self) -> int:
        return reused_span_id() or super().generate_span_id()


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
