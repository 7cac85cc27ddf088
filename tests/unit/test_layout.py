"""The architecture stays visible in the imports: arrows one way, faces apart, no cycles."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("bot", "agents", "tools")


def _module(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in the file (lazy imports count too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def _graph() -> dict[str, set[str]]:
    files = [f for top in PACKAGES for f in (ROOT / top).rglob("*.py")]
    return {_module(f): _imports(f) for f in files}


def _importers(prefixes: tuple[str, ...]) -> set[str]:
    return {m for m, deps in _graph().items()
            if any(d == p or d.startswith(p + ".") for d in deps for p in prefixes)}


def test_arrows_point_from_bot_to_agents_to_tools() -> None:
    assert not {m for m in _importers(("bot",)) if not m.startswith("bot")}
    assert not {m for m in _importers(("agents",)) if m.startswith("tools")}


def test_only_bot_slack_talks_to_slack() -> None:
    outside = {m for m in _importers(("slack_bolt", "slack_sdk")) if not m.startswith("bot.slack")}
    assert not outside


def test_slack_code_never_loads_the_terminal() -> None:
    slack = {m for m in _importers(("bot.terminal", "rich")) if m.startswith("bot.slack")}
    assert not slack


def test_no_import_cycles() -> None:
    graph = _graph()
    local = {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(local[module]):
            assert state.get(dep) != 1, "import cycle: " + " → ".join([*path, module, dep])
            if dep not in state:
                visit(dep, [*path, module])
        state[module] = 2

    for module in sorted(local):
        if module not in state:
            visit(module, [])


def test_only_bot_mcp_speaks_mcp_or_runs_an_event_loop() -> None:
    """deckhand is sync with threads; the MCP face alone bridges to asyncio."""
    outside = {m for m in _importers(("mcp", "anyio", "asyncio")) if not m.startswith("bot.mcp")}
    assert not outside


# agents/ by floor, bottom first: a unit imports only units on its own floor or below, so no
# import runs back up a layer (e.g. run/ never imports engine/, plan/ never imports policy/).
AGENT_FLOORS = (
    ("errors", "faces", "ids", "logcontext", "tracing", "prompts", "readiness", "secret_files",
     "state_dir", "config_cache"),
    ("plan", "schedules", "settings"),
    ("run", "requests"),
    ("history", "policy"),
    ("config", "store"),
    ("planning",),
    ("org",),
    ("evaluation", "services"),
    ("engine",),
)


def _unit(module: str) -> str | None:
    """The agents/ unit (sub-package or top-level module) a module belongs to."""
    parts = module.split(".")
    return parts[1] if parts[0] == "agents" and len(parts) > 1 else None


def test_agents_floors_name_every_unit() -> None:
    named = {u for floor in AGENT_FLOORS for u in floor}
    units = {_unit(m) for m in _graph() if _unit(m)}
    assert units == named, f"unplaced: {units - named}, gone: {named - units}"


def test_no_import_runs_back_up_a_floor() -> None:
    floor = {u: i for i, units in enumerate(AGENT_FLOORS) for u in units}
    graph = _graph()
    upward = sorted(f"{m} → {d}" for m, deps in graph.items() if _unit(m)
                    for d in deps if d in graph and _unit(d)
                    and floor[_unit(d) or ""] > floor[_unit(m) or ""])
    assert not upward, "imports up a floor:\n" + "\n".join(upward)


def test_same_floor_units_stay_apart() -> None:
    """Units on one floor never import each other (they would be two floors)."""
    floor = {u: i for i, units in enumerate(AGENT_FLOORS) for u in units}
    graph = _graph()
    sideways = sorted(f"{m} → {d}" for m, deps in graph.items() if _unit(m)
                      for d in deps if d in graph and _unit(d) not in (None, _unit(m))
                      and floor[_unit(d) or ""] == floor[_unit(m) or ""]
                      and _unit(d) not in ("errors", "ids", "logcontext", "tracing"))
    assert not sideways, "imports within a floor:\n" + "\n".join(sideways)


# docs/contribute.md's "Where to find things" names every module under its package, agents/ by floor.
MAPPED_AS_A_WHOLE = ("bot/cli", "bot/slack/listeners")  # one module per command group / surface
_FILE = re.compile(r"(?<![\w/.])(\w+\.py)\b")


def _readme_map() -> list[tuple[str, str]]:
    """(package, line) for each line of the module map: a package heading (``agents/``
    at column 0, ``  plan/`` at column 2) opens a package; a module line at column 2 goes
    back to the top package; continuation lines belong to what they continue."""
    block = (ROOT / "docs" / "contribute.md").read_text().split("Where to find things:", 1)[1]
    lines, top, package = block.split("```")[1].splitlines()[1:], "", ""
    out = []
    for line in lines:
        indent, head = len(line) - len(line.lstrip()), (line.split() or [""])[0]
        if indent == 0:
            top = package = head.rstrip("/")
        elif indent == 2:
            package = f"{top}/{head.rstrip('/')}" if head.endswith("/") else top
        out.append((package, line))
    return out


def test_readme_maps_every_module_and_no_other() -> None:
    named: dict[str, set[str]] = {}
    for package, line in _readme_map():
        named.setdefault(package, set()).update(_FILE.findall(line))
    files = {(str(f.parent.relative_to(ROOT)), f.name) for top in PACKAGES
             for f in (ROOT / top).rglob("*.py") if f.name not in ("__init__.py", "__main__.py")
             and not str(f.parent.relative_to(ROOT)).startswith(MAPPED_AS_A_WHOLE)}
    mapped = {(package, name) for package, names in named.items() for name in names}
    assert not files - mapped, f"modules the map (docs/contribute.md) leaves out: {sorted(files - mapped)}"
    assert not mapped - files, f"the map (docs/contribute.md) maps modules that are not there: {sorted(mapped - files)}"


def test_readme_lists_agents_by_floor_bottom_first() -> None:
    floor = {u: i for i, units in enumerate(AGENT_FLOORS) for u in units}
    order: list[str] = []
    for package, line in _readme_map():
        found = [package.split("/")[1]] if package.startswith("agents/") else [
            name.removesuffix(".py") for name in _FILE.findall(line)] if package == "agents" else []
        order += [u for u in found if u in floor and u not in order]
    assert set(order) == set(floor), f"not in the map: {set(floor) - set(order)}"
    floors = [floor[u] for u in order]
    assert floors == sorted(floors), f"the map's agents/ order is not by floor: {order}"


WHOLE_STORE = {
    "agents.services": "wires the one connection and hands its nouns out",
    "agents.engine.worker": "a run's life: queue, lease, locks, plan, run, audit, judgments",
    "agents.engine.occurrences": "six nouns in turn; run, audit and queue in one EXEC",
    "agents.engine.retention": "one pass over everything that ages, against one clock",
    "bot.slack.bot": "the Slack face: a run's approval life and its listeners' reads",
}
"""The modules still handed the whole Store (issue 28), each with why; the others receive
only the nouns they use (``runs: Runs``, ``audit: AuditLog`` …)."""


def _typed(tree: ast.Module) -> set[str]:
    """Names in the module's parameter, return and field annotations."""
    annotations: list[ast.expr | None] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            annotations += [x.annotation for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
            annotations.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
    return {n.id for x in annotations if x is not None for n in ast.walk(x)
            if isinstance(n, ast.Name)}


def test_only_the_modules_that_compose_many_nouns_are_handed_the_whole_store() -> None:
    handed = {_module(f) for top in PACKAGES for f in (ROOT / top).rglob("*.py")
              if not f.is_relative_to(ROOT / "agents" / "store")
              and "Store" in _typed(ast.parse(f.read_text()))}
    unexplained, gone = sorted(handed - set(WHOLE_STORE)), sorted(set(WHOLE_STORE) - handed)
    assert not unexplained and not gone, (
        f"handed the whole Store without a reason in WHOLE_STORE: {unexplained}; "
        f"listed there but no longer handed it: {gone}")


RUN_VERBS = {"runs": {"create", "create_once", "approve", "revise", "transition", "update",
                      "request_cancel", "request_pause", "request_resume"},
             "judgments": {"decide", "settle"}}
"""The store's verbs that change a run's approval state (or its holds): the desk's alone."""
DESK_CALLERS = ("bot", "agents.engine.occurrences")
"""The faces, and the scheduler's occurrences: they call ``agents.engine.desk``."""


def _verb_calls(tree: ast.Module) -> set[str]:
    """``runs.approve(...)``, ``store.runs.create(...)``, ``judgments.decide(...)`` …"""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            noun = owner.attr if isinstance(owner, ast.Attribute) else \
                owner.id if isinstance(owner, ast.Name) else None
            if node.func.attr in RUN_VERBS.get(noun or "", ()):
                found.add(f"{noun}.{node.func.attr}")
    return found


def test_only_the_desk_changes_a_runs_approval_state() -> None:
    """Every face (and unattended schedules) go through ``agents.engine.desk``: none calls
    the store's run verbs, nor the control door, nor a copy of the approval check."""
    files = [f for top in PACKAGES for f in (ROOT / top).rglob("*.py")
             if _module(f).startswith(DESK_CALLERS)]
    reached = sorted(f"{_module(f)}: {', '.join(sorted(calls))}" for f in files
                     if (calls := _verb_calls(ast.parse(f.read_text()))))
    assert not reached, "run verbs called around the desk:\n" + "\n".join(reached)
    around = sorted(m for m, deps in _graph().items() if m.startswith(DESK_CALLERS)
                    and deps & {"agents.engine.control.steer", "agents.store.runs"})
    assert not around, f"the control door or the run noun reached directly: {around}"
