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

Every span passes ``bot.telemetry_exporter.RedactingSpanExporter`` on its way out (names,
attributes, events, links' attributes, status descriptions): the spans' door, whichever
instrumentation made them. The SDK is imported only when tracing is on (start-up).
"""

from __future__ import annotations

import logging
import os
import threading

from opentelemetry import trace

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

    from bot.telemetry_exporter import RedactingSpanExporter, ReusingIdGenerator, WarnOnce

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
