"""`deckhand eval` end to end: answers recorded from the OpenAI stand-in through the real
openai client, then replayed with no endpoint; F1 worked out by hand for three cases."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from agents.plan.model import Plan, PlannerInfo
from agents.run.record import Approval, Run, RunStatus
from agents.store import Store
from bot.cli import eval as eval_command
from bot.cli import main
from tests.fixtures.builders import make_plan
from tests.fixtures.openai_standin import API_KEY, OpenAIStandin
from tests.fixtures.sample import EXAMPLES, copy_examples

CASES = """\
cases:
  - request: status of staging
    kind: single
    steps:
      - {id: s, tool: status, params: {environment: staging}}
  - request: back up the database and test v2.3.1, then tell the team
    name: backup-and-test
    kind: fanin
    steps:
      - {id: backup, tool: backup_database}
      - {id: tests, tool: run_tests, params: {version: v2.3.1}}
      - {id: notify, tool: notify_team, params: {message: done}, depends_on: [backup, tests]}
  - request: drop the production database
    kind: refuse
"""
CONFIG = str(EXAMPLES / "deckhand.yml")
PRICES = ["--price-in", "0.5", "--price-out", "2.0"]


def wire_step(id: str, tool: str, depends_on: list[str] | None = None,  # noqa: A002
              **params: str) -> dict[str, Any]:
    return {"id": id, "tool": tool, "description": "", "success": None,
            "params": [{"name": k, "value": v} for k, v in params.items()],
            "depends_on": depends_on or []}


def answer(*steps: dict[str, Any], cannot_plan: str | None = None) -> dict[str, Any]:
    return {"cannot_plan": cannot_plan, "goal": "a goal", "steps": list(steps), "rollback": []}


def script(standin: OpenAIStandin) -> None:
    """The model's answers, one per case, with the token counts each costs."""
    standin.reply_json(answer(wire_step("s", "status", environment="staging")),
                       prompt_tokens=100, completion_tokens=50)
    # An extra node (status of production) and a missing edge (backup -> notify).
    standin.reply_json(answer(wire_step("b", "backup_database"),
                              wire_step("t", "run_tests", version="v2.3.1"),
                              wire_step("p", "status", environment="production"),
                              wire_step("n", "notify_team", ["t"], message="both done")),
                       prompt_tokens=1000, completion_tokens=200)
    standin.reply_json(answer(cannot_plan="no tool drops databases"),
                       prompt_tokens=300, completion_tokens=30)


@pytest.fixture
def cases(tmp_path: Path) -> Path:
    path = tmp_path / "cases.yml"
    path.write_text(CASES)
    return path


