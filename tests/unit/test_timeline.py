"""The run timeline picture: real runs through the executor, rendered to real PNG files."""

from __future__ import annotations

import struct
from pathlib import Path

from PIL import Image

from agents.plan.model import Plan
from agents.run.record import Phase, Run, RunStatus, StepStatus
from bot.timeline import CHROME_IN, DPI, MAX_ROWS, ROW_IN, WIDTH_IN, render_timeline, save_timeline
from tests.fixtures.builders import make_config, make_executor, make_plan

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _plan(fail: bool = False) -> Plan:
    prod = {"environment": "production", "label": "p", **({"script": "exit 3"} if fail else {})}
    return make_plan(
        [{"id": "build", "tool": "sh", "params": {"script": "sleep 0.2"}},
         {"id": "lint", "tool": "sh", "params": {"script": "true"}},
         {"id": "stage", "tool": "change", "depends_on": ["build"],
          "params": {"environment": "staging", "label": "s"}},
         {"id": "prod", "tool": "change", "depends_on": ["stage"], "params": prod},
         {"id": "notify", "tool": "log", "params": {"line": "done"}, "depends_on": ["prod"]}],
        rollback=[{"id": "undo_prod", "tool": "undo", "params": {"environment": "production"}},
                  {"id": "undo_stage", "tool": "undo", "params": {"environment": "staging"}}],
        goal="Deploy v2.3.1")


def _run(tmp_path: Path, *, fail: bool = False) -> tuple[Plan, Run]:
    plan = _plan(fail)
    return plan, make_executor(make_config(tmp_path)).execute(plan)


def test_finished_run_draws_one_bar_per_step_and_per_host(tmp_path: Path) -> None:
    plan, run = _run(tmp_path)
    assert run.status is RunStatus.SUCCEEDED
    out = tmp_path / "timeline.png"
    timeline = save_timeline(plan, run, out)
    # production fanned out over web-2 and web-3: two bars; every other step one
    expected = sum(max(1, len(run.steps[s.id].hosts)) for s in plan.steps)
    assert expected == 6 and len(timeline.bars) == expected
    assert [(b.step_id, b.host) for b in timeline.bars if b.step_id == "prod"] == [
        ("prod", "web-2"), ("prod", "web-3")]
    assert _png_size(out.read_bytes()) == (timeline.width, timeline.height)
    assert timeline.width == int(WIDTH_IN * DPI)
    with Image.open(out) as image:
        assert image.format == "PNG" and image.size == (timeline.width, timeline.height)
    # a fixed width for Slack's preview; the height grows with the rows, so bars stay legible
    assert timeline.height == round((CHROME_IN + ROW_IN * len(timeline.rows)) * DPI)


def test_critical_path_is_highlighted(tmp_path: Path) -> None:
    plan, run = _run(tmp_path)
    critical = {b.step_id for b in render_timeline(plan, run).bars
                if b.critical}
    assert critical == {"build", "stage", "prod", "notify"}  # lint ran beside build
    bars = {b.label: b for b in render_timeline(plan, run).bars}
    assert bars["build"].kind == "critical" and bars["lint"].kind == "step"
    assert 0 <= bars["build"].start < bars["stage"].start < bars["notify"].start


def test_failed_and_rolled_back_steps_are_marked(tmp_path: Path) -> None:
    plan, run = _run(tmp_path, fail=True)
    assert run.status is RunStatus.ROLLED_BACK
    timeline = render_timeline(plan, run)
    kinds = {(b.label, b.kind) for b in timeline.bars}
    assert ("prod", "failed") in kinds  # web-2 failed; web-3 never started: one bar
    assert {("↩ undo_prod", "rollback"), ("↩ undo_stage", "rollback")} <= kinds
    skipped = [r for r in timeline.rows if not r.bars]
    assert [(r.label, r.note) for r in skipped] == [("notify", StepStatus.SKIPPED.value)]
    assert all(b.phase is Phase.ROLLBACK for b in timeline.bars if b.label.startswith("↩"))
    assert _png_size(timeline.png) == (timeline.width, timeline.height)


def test_long_runs_are_capped(tmp_path: Path) -> None:
    steps = [{"id": f"s{i:02d}", "tool": "sh", "params": {"script": "true"}} for i in range(55)]
    plan = make_plan(steps)
    run = make_executor(make_config(tmp_path), max_parallel=8).execute(plan)
    timeline = render_timeline(plan, run)
    assert len(timeline.rows) == MAX_ROWS and timeline.hidden_rows == 15
    assert len(timeline.bars) == MAX_ROWS


def test_steps_the_record_does_not_know_are_left_out(tmp_path: Path) -> None:
    plan, run = _run(tmp_path)
    body = plan.model_dump(include={"steps"})["steps"]
    extra = plan.revised(steps=[*body, {"id": "later", "tool": "sh", "params": {"script": "x"}}])
    assert len(render_timeline(extra, run).bars) == len(render_timeline(plan, run).bars)
