"""Posting a finished run's timeline picture into its Slack thread.

The upload is an afterthought by design: the relay asks for it last, once the run's final
status and summary are in the thread; ``close`` starts a background thread to draw and
upload. A failed upload is logged and counted;
nothing waits for it and nothing else depends on it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackRequestError

from agents import logcontext
from agents.run.record import Event, EventKind, Run
from agents.store import Plans

log = logging.getLogger("deckhand.slack.timeline")

Outcome = Callable[[bool | None], None]
"""True: uploaded; False: Slack did not take it; None: pictures not installed."""
"""Told whether an upload worked (e.g. a metrics counter)."""


class TimelineUploader:
    """An executor listener that uploads the run's timeline PNG once the run has ended."""

    def __init__(self, client: WebClient, *, plans: Plans, channel: str, thread_ts: str,
                 outcome: Outcome | None = None):
        self.client, self.plans = client, plans
        self.channel, self.thread_ts = channel, thread_ts
        self.outcome = outcome or (lambda ok: None)
        self.thread: threading.Thread | None = None
        self._final: Run | None = None

    def __call__(self, event: Event, run: Run) -> None:
        if event.kind is EventKind.RUN_FINISHED:
            self._final = run.model_copy(deep=True)

    def close(self) -> None:
        """Start drawing and uploading in the background (only if the run ended)."""
        if self._final is None or self.thread is not None:
            return
        inherit = logcontext.inherit()
        final = self._final

        def work() -> None:
            inherit()
            try:
                ok: bool | None = self.upload(final)
            except Exception:  # a bug in drawing must not go unseen, nor touch anything else
                log.exception("could not draw the timeline of %s", final.id)
                ok = False
            self.outcome(ok)

        self.thread = threading.Thread(target=work, daemon=True, name=f"timeline-{final.id}")
        self.thread.start()

    def upload(self, run: Run) -> bool | None:
        """Draw and upload now; False (logged) if Slack did not take it, None (logged) if
        pictures are not installed (bot.charts)."""
        from bot import charts

        if (reason := charts.missing()) is not None:
            log.warning("no timeline picture for %s: %s", run.id, reason)
            return None
        from bot.timeline import render_timeline  # matplotlib loads on the first upload

        # the final version, if replanned
        plan = self.plans.get(run.plan_id, run.plan_version)
        picture = render_timeline(plan, run)
        try:
            self.client.files_upload_v2(
                channel=self.channel, thread_ts=self.thread_ts, content=picture.png,
                filename=f"{run.id}-timeline.png", title=f"Timeline of {run.id}",
                alt_txt=_alt_text(run, len(picture.bars)))
        except (SlackApiError, SlackRequestError, OSError, ValueError) as exc:
            # ValueError: urllib refuses an upload URL Slack answered with (e.g. no scheme)
            log.warning("could not upload the timeline of %s: %s", run.id, exc)
            return False
        return True


def _alt_text(run: Run, bars: int) -> str:
    took = f" over {run.duration:.0f}s" if run.duration is not None else ""
    return (f"Gantt chart of run {run.id} ({run.status.value}): {bars} bars for its steps"
            f"{took}, critical path highlighted")
