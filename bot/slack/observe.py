"""Slack Web API metrics: a retry handler that sees every answer and counts failures."""

from __future__ import annotations

from slack_sdk import WebClient
from slack_sdk.http_retry import RetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState

from bot.metrics import Metrics


def observe_slack(client: WebClient, metrics: Metrics) -> None:
    """Count the client's API errors and 429s (it sees every answer, retries included)."""
    client.retry_handlers.insert(0, _SlackObserver(metrics))


class _SlackObserver(RetryHandler):
    """Counts failures on every Slack answer; never asks for a retry (the others decide)."""

    def __init__(self, metrics: Metrics):
        super().__init__(max_retry_count=0)
        self.metrics = metrics

    def can_retry(self, *, state: RetryState, request: HttpRequest,
                  response: HttpResponse | None = None, error: Exception | None = None) -> bool:
        method = request.url.rstrip("/").rsplit("/", 1)[-1].split("?")[0]
        if response is not None and response.status_code == 429:
            self.metrics.slack_rate_limited.labels(method).inc()
        elif response is not None and response.status_code >= 400:
            self.metrics.slack_errors.labels(method, f"http_{response.status_code}").inc()
        elif response is not None and isinstance(response.body, dict) \
                and response.body.get("ok") is False:
            error_name = str(response.body.get("error") or "unknown")
            self.metrics.slack_errors.labels(method, error_name).inc()
        elif response is None and error is not None:
            self.metrics.slack_errors.labels(method, type(error).__name__).inc()
        return False
