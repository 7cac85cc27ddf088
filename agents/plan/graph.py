"""Small DAG helpers over ``{node: [dependencies]}`` maps: cycles, layers, critical path."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def find_cycle(deps: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A cycle as a list of nodes (first repeated at the end), or None if there is none."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in deps.get(node, ()):
            if dep not in deps:
                continue
            if state.get(dep) == 1:
                return [*path[path.index(dep):], dep]
            if dep not in state and (found := visit(dep)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in deps:
        if node not in state and (found := visit(node)):
            return found
    return None


def layers(deps: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """Group nodes into layers: every node's dependencies are in earlier layers.

    Nodes in one layer can run in parallel. Order inside a layer follows ``deps``.
    """
    level: dict[str, int] = {}
    remaining = list(deps)
    while remaining:
        progressed = [n for n in remaining if all(d in level for d in deps[n] if d in deps)]
        if not progressed:
            raise ValueError("graph has a cycle")
        for node in progressed:
            level[node] = 1 + max((level[d] for d in deps[node] if d in deps), default=-1)
        remaining = [n for n in remaining if n not in level]
    out: list[list[str]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for node in deps:
        out[level[node]].append(node)
    return out


def ancestors(deps: Mapping[str, Sequence[str]], node: str) -> set[str]:
    """Every node ``node`` depends on, directly or not."""
    seen: set[str] = set()
    stack = list(deps.get(node, ()))
    while stack:
        dep = stack.pop()
        if dep not in seen:
            seen.add(dep)
            stack.extend(deps.get(dep, ()))
    return seen


def critical_path(deps: Mapping[str, Sequence[str]],
                  durations: Mapping[str, float]) -> tuple[list[str], float]:
    """The longest chain by summed duration, and that sum. Missing durations count as 0."""
    best: dict[str, tuple[float, list[str]]] = {}
    for layer in layers(deps):
        for node in layer:
            prior = max((best[d] for d in deps[node] if d in best), default=(0.0, []),
                        key=lambda item: item[0])
            best[node] = (prior[0] + durations.get(node, 0.0), [*prior[1], node])
    if not best:
        return [], 0.0
    total, path = max(best.values(), key=lambda item: item[0])
    return path, total
