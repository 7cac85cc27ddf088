"""Output handling stays linear and bounded whatever the output looks like."""

from __future__ import annotations

import time

import pytest

from tools.redact import MASK, Redactor
from tools.runners.base import MAX_LINE, OutputCollector


@pytest.mark.parametrize("line", [
    "a" * 262_144,                                  # one long word: was quadratic
    "password" * 32_768,                            # the key word repeated
    "x=" + "token-" * 40_000,                       # a long token-looking value
    "://" + "u" * 100_000 + ":" + "p" * 100_000,    # a URL-ish run with no '@'
])
def test_redaction_of_a_huge_line_takes_linear_time(line: str) -> None:
    started = time.perf_counter()
    Redactor(["not-in-there-123"])(line)
    # quadratic behaviour on 256 KB is minutes; linear is milliseconds (a 100x margin)
    assert time.perf_counter() - started < 5.0


@pytest.mark.parametrize(("text", "kept"), [
    ("db_password=hunter2 next", "db_password="),
    ('API_KEY: "abc def"', "API_KEY: "),
    ("export GITHUB_TOKEN=ghp_0123456789abcdefghijABCDEFGHIJ", "GITHUB_TOKEN="),
    ("https://bob:s3cret@example.invalid/x", "https://bob:"),
])
def test_credentials_are_still_masked(text: str, kept: str) -> None:
    out = Redactor()(text)
    assert kept in out and MASK in out
    assert not any(s in out for s in ("hunter2", "abc def", "ghp_0123", "s3cret"))


def test_a_line_without_end_reaches_the_sink_in_bounded_pieces() -> None:
    got: list[str] = []
    collector = OutputCollector(got.append)
    for _ in range(256):  # 1 MB, never a newline
        collector.feed(b"z" * 4096)
    assert len("".join(got)) >= 1_048_576 - MAX_LINE  # passed on, not held
    collector.feed(b"\nlast line\n")
    collector.close()
    assert all(len(piece) <= MAX_LINE for piece in got)
    assert "".join(got[:-1]) == "z" * 1_048_576 and got[-1] == "last line"


def test_a_character_split_across_chunks_decodes_whole() -> None:
    got: list[str] = []
    collector = OutputCollector(got.append)
    data = "déploiement réussi ✓\n".encode()
    for index in range(len(data)):
        collector.feed(data[index:index + 1])
    assert got == ["déploiement réussi ✓"]
