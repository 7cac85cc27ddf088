"""``rollout.judgment`` is checked strictly: each problem one line naming file, line, field."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.config import load_config
from bot.cli import main

CONFIG = """
inventory:
  hosts:
    a: {connection: local}
    b: {connection: local}
    c: {connection: local}
  environments:
    prod:
      hosts: [a, b, c]
      rollout: {batch_size: 1, judgment: JUDGMENT}
"""


def check(tmp_path: Path, judgment: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    path = tmp_path / "deckhand.yml"
    path.write_text(CONFIG.replace("JUDGMENT", judgment))
    code = main(["check", str(path)])
    return code, " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(("judgment", "said"), [
    ("{after_batches: [1], timeout: 30x}", "judgment.timeout: '30x' is not a duration"),
    ("{after_batches: [1], timeout: 0}", "is not a duration"),
    ("{after_batches: [1], on_timeout: maybe}", "judgment.on_timeout: Input should be"),
    ("{after_batches: [1], approver: [x]}", "judgment.approver: Extra inputs are not permitted"),
    ("{after_batches: [3]}", "after_batches.0: batch 3: prod rolls out in 3 batch(es) of 1 "
                             "over 3 host(s), so a go/no-go can follow batches 1 to 2 only"),
    ("{after_batches: [0]}", "batch numbers start at 1"),
    ("{after_batches: []}", "judgment.after_batches"),
])
def test_a_bad_judgment_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          judgment: str, said: str) -> None:
    code, out = check(tmp_path, judgment, capsys)
    assert code != 0 and said in out and "deckhand.yml:10" in out


def test_a_good_judgment_passes_and_reads_durations(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = check(tmp_path, "{after_batches: [2, 1], timeout: 2h, on_timeout: continue}",
                      capsys)
    assert code == 0, out
    rollout = load_config(tmp_path / "deckhand.yml").inventory.environments["prod"].rollout
    assert rollout.judgment is not None
    assert (rollout.judgment.after_batches, rollout.judgment.timeout) == ([1, 2], 7200.0)
