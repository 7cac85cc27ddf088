"""Layout figures of agents/ (not a speed bench): top-level modules, modules per sub-package,
floors of the unit-level import graph, arrows between units and two-way pairs, and the
store: public methods of the connection and of each noun it hands out, the modules handed
the whole Store (and which nouns they reach for), those handed parts (typed by the nouns'
classes), and those that open a connection. A unit is a sub-package or a top-level module;
issue 28's before/after figures come from this.

Run: python -m bench.layout [ROOT]    (ROOT: a checkout, e.g. ``git archive 41178ad^``)
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
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


def _reachable(arrows: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(arrows[start])
    while todo:
        unit = todo.pop()
        if unit not in seen:
            seen.add(unit)
            todo += arrows[unit]
    return seen


def _floors(units: set[str], arrows: dict[str, set[str]]) -> dict[str, int]:
    """Each unit's floor: 0 imports no other unit, n imports one on floor n-1. Units in a
    cycle share one floor (the cycle is one unit), so the figure does not depend on order."""
    reach = {u: _reachable(arrows, u) for u in units}
    cycle = {u: frozenset({u} | {v for v in reach[u] if u in reach[v]}) for u in units}
    memo: dict[frozenset[str], int] = {}

    def floor(group: frozenset[str]) -> int:
        if group not in memo:
            below = {cycle[d] for u in group for d in arrows[u]} - {group}
            memo[group] = 1 + max((floor(g) for g in below), default=-1)
        return memo[group]

    return {u: floor(cycle[u]) for u in units}


def main(root: Path) -> None:
    files = {_module(root, f): f for f in (root / "agents").rglob("*.py")}
    arrows: dict[str, set[str]] = defaultdict(set)
    for module, path in files.items():
        for dep in _imports(path, set(files)):
            if _unit(root, dep) != _unit(root, module):
                arrows[_unit(root, module)].add(_unit(root, dep))
    units = {_unit(root, m) for m in files}
    floors = _floors(units, arrows)
    packages = Counter(_unit(root, m) for m in files
                       if m.count(".") >= 1 and (root / "agents" / m.split(".")[1]).is_dir())
    pairs = {tuple(sorted((a, b))) for a in arrows for b in arrows[a] if a in arrows[b]}
    print("top-level modules:", len([u for u in units if u not in packages and u != "agents"]))
    print("modules per sub-package:", dict(sorted(packages.items())))
    print("floors:", max(floors.values()) + 1, " arrows between units:",
          sum(len(v) for v in arrows.values()), " two-way pairs:", sorted(pairs))
    for number in range(max(floors.values()) + 1):
        print(f"  floor {number}:", sorted(u for u in units if floors[u] == number))
    between = sorted(f"{a}→{b}" for a in arrows for b in arrows[a]
                     if a in packages and b in packages)
    print(f"arrows between sub-packages: {len(between)}", " ".join(between))
    store_parts(root)


def _public(cls: type, skip: tuple[type, ...] = ()) -> list[str]:
    """Public methods (not properties, not classmethod constructors) ``cls`` has from
    agents.store, leaving out those of ``skip``."""
    owners = [c for c in cls.__mro__ if c.__module__.startswith("agents.store") and c not in skip]
    return sorted({n for c in owners for n, v in vars(c).items() if not n.startswith("_")
                   and (inspect.isfunction(v) or isinstance(v, staticmethod))})


def store_parts(root: Path) -> None:
    """The store as its callers see it: an object of methods, or a connection and nouns."""
    sys.path.insert(0, str(root))
    store_module = importlib.import_module("agents.store")
    store = store_module.Store.connect(None)
    base = importlib.import_module("agents.store._redis")
    part: type | None = getattr(base, "Part", None)  # None before the nouns
    nouns = {n: type(v) for n, v in vars(store).items()
             if part is not None and isinstance(v, part)}
    mixins = [c.__name__ for c in type(store).__mro__[1:]
              if c.__module__.startswith("agents.store")]
    print(f"Store: {len(_public(type(store)))} public methods; bases: {', '.join(mixins)}")
    if part is not None:
        print(f"  every noun also forwards {len(_public(part))} of the connection's "
              f"(Part: {', '.join(_public(part))})")
    skip: tuple[type, ...] = (part,) if part is not None else ()
    for name, cls in nouns.items():
        print(f"  store.{name} ({cls.__name__}): {len(_public(cls, skip))}")
    seen = _store_users(root, {cls.__name__: name for name, cls in nouns.items()})
    whole = {m: u for m, u in seen.items() if u.whole}
    print(f"modules handed the whole Store: {len(whole)}  (nouns each reaches for)")
    for module, use in sorted(whole.items()):
        print(f"  {module}: {' '.join(sorted(use.reached)) or '-'}")
    parted = {m: u for m, u in seen.items() if u.parts}
    print(f"modules handed parts: {len(parted)}")
    for module, use in sorted(parted.items()):
        print(f"  {module}: {' '.join(sorted(use.parts))}")
    opening = sorted(m for m, u in seen.items() if u.opens)
    print(f"modules that open a connection (Store.connect: commands, the wiring): "
          f"{len(opening)} {' '.join(opening)}")
    via = sorted(m for m, u in seen.items() if u.via_services)
    print(f"modules reaching nouns through services.store: {len(via)}")


class _Use:
    """How one module meets the store: a parameter or field typed ``Store`` (whole), ones
    typed by a noun's class (parts), a ``Store.connect`` call (opens), and the nouns it
    names as ``store.NOUN`` (reached)."""

    def __init__(self, tree: ast.Module, text: str, classes: dict[str, str]) -> None:
        typed = _annotation_names(tree)
        self.whole = "Store" in typed and _imports_store(tree)
        self.parts = {classes[n] for n in typed if n in classes}
        self.opens = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                         and n.func.attr == "connect" and isinstance(n.func.value, ast.Name)
                         and n.func.value.id == "Store" for n in ast.walk(tree))
        self.reached = set(re.findall(r"store\.(\w+)", text)) & set(classes.values())
        self.via_services = "services.store." in text


def _annotation_names(tree: ast.Module) -> set[str]:
    """Names used in the module's parameter, return and field annotations."""
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            found += [x.annotation for x in (*a.posonlyargs, *a.args, *a.kwonlyargs,
                                             *filter(None, (a.vararg, a.kwarg)))
                      if x.annotation is not None]
            found += [node.returns] if node.returns is not None else []
        elif isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
    names: set[str] = set()
    for annotation in found:
        for n in ast.walk(annotation):
            if isinstance(n, ast.Name):
                names.add(n.id)
            elif isinstance(n, ast.Constant) and isinstance(n.value, str):  # "Store"
                names |= set(re.findall(r"\w+", n.value))
    return names


def _imports_store(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.ImportFrom) and n.module == "agents.store"
               and "Store" in {a.name for a in n.names} for n in ast.walk(tree))


def _store_users(root: Path, classes: dict[str, str]) -> dict[str, _Use]:
    """Modules outside agents/store that meet the store, and how."""
    found: dict[str, _Use] = {}
    for top in ("agents", "bot", "tools"):
        for path in (root / top).rglob("*.py"):
            if path.is_relative_to(root / "agents" / "store"):
                continue
            text = path.read_text()
            use = _Use(ast.parse(text), text, classes)
            if use.whole or use.parts or use.opens or use.via_services:
                found[_module(root, path)] = use
    return found


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve())
