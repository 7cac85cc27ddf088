"""The retention archive: ages as typed, appends that survive a torn last line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.engine.retention import Archive, parse_age
from agents.errors import RetentionError


@pytest.mark.parametrize(("text", "seconds"), [("90d", 90 * 86400.0), ("90", 90 * 86400.0),
                                               ("36h", 36 * 3600.0), ("2w", 14 * 86400.0)])
def test_ages(text: str, seconds: float) -> None:
    assert parse_age(text) == seconds


@pytest.mark.parametrize("text", ["", "0d", "90 days", "-1d", "1y"])
def test_bad_ages_are_refused(text: str) -> None:
    with pytest.raises(RetentionError, match="give an age like 90d"):
        parse_age(text)


def test_a_torn_last_line_is_closed_off_before_appending(tmp_path: Path) -> None:
    path = tmp_path / "archive.jsonl"
    path.write_bytes(b'{"kind":"run","id":"run-1"}\n{"kind":"ru')  # a crash mid-write
    archive = Archive(path)
    archive.open()
    archive.append([{"kind": "audit", "id": "aud-1"}])
    archive.close()
    lines = path.read_text().splitlines()
    assert json.loads(lines[-1]) == {"kind": "audit", "id": "aud-1"}
    assert lines[1] == '{"kind":"ru'  # left as it was, never merged into


def test_a_new_archive_is_private(tmp_path: Path) -> None:
    archive = Archive(tmp_path / "new.jsonl")
    archive.open()
    archive.append([{"kind": "audit", "id": "aud-1"}])
    archive.close()
    assert (tmp_path / "new.jsonl").stat().st_mode & 0o777 == 0o600
    assert archive.lines == 1
