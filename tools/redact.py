"""The one redaction function every output passes through before it is stored, logged or posted."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

MASK = "[REDACTED]"

# (pattern, replacement): labels such as "password=" are kept, only the value is masked.
_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)",
                re.S), MASK),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{8,}"), MASK),        # Slack tokens
    (re.compile(r"\bxapp-[A-Za-z0-9-]{8,}"), MASK),                # Slack app-level tokens
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), MASK),                # OpenAI-style keys
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"), MASK),           # GitHub tokens
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), MASK),                   # AWS access key ids
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"), r"\1" + MASK),
    # A key starts at a token boundary and every repeat is bounded, so a long run of word
    # characters costs linear time (unbounded [\w.-]* on both sides was quadratic).
    (re.compile(r"(?i)((?<![\w.-])[\w.-]{0,64}?(?:password|passwd|secret|token|api[_-]?key)"
                r"[\w.-]{0,64}\s{0,8}[=:]\s{0,8})(?:\"[^\"]{0,4096}\"|'[^']{0,4096}'|\S+)"),
     r"\1" + MASK),
    (re.compile(r"(://[^/\s:@]{1,256}:)[^@\s/]{1,256}@"), r"\1" + MASK + "@"),  # user:pw@
]

# Per rule: literal text any match contains (one of them), and whether to look for it in
# the case-folded text (the (?i) rules). Text with none of a rule's clues skips that rule
# — most log lines skip them all, so output is redacted at wire speed.
_CLUES: list[tuple[tuple[str, ...], bool]] = [
    (("-----BEGIN",), False), (("xox",), False), (("xapp-",), False), (("sk-",), False),
    (("gh",), False), (("AKIA",), False), (("bearer",), True),
    (("passw", "secret", "token", "api_key", "api-key", "apikey"), True), (("://",), False),
]


def _fold(text: str) -> str:
    """``text`` as a (?i) pattern sees it: case-folded, and dotless ı as i (re's
    IGNORECASE matches "ı" with "i"; casefold keeps it apart)."""
    return text.casefold().replace("\u0131", "i")


# Environment variables whose values are secrets wherever they show up.
SECRET_ENV = ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET", "OPENAI_API_KEY",
              "REDIS_URL", "DECKHAND_SECRETS")


class Redactor:
    """Masks known secret values and anything shaped like a credential."""

    def __init__(self, secrets: Iterable[str] = ()):
        self._values = sorted({s for s in secrets if s and len(s) >= 6}, key=len, reverse=True)

    @classmethod
    def from_env(cls, extra: Iterable[str] = ()) -> Redactor:
        values = [os.environ.get(name, "") for name in SECRET_ENV]
        values += os.environ.get("DECKHAND_SECRETS", "").split(",")
        return cls([*values, *extra])

    def __call__(self, text: str) -> str:
        for value in self._values:
            text = text.replace(value, MASK)
        folded: str | None = None
        for (pattern, replacement), (clues, fold) in zip(_RULES, _CLUES, strict=True):
            if fold and folded is None:
                folded = _fold(text)
            haystack = folded if fold and folded is not None else text
            if not any(clue in haystack for clue in clues):
                continue  # no match is possible here
            redacted = pattern.sub(replacement, text)
            if redacted != text:
                text, folded = redacted, None
        return text


redact = Redactor.from_env()
"""Default redactor built from the process environment."""
