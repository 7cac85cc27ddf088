"""The redactor's clues (a rule is skipped when none of its literals occurs) never change
what is masked: the same text as applying every rule, on credentials, case tricks and noise."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tools.redact import _RULES, Redactor

PIECES = ["password", "PASSWORD", "paſſword", "PAſſWD", "secret", "ToKeN", "apı_key", "Api-Key",
          "bearer ", "BEARER\t", "xoxb-", "xapp-", "sk-", "ghp_", "AKIA", "-----BEGIN ",
          "RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----", "://", "user:", "@", "=",
          ": ", "\"", "'", "\n", " ", "x" * 20, "A1B2C3D4E5F6G7H8", "abcdefghijklmnop", "é",
          "K", "ı", "İ", "ß", "[REDACTED]"]


def _every_rule(text: str) -> str:
    for _cues, pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=12).map("".join))
def test_clues_mask_exactly_what_every_rule_masks(text: str) -> None:
    assert Redactor()(text) == _every_rule(text)


def test_a_log_line_with_no_clue_is_left_as_it_is() -> None:
    line = "2026-11-25T13:00:00Z INFO request handled path=/api/v1/items status=200"
    assert Redactor()(line) == line
    assert Redactor()("PASSWORD: hunter2 and paſſword=x") == _every_rule(
        "PASSWORD: hunter2 and paſſword=x")
