"""CI runs the README's test command where the README says: a fresh venv with `.[dev]`."""

from __future__ import annotations

import ast
import importlib.util
import re
import socket
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from bot.cli.demo import copy_examples

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_PORTS = {18181, 18281, 18282}


def test_ci_installs_dev_into_a_fresh_venv_and_runs_the_readme_command_there() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    command = re.search(r"### Running the tests.*?```sh\n(.+?)\n```", readme, re.S)
    assert command is not None
    steps = [line.strip() for line in script.splitlines() if line.strip()
             and not line.lstrip().startswith("#")]
    order = [_index(steps, "rm -rf .venv"), _index(steps, "python3 -m venv .venv"),
             _index(steps, ". .venv/bin/activate"), _index(steps, "-e '.[dev]'"),
             steps.index(command.group(1))]
    assert order == sorted(order), "venv, activate, install .[dev], then the README command"
    assert ".venv/" in (ROOT / ".gitignore").read_text().splitlines()


def test_every_package_the_tests_import_comes_with_the_dev_extra() -> None:
    """A module imported by tests/ or bench/ but installed by neither the dependencies nor
    [dev] (pexpect was one) stops collection in a fresh venv: 0 tests run."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    roots = project["dependencies"] + project["optional-dependencies"]["dev"]
    installed = _closure([Requirement(r).name for r in roots])
    owners = metadata.packages_distributions()
    missing = {}
    for module in _third_party_imports():
        dists = {_norm(d) for d in owners.get(module, [])}
        if not dists & installed:
            missing[module] = sorted(dists) or ["?"]
    assert not missing, f"imported by tests but not in [dev]: {missing}"


def test_a_sample_copy_takes_free_ports_even_when_the_sample_ports_are_held() -> None:
    held = []
    for port in SAMPLE_PORTS:
        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", port))
            held.append(sock)
        except OSError:
            sock.close()  # someone else holds it: the same situation
    try:
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            text = copy_examples(Path(tmp) / "s").read_text()
    finally:
        for sock in held:
            sock.close()
    ports = {int(p) for p in re.findall(r"^[^#\n]*\bport: (\d+)", text, re.M)}
    assert len(ports) == 3 and not ports & SAMPLE_PORTS


def _index(steps: list[str], needle: str) -> int:
    return next(i for i, step in enumerate(steps) if needle in step)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(names: list[str]) -> set[str]:
    """deploy/lock.py's closure (the lock file and this test read requirements alike)."""
    spec = importlib.util.spec_from_file_location("deploy_lock", ROOT / "deploy" / "lock.py")
    assert spec is not None and spec.loader is not None
    lock = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lock)
    return set(lock.closure(names))


def _module_level(tree: ast.Module) -> list[ast.stmt]:
    """Statements run when the module is imported (collection): top level, and inside a
    top-level if/try. An import inside a function runs only when it is called (the opt-in
    real-model server imports its packages so)."""
    out: list[ast.stmt] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        out.append(node)
        if isinstance(node, ast.If | ast.Try):
            pending += [*node.body, *node.orelse, *getattr(node, "finalbody", [])]
            pending += [s for h in getattr(node, "handlers", []) for s in h.body]
    return out


def _third_party_imports() -> set[str]:
    local = {"agents", "bot", "tools", "tests", "bench"}
    found: set[str] = set()
    for path in [*(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]:
        for node in _module_level(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    return {name for name in found if name not in stdlib and name not in local}
