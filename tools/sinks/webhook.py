"""The webhook sink: a batch of JSON lines per HTTP POST (``application/x-ndjson``).

Headers come from the config, each a plain value or a secret read once at start from the
environment (``{env: SIEM_TOKEN}``) or a file (``{file: /run/secrets/siem}``), with an
optional ``prefix`` (``Bearer ``). 2xx takes the batch; anything else raises ``SinkError``,
with the wait ``Retry-After`` asks for on 429 and 503 (seconds or an HTTP date).
"""

from __future__ import annotations

import hashlib
import os
import time
import urllib.error
import urllib.parse
from collections.abc import Sequence
from email.utils import parsedate_to_datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tools.errors import SinkError
from tools.redact import redact

RETRY_AFTER_MAX = 900.0
"""The longest Retry-After honoured (a receiver asking for a day is treated as 15 min)."""
BODY_SHOWN = 200


class HeaderSecret(BaseModel):
    """A header value kept out of the config file."""

    model_config = ConfigDict(extra="forbid")

    env: str | None = None
    file: str | None = None
    prefix: str = ""

    @model_validator(mode="after")
    def _one_source(self) -> HeaderSecret:
        if (self.env is None) == (self.file is None):
            raise ValueError("give one of `env: NAME` or `file: /path`")
        return self

    def secret(self, header: str) -> str:
        """The value read from its source (without ``prefix``)."""
        if self.env is not None:
            found = os.environ.get(self.env, "")
            if not found:
                raise SinkError(f"audit sink header {header}: ${self.env} is not set; set it "
                                f"or name a file with `file:`")
            return found
        try:
            found = Path(str(self.file)).read_text().strip()
        except OSError as exc:
            raise SinkError(f"audit sink header {header}: cannot read {self.file} "
                            f"({exc.strerror or exc})") from exc
        if not found:
            raise SinkError(f"audit sink header {header}: {self.file} is empty")
        return found


class WebhookSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="where batches are POSTed (http or https)")
    headers: dict[str, str | HeaderSecret] = Field(default_factory=dict)
    timeout: float = Field(default=10.0, gt=0, le=300, description="seconds per POST")

    @field_validator("url")
    @classmethod
    def _http(cls, url: str) -> str:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL")
        return url


class Webhook:
    """POSTs batches to one URL with the configured headers."""

    def __init__(self, url: str, headers: dict[str, str], *, timeout: float,
                 secrets: Sequence[str] = ()):
        self.url, self.headers, self.timeout = url, headers, timeout
        self.secrets = list(secrets)
        """Header secrets, for the shipper's redactor: a token never reaches the sink's body."""

    @classmethod
    def from_settings(cls, settings: WebhookSettings) -> Webhook:
        headers, secrets = {}, []
        for name, value in settings.headers.items():
            if isinstance(value, str):
                headers[name] = value
            else:
                secrets.append(value.secret(name))
                headers[name] = value.prefix + secrets[-1]
        return cls(settings.url, headers, timeout=settings.timeout, secrets=secrets)

    def describe(self) -> str:
        parts = urllib.parse.urlsplit(self.url)
        return redact(f"webhook {parts.scheme}://{parts.hostname}"
                      f"{f':{parts.port}' if parts.port else ''}{parts.path}")

    def send(self, lines: list[str]) -> None:
        import urllib.request  # here: http.client costs every CLI start-up that never ships

        body = ("\n".join(lines) + "\n").encode()
        request = urllib.request.Request(self.url, data=body, method="POST", headers={
            **self.headers, "Content-Type": "application/x-ndjson",
            "Idempotency-Key": idempotency_key(lines)})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:  # noqa: S310
                answer.read(BODY_SHOWN)
        except urllib.error.HTTPError as exc:
            raise SinkError(f"{self.describe()} answered HTTP {exc.code}: "
                            f"{_shown(exc.read(BODY_SHOWN))}",
                            retry_after=_retry_after(exc)) from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise SinkError(f"{self.describe()} did not answer: {reason}") from exc


def idempotency_key(lines: list[str]) -> str:
    """The same batch (the same entries: stream ids and hashes) gets the same key, so a
    receiver can drop a batch sent again after a crash."""
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:32]


def _retry_after(exc: urllib.error.HTTPError) -> float | None:
    if exc.code not in (429, 503):
        return None
    raw = (exc.headers.get("Retry-After") or "").strip()
    if not raw:
        return None
    try:
        wait = float(raw)
    except ValueError:
        try:
            wait = parsedate_to_datetime(raw).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return min(max(wait, 0.0), RETRY_AFTER_MAX)


def _shown(body: bytes) -> str:
    return redact(body.decode(errors="replace").strip().replace("\n", " ")) or "(no body)"
