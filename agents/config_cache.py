"""What loading an organisation of services remembers in its state directory, so 200
service files load and check within a second (docs/services.md section 4): each file's
parse, and which services passed ``check``'s playbook checks. Both are JSON keyed by the
sha256 of what they were made from (data, never a pickle): a changed file is a new key, so
nothing stale is ever used; anything unreadable is no memory (the work is done again), and
a state directory that cannot be written costs only time.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from contextlib import suppress
from pathlib import Path
from typing import Any

from tools.errors import Problem
from tools.yamlsrc import Located, load_yaml, load_yaml_file

CACHE_DIR = "config-cache"
"""Under the organisation's state directory: ``verdicts.json`` and ``parses.json``."""
FORMAT = 1
VERDICT_CODE = ("agents.config", "agents.plan.model", "agents.plan.validation",
                "agents.plan.targets", "agents.requests.playbooks", "agents.requests.phrasing",
                "agents.policy.rules", "tools.catalog", "tools.inventory")
"""The modules whose code decides a verdict: a change to any re-checks every service."""


def verdict_key(*contents: str) -> str:
    """The sha256 of ``contents`` and of the checking code itself (a release, or a change
    to a checking module, never trusts an older verdict)."""
    digest = hashlib.sha256(_checking_code())
    for part in contents:
        digest.update(len(part).to_bytes(8, "big") + part.encode())
    return digest.hexdigest()


_CODE: list[bytes] = []


def _checking_code() -> bytes:
    if not _CODE:
        digest = hashlib.sha256()
        for name in VERDICT_CODE:
            module = sys.modules.get(name)
            source = getattr(module, "__file__", None)
            digest.update(Path(source).read_bytes() if source else name.encode())
        _CODE.append(digest.digest())
    return _CODE[0]


class CheckVerdicts:
    """The services whose playbook checks passed, by ``verdict_key`` of everything they
    read; ``save`` keeps this load's passes only (a changed or removed service's go)."""

    def __init__(self, folder: Path):
        self.path = folder / "verdicts.json"
        data = _read_json(self.path)
        passed = data.get("passed") if isinstance(data, dict) \
            and data.get("format") == FORMAT else None
        self.known = {k for k in passed if isinstance(k, str)} if isinstance(passed, list) \
            else set()
        self.now: set[str] = set()

    def passed(self, key: str) -> bool:
        if key in self.known:
            self.now.add(key)
            return True
        return False

    def add(self, key: str) -> None:
        self.now.add(key)

    def save(self) -> bool:
        """False if the state directory cannot be written (the next check runs them all)."""
        if self.now == self.known and self.path.exists():
            return True
        return _write_json(self.path, {"format": FORMAT, "passed": sorted(self.now)})


class ParseCache:
    """YAML files as parsed (data, lines, duplicate-key problems), in one JSON file (one
    open, not one per file: a filesystem's opens were most of a first load), each entry
    under the sha256 of its file's path and bytes and kept as its own JSON text, so a save
    re-encodes only new parses. A parse whose data JSON cannot hold faithfully (a date, a
    non-string key) is not kept: that file is parsed every time."""

    def __init__(self, folder: Path):
        self.path = folder / "parses.json"
        self.known: dict[str, str] | None = None
        self.now: dict[str, str] = {}
        self.new = False

    def _known(self) -> dict[str, str]:
        if self.known is None:
            body = _read_json(self.path)
            entries = body.get("entries") if isinstance(body, dict) \
                and body.get("format") == FORMAT else None
            self.known = {k: v for k, v in entries.items() if isinstance(v, str)} \
                if isinstance(entries, dict) else {}
        return self.known

    def load(self, path: Path) -> Located:
        """``path`` parsed, as ``tools.yamlsrc.load_yaml_file`` would."""
        try:
            text = path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            return load_yaml_file(path)  # which says what is wrong with the file
        source = str(path)
        key = hashlib.sha256(f"{source}\0{text}".encode()).hexdigest()
        kept = self._known().get(key)
        try:
            found = _located(json.loads(kept), source) if kept is not None else None
        except ValueError:
            found = None
        if found is not None and kept is not None:
            self.now[key] = kept
            return found
        located = load_yaml(text, source)
        entry = _entry(located)
        if entry is not None:
            self.now[key], self.new = entry, True
        return located

    def save(self) -> bool:
        """Keep this load's parses only (an edited or removed file's go), if anything
        changed; False if the state directory cannot be written."""
        if not self.new and set(self.now) == set(self._known()):
            return True
        return _write_json(self.path, {"format": FORMAT, "entries": self.now})


def _entry(located: Located) -> str | None:
    """``located`` as JSON, or None if its data would not come back the same."""
    body = {"format": FORMAT, "source": located.source, "data": located.data,
            "lines": [[list(k), v] for k, v in located.lines.items()],
            "text_starts": [[list(k), v] for k, v in located.text_starts.items()],
            "problems": [[p.where, p.message] for p in located.problems]}
    try:
        text = json.dumps(body, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):  # a date, say
        return None
    return text if json.loads(text)["data"] == located.data else None  # e.g. an int key


def _located(body: Any, source: str) -> Located | None:
    if not isinstance(body, dict) or body.get("format") != FORMAT \
            or body.get("source") != source:
        return None
    try:
        return Located(data=body["data"], source=source,
                       lines={tuple(k): v for k, v in body["lines"]},
                       text_starts={tuple(k): v for k, v in body["text_starts"]},
                       problems=[Problem(w, m) for w, m in body["problems"]])
    except (KeyError, TypeError, ValueError):
        return None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _write_json(path: Path, body: dict[str, Any]) -> bool:
    with suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
    return _write_text(path, json.dumps(body, separators=(",", ":")))


def _write_text(path: Path, text: str) -> bool:
    temp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        temp.write_text(text, encoding="utf-8")
        os.replace(temp, path)  # never half a file, whatever stops us
    except OSError:
        with suppress(OSError):
            temp.unlink(missing_ok=True)
        return False
    return True
