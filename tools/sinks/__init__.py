"""Audit sinks: where a copy of the audit stream is sent as it grows, so a SIEM holds one
deckhand cannot rewrite. One module per transport behind one protocol (``Sink.send``):
``webhook`` (JSON lines over HTTP POST) and ``syslog`` (RFC 5424 over RELP — acknowledged,
optionally over TLS — TCP with a receipt, or UDP).

A transport only sends; what is sent, in what order, and how often a failure is retried is
the shipper's (``agents.engine.shipper``). ``send`` raises ``SinkError`` when the batch was
not taken (with the wait the receiver asked for, if any).
"""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tools.sinks.syslog import Syslog, SyslogSettings
from tools.sinks.webhook import Webhook, WebhookSettings


class Sink(Protocol):
    secrets: list[str]
    """Credentials the transport holds (header values): the shipper's redactor masks them."""

    def send(self, lines: list[str]) -> None:
        """Deliver ``lines`` (JSON texts, oldest first) or raise ``SinkError``."""

    def describe(self) -> str:
        """Where the lines go, safe to log (no credentials)."""


class SinkSettings(BaseModel):
    """``audit.sink`` in the config: one transport, and how the shipper paces it."""

    model_config = ConfigDict(extra="forbid")

    webhook: WebhookSettings | None = None
    syslog: SyslogSettings | None = None
    batch: int = Field(default=100, ge=1, le=10_000,
                       description="entries per POST (syslog: per burst of messages)")
    retries: int = Field(default=5, ge=1, le=100,
                         description="attempts per round before the failure is logged as an "
                                     "error; rounds go on until the sink takes the batch")
    backoff: float = Field(default=1.0, gt=0, le=600,
                           description="seconds before the first retry; doubles each time")
    max_backoff: float = Field(default=60.0, gt=0, le=3600,
                               description="the longest wait between attempts (and between "
                                           "rounds); a Retry-After is honoured up to 15 min")

    @model_validator(mode="after")
    def _one_transport(self) -> SinkSettings:
        if (self.webhook is None) == (self.syslog is None):
            raise ValueError("name exactly one transport: `webhook: {url: ...}` or "
                             "`syslog: {address: udp://127.0.0.1:514}`")
        return self


def open_sink(settings: SinkSettings) -> Sink:
    """The configured transport (reads header secrets now: SinkError if one is missing)."""
    if settings.webhook is not None:
        return Webhook.from_settings(settings.webhook)
    assert settings.syslog is not None  # noqa: S101 - the validator requires one of them
    return Syslog(settings.syslog)


__all__ = ["Sink", "SinkSettings", "SyslogSettings", "WebhookSettings", "open_sink"]
