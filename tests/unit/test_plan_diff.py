"""Plan diffs: what changed between two versions, and how Slack and the terminal show it."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from agents.plan.diff import Mark, diff_plans
from agents.plan.model import Plan, PlannerInfo
from agents.plan.targets import PlanTargets
from agents.policy.rules import Policy
from agents.run.record import Run
from agents.services import build_services
from agents.settings import Settings
from agents.store import Store
from bot.slack import blocks as bk
from bot.terminal.console import ConsoleFlow
from bot.terminal.render import diff_text
from tests.fixtures.builders import make_config, make_plan
from tests.fixtures.slack_standin import check_limits

V1 = make_plan(
    [{"id": "build", "tool": "sh", "params": {"script": "make"}},
     {"id": "deploy", "tool": "change", "params": {"label": "v2.3.1"}, "depends_on": ["build"]},
     {"id": "smoke", "tool": "sh", "params": {"script": "curl -f /health"},
      "depends_on": ["deploy"]},
     {"id": "notify", "tool": "log", "params": {"line": "done"}, "depends_on": ["smoke"]}],
    rollback=[{"id": "undo", "tool": "undo", "params": {}}], goal="Deploy v2.3.1")


def _v2() -> Plan:
    body = V1.model_dump(include={"goal", "steps", "rollback"})
    steps = [s for s in body["steps"] if s["id"] != "notify"]
    steps[1]["params"] = {"label": "v2.3.2", "script": "true"}
    steps[2]["depends_on"] = ["deploy", "build"]
    steps.append({"id": "smoke_prod", "tool": "sh", "params": {"script": "curl -f /prod"},
                  "depends_on": ["smoke"]})
    rollback = [*body["rollback"], {"id": "page", "tool": "log", "params": {"line": "rolled"}}]
    return V1.revised(goal="Deploy v2.3.2", steps=steps, rollback=rollback)


def test_added_removed_and_changed_steps() -> None:
    diff = diff_plans(V1, _v2())
    assert (diff.old_version, diff.new_version) == (1, 2)
    assert [s.id for s in diff.added] == ["smoke_prod"]
    assert [s.id for s in diff.removed] == ["notify"]
    assert [c.id for c in diff.changed] == ["deploy", "smoke"]
    deploy, smoke = diff.changed
    assert [(p.key, p.old, p.new) for p in deploy.params] == [
        ("label", "v2.3.1", "v2.3.2"), ("script", None, "true")]
    assert smoke.deps_added == ("build",) and smoke.deps_removed == ()
    assert diff.goal == ("Deploy v2.3.1", "Deploy v2.3.2")
    assert [r.id for r in diff.rollback_added] == ["page"]
    assert diff.summary() == "goal changed, 2 added, 1 removed, 2 changed"


def test_lines_are_compact_and_marked() -> None:
    lines = {(line.mark, line.step): line.text for line in diff_plans(V1, _v2()).lines()}
    assert lines[(Mark.ADDED, "smoke_prod")] == "sh script=curl -f /prod after smoke"
    assert lines[(Mark.REMOVED, "notify")] == "log line=done after smoke"
    assert lines[(Mark.CHANGED, "deploy")] == "label: v2.3.1 → v2.3.2; script=true (new)"
    assert lines[(Mark.CHANGED, "smoke")] == "after: +build"
    assert lines[(Mark.CHANGED, "")] == "goal: 'Deploy v2.3.1' → 'Deploy v2.3.2'"


def test_same_plan_has_no_changes_and_a_rename_is_remove_plus_add() -> None:
    assert diff_plans(V1, V1.revised()).empty
    body = V1.model_dump(include={"steps"})["steps"]
    body[3]["id"] = "announce"
    diff = diff_plans(V1, V1.revised(steps=body))
    assert [s.id for s in diff.added] == ["announce"] and [s.id for s in diff.removed] == ["notify"]


def test_dropped_dependency_and_tool_change() -> None:
    body = V1.model_dump(include={"steps"})["steps"]
    body[2]["depends_on"] = []
    body[3]["tool"] = "sh"
    (smoke, notify) = diff_plans(V1, V1.revised(steps=body)).changed
    assert smoke.describe() == "after: −deploy"
    assert notify.describe() == "tool: log → sh"


def test_slack_new_version_message_shows_the_diff_within_limits() -> None:
    v2 = _v2()
    blocks = bk.plan_blocks(v2, Run.for_plan(v2, PlanTargets({})), Policy(), diff=diff_plans(V1, v2))
    assert check_limits("chat.postMessage", {"blocks": blocks}) == []
    text = blocks[2]["text"]["text"]
    assert text.startswith("*Changes since v1* (goal changed, 2 added, 1 removed, 2 changed)")
    assert "➕ `smoke_prod` sh script=curl -f /prod after smoke" in text
    assert "➖ `notify` log line=done" in text
    assert "✏️ `deploy` label: v2.3.1 → v2.3.2" in text
    assert "➕ rollback `page` log line=rolled" in text
    assert blocks[3]["type"] == "divider"
    assert any(b.get("type") == "actions" for b in blocks)  # the buttons are still there


def test_slack_diff_of_a_huge_change_is_trimmed() -> None:
    steps = [{"id": f"s{i:02d}", "tool": "sh", "params": {"script": "x" * 300}}
             for i in range(60)]
    big = make_plan(steps, goal="big")
    other = big.revised(steps=[{**s, "params": {"script": "y" * 300}} for s in steps])
    blocks = bk.plan_blocks(other, Run.for_plan(other, PlanTargets({})), Policy(), diff=diff_plans(big, other))
    assert check_limits("chat.postMessage", {"blocks": blocks}) == []
    assert "…and 35 more changes" in json.dumps(blocks, ensure_ascii=False)


def test_terminal_diff() -> None:
    console = Console(record=True, width=120, color_system=None)
    console.print(diff_text(diff_plans(V1, _v2())))
    out = console.export_text()
    assert "changes since v1 (goal changed, 2 added, 1 removed, 2 changed)" in out
    assert "  + smoke_prod  sh script=curl -f /prod after smoke" in out
    assert "  - notify  log line=done after smoke" in out
    assert "  ~ smoke  after: +build" in out
    assert "  + rollback page  log line=rolled" in out


def test_terminal_edit_shows_the_diff_before_approval(tmp_path: Path) -> None:
    services = build_services(make_config(tmp_path), Settings(), store=Store.connect(None))
    plan = make_plan([{"id": "a", "tool": "sh", "params": {"script": "echo a"}},
                      {"id": "b", "tool": "sh", "params": {"script": "echo b"},
                       "depends_on": ["a"]}])
    console = Console(record=True, width=120, color_system=None)
    flow = ConsoleFlow(services, console, user="ann",
                       editor=lambda text: text.replace("echo a", "echo A"))
    revised = flow.modify(plan)
    assert revised.version == 2
    out = console.export_text()
    assert "Plan updated to version 2." in out
    assert "changes since v1 (1 changed)" in out and "  ~ a  script: echo a → echo A" in out


def test_diff_says_when_another_prompt_or_model_made_the_new_version() -> None:
    planned = PlannerInfo(name="llm", model="m1", response_model="m1-2026", prompt="plan",
                          prompt_version="aaaaaaaaaaaa")
    first = V1.model_copy(update={"planner": planned})
    modified = _v2().model_copy(update={"planner": planned.model_copy(
        update={"prompt": "modify", "prompt_version": "bbbbbbbbbbbb"})})
    diff = diff_plans(first, modified)
    assert diff.lines()[0].text == ("made by: plan@aaaaaaaaaaaa · m1-2026 → "
                                    "modify@bbbbbbbbbbbb · m1-2026")
    assert diff.changes == len(diff.lines()) - 1
    edited = first.model_copy(update={"planner": planned.model_copy(
        update={"edited_by": "alice"})})
    assert diff_plans(first, edited).empty  # a hand edit keeps its version's maker
    by_playbook = diff_plans(V1, first)
    assert by_playbook.empty and by_playbook.lines()[0].text == (
        "made by: playbook → plan@aaaaaaaaaaaa · m1-2026")
