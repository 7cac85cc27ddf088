"""Prompt templates as versioned package files, operator overrides, and what `check` says."""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path

import pytest

from agents.config import load_config
from agents.prompts.templates import (
    OPERATIONS,
    SLOTS,
    PromptSet,
    TemplateRefused,
    built_in,
    parse_template,
    read_template,
)
from bot.cli import main

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = ROOT / "agents" / "planning" / "prompts"
EXAMPLES = ROOT / "examples"


def _config_with(tmp_path: Path, prompts: dict[str, str]) -> Path:
    """The example config in ``tmp_path`` with ``planner.prompts`` set to these files."""
    (tmp_path / "tools.yml").write_text((EXAMPLES / "tools.yml").read_text())
    lines = "".join(f"    {name}: {file}\n" for name, file in prompts.items())
    path = tmp_path / "deckhand.yml"
    path.write_text((EXAMPLES / "deckhand.yml").read_text() + f"\nplanner:\n  prompts:\n{lines}")
    return path


def test_every_template_is_a_shipped_file_versioned_by_its_bytes() -> None:
    files = {p.stem for p in PROMPTS.glob("*.txt")}
    assert files == set(SLOTS)
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "prompts/*.txt" in data["tool"]["setuptools"]["package-data"]["agents.planning"]
    for name in SLOTS:
        raw = (PROMPTS / f"{name}.txt").read_bytes()
        assert built_in(name).version == hashlib.sha256(raw).hexdigest()[:12]
        assert built_in(name).text == raw.decode().removesuffix("\n")


def test_substitution_is_one_pass_and_never_expands_values() -> None:
    template = parse_template("plan", b"Plan:\n{{ request }}\n")
    assert template.render(request="{{request}} and {{tools}}") == "Plan:\n{{request}} and {{tools}}"


def test_a_template_must_keep_its_placeholders_and_use_only_known_ones() -> None:
    with pytest.raises(TemplateRefused, match=r"template modify \(x\) lost the required "
                                              r"placeholder \{\{change\}\}"):
        parse_template("modify", b"{{plan}} {{version}}", "x")
    with pytest.raises(TemplateRefused, match=r"unknown placeholder \{\{tool\}\}"):
        parse_template("plan", b"{{request}} {{tool}}", "x")
    with pytest.raises(TemplateRefused, match="is not UTF-8"):
        parse_template("plan", b"{{request}} \xff", "x")
    parse_template("modify", b"{{plan}} {{change}}")  # {{version}} is optional


def test_an_override_versions_only_the_operations_that_send_it(tmp_path: Path) -> None:
    builtin = PromptSet().versions()
    modify = tmp_path / "modify.txt"
    modify.write_text((PROMPTS / "modify.txt").read_text().replace("Keep", "Please keep"))
    changed = PromptSet({"modify": read_template("modify", modify)}).versions()
    assert changed["plan"] == builtin["plan"] and changed["replan"] == builtin["replan"]
    assert changed["modify"] != builtin["modify"]
    system = tmp_path / "system.txt"
    system.write_text((PROMPTS / "system.txt").read_text() + "8. Be brief.\n")
    everything = PromptSet({"system": read_template("system", system)}).versions()
    assert all(everything[op] != builtin[op] for op in OPERATIONS)


def test_config_overrides_a_template_from_a_file(tmp_path: Path) -> None:
    (tmp_path / "plan.txt").write_text("Deploy request:\n{{request}}\n")
    config = load_config(_config_with(tmp_path, {"plan": "plan.txt"}))
    plan = config.prompts.templates["plan"]
    assert plan.source == str(tmp_path / "plan.txt") and plan.text == "Deploy request:\n{{request}}"
    assert config.prompts.overridden == {"plan": str(tmp_path / "plan.txt")}
    assert config.prompts.version("plan") != PromptSet().version("plan")


def test_check_refuses_an_override_that_lost_a_placeholder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "plan.txt").write_text("Plan whatever they typed.\n")
    path = _config_with(tmp_path, {"plan": "plan.txt", "replan": "gone.txt", "plann": "x.txt"})
    assert main(["check", str(path)]) == 2
    out = capsys.readouterr().out
    assert "planner.prompts.plan: template plan" in out
    assert "lost the required placeholder {{request}}" in out
    assert "planner.prompts.replan: template replan: cannot read" in out
    assert "no prompt template 'plann'" in out
    assert main(["plan", "deploy v2.3.1", "--config", str(path)]) == 2  # plan refuses too


def test_check_names_the_prompt_versions_and_overrides(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "repair.txt").write_text("Refused:\n{{problems}}\nTry again.\n")
    assert main(["check", str(_config_with(tmp_path, {"repair": "repair.txt"}))]) == 0
    out = capsys.readouterr().out
    config = load_config(tmp_path / "deckhand.yml")
    versions = config.prompts.versions()
    assert f"prompts: plan@{versions['plan']}, modify@{versions['modify']}" in out
    assert f"template repair from {tmp_path / 'repair.txt'}" in out
