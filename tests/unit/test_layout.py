"""The architecture stays visible in the imports: arrows one way, faces apart, no cycles."""

from __future__ import annotations

import ast
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
