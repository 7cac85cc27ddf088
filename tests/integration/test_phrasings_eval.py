"""Issue 33: `deckhand eval` shows both planners on natural phrasings for the init config —
the playbook planner with no model, and the LLM planner through the real openai client
against the OpenAI stand-in (recorded, then replayed with no endpoint)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agents.evaluation.cases import load_cases
from bot.cli import main
from bot.cli.init import template_text
from tests.fixtures.openai_standin import API_KEY, OpenAIStandin

PHRASINGS = Path(__file__).parents[2] / "agents" / "evaluation" / "phrasings_cases.yml"


@pytest.fixture
def init_config(tmp_path: Path) -> Path:
    path = tmp_path / "deckhand.yml"
    path.write_text(template_text())
    return path


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, Any]:
    code = main(["eval", "--json", *argv])
    return code, json.loads(capsys.readouterr().out)


def test_the_set_is_natural_phrasings_not_the_playbooks_examples(init_config: Path) -> None:
    cases = load_cases(PHRASINGS)
    examples = {e for book in template_playbook_examples(init_config) for e in book}
    assert len(cases) >= 40 and not {c.request for c in cases} & examples


def template_playbook_examples(path: Path) -> list[list[str]]:
    from agents.config import load_config

    return [b.examples for b in load_config(path).playbooks]


def test_playbook_planner_plans_every_phrasing_right(
        init_config: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.chdir(init_config.parent)  # by name, from anywhere: no checkout needed
    code, report = run_json(["--config", str(init_config), "--cases", "phrasings",
                             "--planner", "playbook", "--min-right", "1"], capsys)
    [config] = report["configurations"]
    wrong = [c["case"] for c in config["cases"] if not c["passed"]]
    assert code == 0 and wrong == []
    assert config["summary"]["passed"] == config["summary"]["cases"] == 46


def wire(case: dict[str, Any], alias: bool) -> dict[str, Any]:
    """The gold plan in the model's wire shape; with ``alias`` the model says "prod"."""
    def step(body: dict[str, Any]) -> dict[str, Any]:
        params = {k: ("prod" if alias and v == "production" else v)
                  for k, v in body.get("params", {}).items()}
        return {"id": body["id"], "tool": body["tool"], "description": "", "success": None,
                "params": [{"name": k, "value": v} for k, v in params.items()],
                "depends_on": body.get("depends_on", [])}

    if case["kind"] == "refuse":
        return {"cannot_plan": case["reason"], "goal": "", "steps": [], "rollback": []}
    rollback = [{k: v for k, v in step(r).items() if k not in ("depends_on", "success")}
                for r in case.get("rollback", [])]
    return {"cannot_plan": None, "goal": case["request"],
            "steps": [step(s) for s in case["steps"]], "rollback": rollback}


def test_llm_planner_through_the_standin_recorded_then_replayed(
        init_config: Path, tmp_path: Path, openai_standin: OpenAIStandin,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    cases = [c.model_dump() for c in load_cases(PHRASINGS)]
    for index, case in enumerate(cases):  # every other answer names production "prod"
        openai_standin.reply_json(wire(case, alias=index % 2 == 0), prompt_tokens=900,
                                  completion_tokens=150)
    tapes = tmp_path / "tapes"
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", openai_standin.base_url)
    monkeypatch.setenv("OPENAI_MODEL", "standin-model")
    code, _ = run_json(["--config", str(init_config), "--cases", str(PHRASINGS),
                        "--planner", "llm", "--record", str(tapes)], capsys)
    assert code == 0 and len(openai_standin.requests) == len(cases)  # no repairs needed
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("OPENAI_BASE_URL")
    code, report = run_json(["--config", str(init_config), "--cases", str(PHRASINGS),
                             "--compare", "playbook", "llm:model=standin-model",
                             "--replay", str(tapes)], capsys)
    assert code == 0 and len(openai_standin.requests) == len(cases)  # replay: no new calls
    playbook, llm = (c["summary"] for c in report["configurations"])
    assert playbook["passed"] == llm["passed"] == 46
    assert llm["input_tokens"] == 900 * 46 and playbook["input_tokens"] == 0
    assert report["differences"] == []
