"""Structured logs: JSON lines with the run id and plan id, from every thread of a run."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.engine.worker import Worker
from agents.policy.rules import Policy
from agents.run.record import Event, EventKind, Run, RunStatus
from agents.services import build_services
from agents.settings import Settings
from agents.store import Store
from bot.logs import configure_logging
from tests.fixtures.builders import make_config, make_plan

log = logging.getLogger("deckhand.test")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    level = logging.getLogger().level
    handler = configure_logging("json", stream=stream)
    yield stream
    logging.getLogger().removeHandler(handler)
    logging.getLogger().setLevel(level)


def _records(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_every_line_during_a_run_names_the_run_and_plan(tmp_path: Path,
                                                        json_lines: io.StringIO) -> None:
    config = make_config(tmp_path)
    services = build_services(config, Settings(), store=Store.connect(None))
    plan = make_plan([{"id": "a", "tool": "sh", "params": {"script": "true"}},
                      {"id": "b", "tool": "sh", "params": {"script": "true"}},
                      {"id": "c", "tool": "log", "params": {"line": "x"}, "depends_on": ["a"]}])
    services.store.plans.save(plan)
    run = services.store.runs.create(Run.for_plan(plan, services.targets(plan)))
    services.store.runs.approve(run.id, face="cli", user="ann", plan_version=1, plan_hash=plan.hash,
                                policy=Policy())

    def chatty(event: Event, current: Run) -> None:  # runs in the executor's step threads
        if event.kind is EventKind.STEP_FINISHED:
            log.info("finished %s", event.step_id)

    log.info("before the run")
    final = Worker(services, services.store, name="w1").process(run.id, listeners=[chatty])
    log.warning("after the run")
    assert final is not None and final.status is RunStatus.SUCCEEDED

    records = _records(json_lines)
    during = [r for r in records if str(r["message"]).startswith("finished")]
    assert sorted(str(r["message"]) for r in during) == ["finished a", "finished b",
                                                         "finished c"]
    assert {(r["run_id"], r["plan_id"]) for r in during} == {(run.id, plan.id)}
    assert any(str(r["thread"]).startswith("step") for r in during)  # the executor's pool
    outside = [r for r in records if r["message"] in ("before the run", "after the run")]
    assert [(r["run_id"], r["plan_id"], r["level"]) for r in outside] == [
        (None, None, "info"), (None, None, "warning")]
    assert all(r["logger"] and str(r["ts"]).endswith("Z") for r in records)


def test_tracebacks_are_kept_in_one_json_line(json_lines: io.StringIO) -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("it failed")
    (record,) = _records(json_lines)
    assert record["message"] == "it failed" and "ValueError: boom" in str(record["exception"])


STRAYS = """
import threading, warnings
from bot.logs import configure_logging
configure_logging("json")
doomed = threading.Thread(target=lambda: 1 / 0, name="doomed")
doomed.start()
doomed.join()
warnings.warn("an old API", UserWarning)
configure_logging("text")
print(threading.excepthook is threading.__excepthook__)
"""


def test_a_dying_thread_and_a_warning_are_json_lines_too() -> None:
    """What Python prints by itself (a thread's traceback, a warning) under JSON logging;
    a real process, as pytest puts hooks of its own on both."""
    done = subprocess.run([sys.executable, "-c", STRAYS], capture_output=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    thread, warning = [json.loads(line) for line in done.stderr.decode().splitlines()]
    assert thread["level"] == "error" and "thread doomed" in thread["message"]
    assert "ZeroDivisionError" in thread["exception"]
    assert warning["logger"] == "py.warnings" and "an old API" in warning["message"]
    assert done.stdout.decode().strip() == "True"  # text logging: Python's own hook again