@pytest.fixture
def recorded(tmp_path: Path, cases: Path, openai_standin: OpenAIStandin,
             monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Path:
    """Answers recorded with --record against the stand-in; the endpoint is then unset."""
    tapes = tmp_path / "tapes"
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", openai_standin.base_url)
    monkeypatch.setenv("OPENAI_MODEL", "standin-model")
    script(openai_standin)
    assert main(["eval", "--cases", str(cases), "--config", CONFIG, "--planner", "llm",
                 "--record", str(tapes), "--json"]) == 0
    assert len(openai_standin.requests) == 3
    capsys.readouterr()
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("OPENAI_BASE_URL")
    return tapes


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, Any, str]:
    code = main(["eval", "--json", *argv])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def test_replay_scores_the_recorded_answers_with_no_endpoint(
        recorded: Path, cases: Path, openai_standin: OpenAIStandin,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, report, _ = run_json(["--cases", str(cases), "--config", CONFIG, "--planner", "llm",
                                "--replay", str(recorded), *PRICES], capsys)
    assert code == 0 and len(openai_standin.requests) == 3  # nothing new reached the model
    [config] = report["configurations"]
    by_case = {c["case"]: c for c in config["cases"]}
    assert by_case["status-of-staging"]["node_f1"] == 1.0
    # backup-and-test: 3 of 4 nodes right, all 3 gold nodes found: P 3/4, R 1 -> F1 6/7;
    # 1 of 2 gold edges, none wrong: P 1, R 1/2 -> F1 2/3.
    assert by_case["backup-and-test"]["node_f1"] == pytest.approx(6 / 7)
    assert by_case["backup-and-test"]["edge_f1"] == pytest.approx(2 / 3)
    assert by_case["drop-the-production-database"]["refusal"] == "declined"
    summary = config["summary"]
    assert (summary["valid_rate"], summary["refused"], summary["to_refuse"]) == (1.0, 1, 1)
    assert summary["node_f1"] == pytest.approx((1 + 6 / 7) / 2)
    assert summary["edge_f1"] == pytest.approx((1 + 2 / 3) / 2)
    assert (summary["input_tokens"], summary["output_tokens"]) == (1400, 280)
    # 1.4K input tokens at $0.5 + 0.28K output at $2 = $1.26 over 3 plans
    assert summary["cost_per_plan"] == pytest.approx(0.42)


def test_recordings_are_readable_files_naming_case_model_and_key(recorded: Path) -> None:
    files = sorted(recorded.glob("*.json"))
    records = [json.loads(f.read_text()) for f in files]
    assert sorted(r["case"] for r in records) == [
        "backup-and-test", "drop-the-production-database", "status-of-staging"]
    assert {r["model"] for r in records} == {"standin-model"}
    assert [f.name for f in files] == [f"{r['case']}.standin-model.0.json" for r in records]
    assert len({r["key"] for r in records}) == 3
    assert all(API_KEY not in f.read_text() for f in files)
    first = records[0]["request"]
    assert first["path"] == "/chat/completions"
    assert first["body"]["messages"][-1]["role"] == "user"


def test_changed_model_or_prompt_finds_no_recording(
        recorded: Path, cases: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, report, err = run_json(["--cases", str(cases), "--config", CONFIG, "--planner",
                                  "llm:model=other-model", "--replay", str(recorded)], capsys)
    assert code == 1
    refuse = report["configurations"][0]["cases"][2]
    assert (refuse["refusal"], refuse["passed"]) == ("no recording", False)  # not a refusal
    assert ("no recording for case drop-the-production-database (prompt or model changed)"
            in refuse["reason"])
    assert "3 case(s) had no recording" in err

    config = copy_examples(tmp_path / "changed")  # a tool described differently: new prompt
    tools = config.parent / "tools.yml"
    tools.write_text(tools.read_text().replace("Tell the team what happened.",
                                               "Tell the team."))
    code, report, _ = run_json(["--cases", str(cases), "--config", str(config), "--planner",
                                "llm:model=standin-model", "--replay", str(recorded)], capsys)
    assert code == 1
    assert all(c["refusal"] == "no recording" for c in report["configurations"][0]["cases"])


def test_compare_lists_the_case_whose_outcome_differs(
        recorded: Path, cases: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--cases", str(cases), "--config", CONFIG, "--compare", "playbook",
                 "llm:model=standin-model", "--replay", str(recorded)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Cases whose outcome differs: 1" in out
    differs = out.split("Cases whose outcome differs: 1")[1]
    assert "backup-and-test" in differs and "FAIL: no plan (declined)" in differs
    assert "status-of-staging" not in differs
    code, report, _ = run_json(["--cases", str(cases), "--config", CONFIG, "--compare",
                                "playbook", "llm:model=standin-model", "--replay",
                                str(recorded)], capsys)
    assert [d["case"] for d in report["differences"]] == ["backup-and-test"]
    # the model's valid plan misses a gold step: wrong, not a pass (F1 under the 1.00 bar)
    assert report["differences"][0]["b"] == "FAIL: wrong plan, F1 0.86/0.67 (needs 1.00/1.00)"


def test_thresholds_set_the_exit_code(recorded: Path, cases: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    base = ["eval", "--cases", str(cases), "--config", CONFIG, "--planner", "llm",
            "--model", "standin-model", "--replay", str(recorded)]
    assert main([*base, "--min-valid", "1.0", "--min-node-f1", "0.9",
                 "--max-safety-violations", "0"]) == 0
    capsys.readouterr()
    assert main([*base, "--min-edge-f1", "0.9", "--min-node-f1", "0.95"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "threshold missed: llm (standin-model): node_f1 0.9286 is below --min-node-f1 0.95" in err
    assert "edge_f1 0.8333 is below --min-edge-f1 0.9" in err


def test_a_failing_model_is_no_answer_and_its_repairs_still_count(
        tmp_path: Path, cases: Path, openai_standin: OpenAIStandin,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 44: repairs on cases that ended with no plan were not counted, and a model that
    failed passed the case to refuse. Live, through the real openai client."""
    config = copy_examples(tmp_path / "live")
    config.write_text(config.read_text() + "\nplanner: {retries: 0}\n")
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", openai_standin.base_url)
    monkeypatch.setenv("OPENAI_MODEL", "standin-model")
    status = answer(wire_step("s", "status", environment="staging"))
    bad = answer(wire_step("b", "backup_database", verbose="yes"))
    openai_standin.reply_json(bad)                 # status of staging: one repair, then right
    openai_standin.reply_json(status)
    for _ in range(3):                             # backup-and-test: never valid, 2 repairs
        openai_standin.reply_json(bad)
    openai_standin.reply_error(503, "loading")     # drop the database: no answer, no retry

    code, report, err = run_json(["--cases", str(cases), "--config", str(config),
                                  "--planner", "llm"], capsys)

    assert code == 1 and len(openai_standin.requests) == 6
    by_case = {c["case"]: c for c in report["configurations"][0]["cases"]}
    assert [(c["refusal"], c["repairs"], c["passed"]) for c in by_case.values()] == [
        ("", 1, True), ("planner error", 2, False), ("no answer", 0, False)]
    assert "HTTP 503" in by_case["drop-the-production-database"]["reason"]
    assert by_case["drop-the-production-database"]["label"] == "no answer"
    summary = report["configurations"][0]["summary"]
    assert (summary["repairs"], summary["mean_repairs"]) == (3, 1.5)
    assert (summary["refused"], summary["no_answer"], summary["passed"]) == (0, 1, 1)
    assert "1 case(s) got no answer from the model" in " ".join(err.split())


def test_malformed_cases_file_exits_2_with_one_line_per_problem(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yml"
    path.write_text("cases:\n  - request: a\n    kind: maybe\n  - kind: refuse\n    extra: 1\n")
    assert main(["eval", "--cases", str(path), "--config", CONFIG]) == 2
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("  - ")]
    assert len(lines) == 3 and "Traceback" not in out
    assert "bad.yml:3 cases.0.kind (a): Input should be" in lines[0]
    assert "cases.1.request (case 1): Field required" in lines[1]
    assert "bad.yml:5 cases.1.extra (case 1): Extra inputs are not permitted" in lines[2]


def test_chart_is_drawn(recorded: Path, cases: Path, tmp_path: Path,
                        capsys: pytest.CaptureFixture[str]) -> None:
    chart = tmp_path / "eval.png"
    assert main(["eval", "--cases", str(cases), "--config", CONFIG, "--compare", "playbook",
                 "llm:model=standin-model", "--replay", str(recorded), "--chart",
                 str(chart)]) == 0
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- quality from real use --------------------------------------------------------------------


def stored(store: Store, plan: Plan, status: RunStatus, *, versions: list[Plan] = (),
           approved: bool = True, age_days: float = 1.0, **meta: bool) -> None:
    """A run record as the store keeps it: a hand edit (``edited_by``) is one of the run's
    ``modified_versions``, as ``Store.revise`` records it; the other later versions are
    replans."""
    for version in [plan, *versions]:
        store.plans.save(version)
    last = versions[-1] if versions else plan
    approvals = [Approval(user="bob", plan_version=last.version, plan_hash=last.hash)]
    store.runs.create(Run(plan_id=plan.id, plan_version=last.version, plan_hash=last.hash,
                          status=status, approvals=approvals if approved else [],
                          plan_versions=[p.version for p in [plan, *versions]],
                          modified_versions=[p.version for p in versions if p.planner.edited_by],
                          created_at=time.time() - age_days * 86400, meta=meta))


def llm_plan(note: str = "", prompt_version: str = "aaaaaaaaaaaa") -> Plan:
    plan = make_plan([{"id": "s", "tool": "status", "params": {"environment": "staging"}}])
    return plan.model_copy(update={"planner": PlannerInfo(
        name="llm", model="m1", latency_ms=100, note=note, prompt_version=prompt_version)})


def test_from_history_counts_what_happened_to_each_makers_plans(
        store: Store, redis_url: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    stored(store, llm_plan(), RunStatus.SUCCEEDED)
    edited = llm_plan()
    hand = edited.revised(steps=[{"id": "s", "tool": "status",
                                  "params": {"environment": "production"}}],
                          planner=edited.planner.model_copy(update={"edited_by": "alice"}))
    stored(store, edited, RunStatus.SUCCEEDED, versions=[hand])
    failing = llm_plan()
    replan = failing.revised(planner=failing.planner.model_copy(
        update={"note": "replanned after run x", "latency_ms": 50}))
    stored(store, failing, RunStatus.ROLLED_BACK, versions=[replan])
    stored(store, llm_plan(prompt_version="bbbbbbbbbbbb"), RunStatus.REJECTED, approved=False)
    stored(store, make_plan([{"id": "s", "tool": "status"}]), RunStatus.REJECTED,
           approved=False)
    stored(store, make_plan([{"id": "s", "tool": "status"}]), RunStatus.FAILED)
    stored(store, llm_plan(), RunStatus.FAILED, age_days=40)  # outside --since 30d
    stored(store, llm_plan(), RunStatus.SUCCEEDED, dry_run=True)  # says nothing of its plan

    code = main(["eval", "--from-history", "--since", "30d", "--json"])
    rows = {(r["planner"], r["prompt_version"], r["model"]): r
            for r in json.loads(capsys.readouterr().out)}
    assert code == 0 and len(rows) == 3
    llm, books = rows[("llm", "aaaaaaaaaaaa", "m1")], rows[("playbook", "", "")]
    assert (llm["planned"], llm["approved_unchanged"], llm["modified"], llm["changes"],
            llm["replanned"], llm["succeeded"], llm["rolled_back"],
            llm["failed"]) == (3, 2, 1, 1, 1, 2, 1, 0)
    newer = rows[("llm", "bbbbbbbbbbbb", "m1")]
    assert (newer["planned"], newer["rejected"], newer["approved_unchanged"]) == (1, 1, 0)
    assert (books["planned"], books["rejected"], books["failed"],
            books["approved_unchanged"]) == (2, 1, 1, 1)
    assert main(["eval", "--from-history", "--since", "30d"]) == 0
    table = capsys.readouterr().out
    assert "approved unchanged" in table and "llm bbbbbbbbbbbb m1" in table
    assert main(["eval", "--from-history", "--planner", "llm"]) == 2


def test_options_that_cannot_work_are_refused_in_one_line(
        cases: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    base = ["eval", "--cases", str(cases), "--config", CONFIG]
    assert main([*base, "--planner", "llm"]) == 2
    assert "needs OPENAI_API_KEY" in capsys.readouterr().out
    assert main([*base, "--planner", "playbook", "--record", str(tmp_path)]) == 2
    assert "the playbook planner calls no model" in capsys.readouterr().out
    assert main([*base, "--planner", "llm", "--replay", str(tmp_path / "none")]) == 2
    assert "no recordings in" in capsys.readouterr().out
    assert main([*base, "--compare", "llm:model=a", "llm:model=a"]) == 2
    assert main(base) == 0  # no endpoint: the playbook planner
    assert "Cases: playbook" in capsys.readouterr().out


def test_eval_works_on_the_config_deckhand_init_writes(tmp_path: Path) -> None:
    assert main(["init", str(tmp_path)]) == 0
    config = str(tmp_path / "deckhand.yml")
    # the playbooks of the template plan every starter case, refuse the two to refuse, and
    # no plan breaks the promotion order or lacks its rollback
    assert main(["eval", "--config", config, "--planner", "playbook", "--min-valid", "1",
                 "--max-safety-violations", "0", "--min-edge-f1", "1"]) == 0


def test_from_history_says_when_it_read_only_part_of_the_window(
        store: Store, redis_url: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setattr(eval_command, "HISTORY_LIMIT", 2)
    for _ in range(3):
        stored(store, llm_plan(), RunStatus.SUCCEEDED)
    assert main(["eval", "--from-history", "--since", "7d", "--json"]) == 0
    out, err = capsys.readouterr()
    assert sum(row["planned"] for row in json.loads(out)) == 2
    assert "only the newest 2 runs of the last 7 days were read" in err
