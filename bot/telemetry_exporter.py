"""The span exporter deckhand installs (imported only when tracing is on): the SDK's OTLP
exporter, saying once, in one line, that the backend does not take spans."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

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
