"""Layout figures of agents/ (not a speed bench): top-level modules, modules per sub-package,
floors of the unit-level import graph, arrows between units and two-way pairs. A unit is a
sub-package or a top-level module; issue 28's before/after figures come from this.

Run: python -m bench.layout [ROOT]
"""

from __future__ import annotations

import ast
import sys
from collections import Counter, defaultdict
from pathlib import Path


def _module(root: Path, path: Path) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def _imports(path: Path, known: set[str]) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found & known


def _unit(root: Path, module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (root / "agents" / parts[1]).is_dir() else \
        (parts[1] if len(parts) > 1 else "agents")


def main(root: Path) -> None:
    files = {_module(root, f): f for f in (root / "agents").rglob("*.py")}
    arrows: dict[str, set[str]] = defaultdict(set)
    for module, path in files.items():
        for dep in _imports(path, set(files)):
            if _unit(root, dep) != _unit(root, module):
                arrows[_unit(root, module)].add(_unit(root, dep))
    units = {_unit(root, m) for m in files}
    floors: dict[str, int] = {}

    def floor(unit: str, seen: tuple[str, ...] = ()) -> int:
        if unit not in floors:
            floors[unit] = 0  # a cycle counts once
            below = [floor(d, (*seen, unit)) for d in arrows[unit] if d not in seen]
            floors[unit] = 1 + max(below, default=-1)
        return floors[unit]

    for unit in units:
        floor(unit)
    packages = Counter(_unit(root, m) for m in files
                       if m.count(".") >= 1 and (root / "agents" / m.split(".")[1]).is_dir())
    pairs = {tuple(sorted((a, b))) for a in arrows for b in arrows[a] if a in arrows[b]}
    print("top-level modules:", len([u for u in units if u not in packages and u != "agents"]))
    print("modules per sub-package:", dict(sorted(packages.items())))
    print("floors:", max(floors.values()) + 1, " arrows between units:",
          sum(len(v) for v in arrows.values()), " two-way pairs:", sorted(pairs))
    for number in range(max(floors.values()) + 1):
        print(f"  floor {number}:", sorted(u for u in units if floors[u] == number))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve())
