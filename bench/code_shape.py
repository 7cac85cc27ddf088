"""The shape of the code: function lengths, modules per package, import arrows between
sub-packages — for one checkout, or two side by side (e.g. before and after a refactor).

    python -m bench.code_shape [ROOT [OTHER_ROOT]]
"""

from __future__ import annotations

import ast
import statistics
import sys
from collections import Counter
from pathlib import Path

PACKAGES = ("bot", "agents", "tools")


def _package(root: Path, module: str) -> str:
    """The sub-package a module belongs to (``bot.slack``), or its top package."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 and (root / parts[0] / parts[1]).is_dir() \
        else parts[0]


def shape(root: Path) -> dict[str, object]:
    lengths: list[int] = []
    modules: Counter[str] = Counter()
    arrows: set[tuple[str, str]] = set()
    for top in PACKAGES:
        for path in (root / top).rglob("*.py"):
            name = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
            source = path.read_text()
            if path.name != "__init__.py" or source.strip():
                modules[_package(root, name)] += 1
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lengths.append((node.end_lineno or node.lineno) - node.lineno + 1)
                if isinstance(node, ast.ImportFrom) and node.module \
                        and node.module.split(".")[0] in PACKAGES:
                    a, b = _package(root, name), _package(root, node.module)
                    if a != b:
                        arrows.add((a, b))
    lengths.sort()
    return {"functions": len(lengths), "median": statistics.median(lengths),
            "p90": lengths[int(len(lengths) * 0.9)], "max": lengths[-1],
            "modules": dict(sorted(modules.items())), "arrows": sorted(arrows)}


def main() -> None:
    for root in [Path(p) for p in sys.argv[1:]] or [Path(".")]:
        found = shape(root)
        print(f"{root}: {found['functions']} functions, median {found['median']}, "
              f"p90 {found['p90']}, max {found['max']} lines")
        print(f"  modules per package: {found['modules']}")
        print("  arrows: " + ", ".join(f"{a}→{b}" for a, b in found["arrows"]))  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
