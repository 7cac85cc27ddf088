"""Record ids: time-ordered and collision-free, shown short, found by any unique prefix.

An id is ``KIND-`` and 26 Crockford base32 characters (lower case), ULID-style: 48 bits of
milliseconds since the epoch, then 80 random bits. Sorting ids sorts by creation, and two
ids collide only if 80 random bits repeat in the same millisecond. People see
:func:`short_id` (the millisecond and 10 random bits); commands accept any unique prefix,
with or without ``KIND-``. Ids written before this format (``run-1a2b3c4d``) still load.
"""

from __future__ import annotations

import hashlib
import secrets
import time

ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
"""Crockford's base32: no i, l, o or u, so ids read aloud and typed survive."""
TIME_CHARS = 10
RANDOM_CHARS = 16
SHORT_CHARS = 12
"""Body characters shown: the millisecond, plus two random characters."""


def new_id(kind: str, *, now: float | None = None) -> str:
    """A fresh id such as ``run-01jd3xq4k7m2v9d8e5t0b6c1na``."""
    millis = int((time.time() if now is None else now) * 1000)
    return f"{kind}-{_base32(millis, TIME_CHARS)}{_base32(secrets.randbits(80), RANDOM_CHARS)}"


def derived_id(kind: str, key: str, *, at: float) -> str:
    """The id one idempotency ``key`` always gets (time part ``at``), in the same format:
    two replicas handling the same thing create the same record, never two."""
    digest = int.from_bytes(hashlib.sha256(key.encode()).digest()[:10], "big")
    return f"{kind}-{_base32(int(at * 1000), TIME_CHARS)}{_base32(digest, RANDOM_CHARS)}"


def short_id(record_id: str) -> str:
    """What people see: ``run-01jd3xq4k7m2``; old short ids are shown whole."""
    kind, sep, body = record_id.partition("-")
    return f"{kind}{sep}{body[:SHORT_CHARS]}" if sep else record_id[:SHORT_CHARS]


def normalize(kind: str, typed: str) -> str:
    """A typed id or prefix in stored form: trimmed, lower case, ``KIND-`` in front.

    Ellipses a user copied along with a short id are dropped.
    """
    text = typed.strip().rstrip("…").rstrip(".").lower()
    return text if text.startswith(f"{kind}-") else f"{kind}-{text}"


def _base32(value: int, width: int) -> str:
    chars = []
    for _ in range(width):
        value, digit = divmod(value, 32)
        chars.append(ALPHABET[digit])
    return "".join(reversed(chars))
