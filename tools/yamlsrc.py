"""YAML loading that remembers the line of every node, so problems can name a location."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tools.errors import ConfigError, Problem

PathKey = tuple[str | int, ...]
LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser when PyYAML has it: the pure-Python one takes ~1 s on a 500-host
inventory, before the first connection (issue 31). Same safe constructor either way."""


@dataclass
class Located:
    """Parsed YAML data plus the line number of every mapping key and list item.

    ``problems`` lists duplicate mapping keys: YAML would silently keep the last one, so
    a tool or environment defined twice must be an error, reported with the others.
    """

    data: Any
    source: str
    lines: dict[PathKey, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    text_starts: dict[PathKey, int] = field(default_factory=dict)
    """The line where each scalar's text begins (the line after ``|`` for a block)."""

    def where(self, path: Iterable[str | int]) -> str:
        """``file:line path.to.node`` for the deepest known prefix of ``path``."""
        parts = tuple(path)
        for cut in range(len(parts), -1, -1):
            line = self.lines.get(parts[:cut])
            if line is not None:
                dotted = ".".join(str(p) for p in parts)
                return f"{self.source}:{line} {dotted}".rstrip()
        return self.source

    def where_in_text(self, path: Iterable[str | int], line: int) -> str:
        """``file:line path`` for line ``line`` (1-based) of the text at ``path``."""
        parts = tuple(path)
        start = self.text_starts.get(parts)
        if start is None:
            return self.where(parts)
        dotted = ".".join(str(p) for p in parts)
        return f"{self.source}:{start + line - 1} {dotted}"

    def under(self, root: PathKey) -> Located:
        """The node at ``root`` as a document of its own: its paths are relative to
        ``root``, its locations still the whole file's (``file:line root.path``). Duplicate
        keys stay the whole document's problems, reported once."""
        data, path = self.data, []
        part: str | int
        for key in root:  # ``lines`` name mapping keys as text; a YAML key may be 1
            if isinstance(data, list):
                data, part = data[int(key)], int(key)
            else:
                data, part = next((v, str(k)) for k, v in data.items() if str(k) == str(key))
            path.append(part)
        return _Under(data, self.source, self.lines, text_starts=self.text_starts,
                      root=tuple(path))


@dataclass
class _Under(Located):
    root: PathKey = ()

    def where(self, path: Iterable[str | int]) -> str:
        return super().where((*self.root, *path))

    def where_in_text(self, path: Iterable[str | int], line: int) -> str:
        return super().where_in_text((*self.root, *path), line)


def load_yaml(text: str, source: str) -> Located:
    """Parse ``text``; a syntax error becomes a ConfigError naming the line."""
    loader = LOADER(text)
    try:  # one parse: the node tree (with lines), then the data built from it
        node = loader.get_single_node()
        located = Located(data=None if node is None else loader.construct_document(node),
                          source=source)
        if node is not None:  # recursive too: libyaml parses what Python cannot walk
            _record_lines(node, (), located)
    except RecursionError as exc:
        raise ConfigError([Problem(source, "invalid YAML: nested too deeply")]) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc)
        if "nesting depth" in problem:  # libyaml's own limit (PyYAML >= 6.0.4): say it as ours
            problem = "nested too deeply"
        raise ConfigError([Problem(where, f"invalid YAML: {problem}")]) from exc
    finally:
        loader.dispose()
    return located


def load_yaml_file(path: Path) -> Located:
    """Read and parse a YAML file; a missing or unreadable file is a ConfigError."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([Problem(str(path), f"cannot read file: {exc.strerror}")]) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError([Problem(str(path), f"not a UTF-8 text file (byte {exc.start} "
                                              f"cannot be decoded)")]) from exc
    return load_yaml(text, str(path))


def _record_lines(node: yaml.Node, path: PathKey, out: Located) -> None:
    out.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.ScalarNode):
        out.text_starts[path] = node.start_mark.line + (2 if node.style in ("|", ">") else 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            child, line = (*path, key), key_node.start_mark.line + 1
            if key in seen and key_node.tag != "tag:yaml.org,2002:merge":
                dotted = ".".join(str(p) for p in child)
                out.problems.append(Problem(f"{out.source}:{line} {dotted}",
                                            f"duplicate key (first defined on line "
                                            f"{seen[key]}); YAML would keep only the last"))
                continue
            seen[key] = line
            out.lines[child] = line
            _record_lines(value_node, child, out)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _record_lines(item, (*path, index), out)
