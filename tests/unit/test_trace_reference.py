"""Where a run's trace is: the id inside its traceparent, or the team's tracing-UI link."""

from __future__ import annotations

import pytest

from agents import tracing
from agents.errors import SettingsInvalid
from agents.run.record import Run
from agents.settings import Settings
from bot.slack import blocks as bk
from tests.fixtures.builders import NO_TARGETS, make_plan

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
ID = "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.mark.parametrize("traceparent", [None, "", "garbage", "00-xyz-00f067aa0ba902b7-01",
                                         "00-" + "0" * 32 + "-00f067aa0ba902b7-01",
                                         "00-" + "G" * 32 + "-00f067aa0ba902b7-01"])
def test_no_trace_id_from_a_missing_or_malformed_traceparent(traceparent: str | None) -> None:
    assert tracing.trace_id(traceparent) is None
    assert tracing.reference(traceparent, "https://ui/{trace_id}") is None


def test_the_reference_is_the_link_when_a_template_is_set() -> None:
    assert tracing.reference(PARENT) == ID
    assert tracing.reference(PARENT, "https://ui.example/trace/{trace_id}") == \
        f"https://ui.example/trace/{ID}"


@pytest.mark.parametrize("bad", ["ftp://ui/{trace_id}", "https://ui/trace", "ui/{trace_id}"])
def test_a_bad_trace_url_names_the_variable(bad: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DECKHAND_TRACE_URL", bad)
    monkeypatch.setenv("DECKHAND_SCHEDULE_GRACE", "-1")
    with pytest.raises(SettingsInvalid) as caught:
        Settings()
    message = str(caught.value)
    assert "DECKHAND_TRACE_URL: " in message and "{trace_id}" in message
    assert "DECKHAND_SCHEDULE_GRACE: " in message  # every bad variable, not just the first


def test_the_slack_summary_links_the_trace() -> None:
    plan = make_plan([{"id": "a", "tool": "log", "params": {"line": "x"}}])
    run = Run.for_plan(plan, NO_TARGETS)
    assert len(bk.summary_blocks(plan, run, trace_link="https://ui/{trace_id}")) == 1
    run.meta["traceparent"] = PARENT
    footer = bk.summary_blocks(plan, run, trace_link="https://ui/t?id={trace_id}&a=1")[-1]
    assert footer["elements"][0]["text"] == f"trace <https://ui/t?id={ID}&amp;a=1|view>"
    assert bk.summary_blocks(plan, run)[-1]["elements"][0]["text"] == f"trace `{ID}`"
