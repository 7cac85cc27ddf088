"""A flood of output: events are batched and bounded, and nothing secret reaches them or
the record's tail."""

from __future__ import annotations

from pathlib import Path

from agents.run.record import Event, EventKind, Run, RunStatus
from tests.fixtures.builders import make_config, make_executor, make_plan
from tools.redact import Redactor

SECRET = "flood-secret-zq81"


def test_a_flood_of_output_is_batched_bounded_and_redacted(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    script = (f"seq 1 200000 | sed 's/^/log line /'; echo password={SECRET}; "
              f"echo {SECRET} once more; echo last line")
    plan = make_plan([{"id": "flood", "tool": "sh", "params": {"script": script}}])
    texts: list[str] = []

    def listener(event: Event, run: Run) -> None:
        if event.kind is EventKind.STEP_OUTPUT:
            texts.append(event.line or "")

    executor = make_executor(config, listeners=[listener])
    executor.deps.redact = Redactor([SECRET])
    run = executor.execute(plan)
    assert run.status is RunStatus.SUCCEEDED, run.reason
    assert texts[0].startswith("log line 1")  # the first line went at once
    assert texts[-1].endswith("last line")  # the last one once the command ended
    assert len(texts) < 2000  # not one event per line (200,003 of them)
    assert all(len(t) < 70 * 1024 for t in texts)  # bounded, whatever the burst
    assert not any(SECRET in t for t in texts)
    tail = run.steps["flood"].hosts["local"].tail
    assert "last line" in tail and SECRET not in tail
