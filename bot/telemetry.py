"""Traces at the edge: the OpenTelemetry SDK and its OTLP exporter, configured from the
standard variables, for every ``deckhand`` command (``agents`` only uses the API).

Off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set
(or when ``OTEL_SDK_DISABLED=true``). Honoured as the SDK defines them: ``OTEL_SERVICE_NAME``
and ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_EXPORTER_OTLP_HEADERS`` (e.g. an API key),
``OTEL_TRACES_SAMPLER`` / ``_ARG``. The exporter speaks OTLP over HTTP (``http/protobuf``);
another ``OTEL_EXPORTER_OTLP_PROTOCOL`` is refused with one line. Spans are batched; a
short-lived command flushes them when it exits (``shutdown``).
"""

from __future__ import annotations

import logging
import os

from opentelemetry import trace

log = logging.getLogger("deckhand.telemetry")
ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_provider: object | None = None


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

    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", service)})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _provider = provider
    return True


def shutdown() -> None:
    """Send the spans still buffered (call before a command exits)."""
    flush = getattr(_provider, "shutdown", None)
    if flush is not None:
        flush()


def _wanted() -> bool:
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    return any(os.environ.get(name) for name in ENDPOINTS)
