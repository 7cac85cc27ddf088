"""The doors every payload to Slack goes through, with the redactor on them.

A message can carry text nobody vetted for secrets: a plan's parameters (typed into
``/deploy``), a step's output, an error, a model's words. Redacting at each place that builds
a message leaves the next new message to remember, so each way out has one door:

- the Web API: :class:`RedactingWebClient` redacts every call's ``json``, form ``data`` and
  ``params`` (file bytes are left alone);
- the HTTP answer to Slack's request (what ``ack(...)`` says, e.g. "Planning `…`"):
  :class:`RedactingApp` redacts the body ``dispatch`` returns, over HTTP and Socket Mode;
- the request's ``response_url`` (``respond(...)``, used for replies during 429 storms):
  :class:`RedactingApp` gives every listener a :class:`RedactingRespond`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from slack_bolt import App, BoltContext, BoltRequest, BoltResponse
from slack_bolt.context.respond import Respond
from slack_sdk import WebClient
from slack_sdk.web.slack_response import SlackResponse
from slack_sdk.webhook import WebhookResponse

from tools.redact import Redactor, redact_data, redact_text


class RedactingWebClient(WebClient):
    """``slack_sdk.WebClient`` whose outgoing payloads are redacted."""

    def __init__(self, *args: Any, redact: Callable[[str], str], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.redact = redact

    def learn(self, fresh: Callable[[str], str]) -> None:
        """Redact what ``fresh`` (a reloaded config's redactor) masks as well as what this
        door masked so far: a run still executing may print a secret the new file no longer
        lists. Two Redactors merge into one (no chain growing by one per reload)."""
        before = self.redact
        self.redact = (before.including(fresh) if isinstance(before, Redactor)
                       and isinstance(fresh, Redactor) else lambda text: fresh(before(text)))

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


class RedactingRespond(Respond):
    """Bolt's ``respond`` (a post to the request's response_url), its message redacted."""

    def __init__(self, *, redact: Callable[[str], str], **kwargs: Any):
        super().__init__(**kwargs)
        self.redact = redact

    def __call__(self, text: str | dict[str, Any] = "",  # type: ignore[override]
                 blocks: Sequence[dict[str, Any]] | None = None,
                 attachments: Sequence[dict[str, Any]] | None = None,
                 **options: Any) -> WebhookResponse:
        scrub = self.redact
        return super().__call__(redact_data(scrub, text), blocks=redact_data(scrub, blocks),
                                attachments=redact_data(scrub, attachments), **options)


class RedactingApp(App):
    """Bolt's ``App`` whose answers to Slack (the acknowledgement's body) and ``respond``
    posts pass ``redact``, as the Web API's payloads do (:class:`RedactingWebClient`)."""

    def __init__(self, *args: Any, redact: Callable[[str], str], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._redact = redact

        def respond_door(context: BoltContext, next: Callable[[], None]) -> None:  # noqa: A002 - Bolt's name
            if context.response_url:
                context["respond"] = RedactingRespond(
                    redact=redact, response_url=context.response_url,
                    proxy=context.client.proxy, ssl=context.client.ssl)
            next()
        self.use(respond_door)

    def dispatch(self, req: BoltRequest) -> BoltResponse:
        response = super().dispatch(req)
        if isinstance(response.body, str) and response.body:
            response.body = redact_text(self._redact, response.body)
        return response
