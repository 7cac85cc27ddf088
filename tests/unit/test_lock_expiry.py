"""``--for`` and ``--until`` of a lock by hand (agents.engine.manual_locking.parse_expiry)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agents.engine.manual_locking import parse_expiry
from agents.errors import ManualLockRefused

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(("given", "seconds"), [("30m", 1800), ("2h", 7200), ("1h30m", 5400),
                                                ("1d", 86_400), (" 1h 5m ", 3900),
                                                ("1w", 604_800), ("90s", 90)])
def test_durations(given: str, seconds: int) -> None:
    assert parse_expiry(for_=given, until=None, now=NOW) == NOW + seconds


def test_until_is_utc_unless_it_says() -> None:
    at = datetime(2026, 12, 1, 18, tzinfo=UTC).timestamp()
    assert parse_expiry(for_=None, until="2026-12-01T18:00Z", now=NOW) == at
    assert parse_expiry(for_=None, until="2026-12-01T18:00", now=NOW) == at
    assert parse_expiry(for_=None, until="2026-12-01T19:00+01:00", now=NOW) == at
    assert parse_expiry(for_=None, until=None, now=NOW) is None


@pytest.mark.parametrize(("for_", "until", "problem"), [
    ("2h", "2026-12-01T18:00Z", "not both"), ("soon", None, "'soon' is not a duration"),
    ("0m", None, "longer than 0"), ("2 hours", None, "not a duration"), ("h", None,
                                                                          "not a duration"),
    (None, "tomorrow", "'tomorrow' is not a time")])
def test_bad_expiries_say_what_to_write(for_: str | None, until: str | None, problem: str
                                        ) -> None:
    with pytest.raises(ManualLockRefused, match=problem):
        parse_expiry(for_=for_, until=until, now=NOW)
