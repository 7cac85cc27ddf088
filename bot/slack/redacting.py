"""The Web API client every Slack call goes through, with the redactor on its payloads.

A message can carry text nobody vetted for secrets: a plan's parameters (typed into
``/deploy``), a step's output, an error, a model's words. Redacting at each place that builds
a message leaves the next new message to remember; here, every call's ``json``, form
``data`` and ``params`` pass the one redactor before they leave, so a configured secret (or
anything shaped like a credential) never reaches a channel. File bytes are left alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slack_sdk import WebClient
from slack_sdk.web.slack_response import SlackResponse


class RedactingWebClient(WebClient):
    """``slack_sdk.WebClient`` whose outgoing payloads are redacted."""

    def __init__(self, *args: Any, redact: Callable[[str], str], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.redact = redact

    def api_call(self, api_method: str, *, http_verb: str = "POST",
                 files: dict[str, Any] | None = None, data: dict[str, Any] | None = None,
                 params: dict[str, Any] | None = None, json: dict[str, Any] | None = None,
                 headers: dict[str, Any] | None = None, auth: dict[str, Any] | None = None,
                 ) -> SlackResponse:
        return super().api_call(api_method, http_verb=http_verb, files=files,
                                data=self._scrub(data), params=self._scrub(params),
                                json=self._scrub(json), headers=headers, auth=auth)

    def _scrub(self, value: Any) -> Any:
        """Every string inside ``value`` redacted (blocks sent as a JSON string included)."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            return {k: self._scrub(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._scrub(v) for v in value]
        return value
