"""Freeze windows: recurring and dated, in a time zone, across DST."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from agents.policy.freeze import FreezeWindow, frozen

WEEKEND = FreezeWindow(environments=["production"], reason="weekend", cron="0 18 * * fri",
                       hours=62, timezone="Europe/Berlin")


def _utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_weekend_freeze_in_its_own_zone_across_the_spring_dst_change() -> None:
    # Fri 2026-03-27 18:00 CET = 17:00 UTC; 62 h later is Mon 07:00 UTC (09:00 CEST)
    assert WEEKEND.active_until(_utc(2026, 3, 27, 16, 59)) is None
    assert WEEKEND.active_until(_utc(2026, 3, 27, 17, 0)) == _utc(2026, 3, 30, 7, 0)
    assert WEEKEND.active_until(_utc(2026, 3, 29, 12, 0)) == _utc(2026, 3, 30, 7, 0)
    assert WEEKEND.active_until(_utc(2026, 3, 30, 7, 0)) is None
    # in summer the same wall time is an hour earlier in UTC
    assert WEEKEND.active_until(_utc(2026, 7, 3, 16, 0)) == _utc(2026, 7, 6, 6, 0)


def test_dated_freeze_and_the_longest_block_wins() -> None:
    holidays = FreezeWindow(environments=["production", "staging"], reason="holidays",
                            start=datetime(2026, 12, 24), end=datetime(2027, 1, 2),
                            timezone="America/New_York")
    hit = frozen([WEEKEND, holidays], ["staging", "production"], _utc(2026, 12, 25, 18))
    assert hit is not None and hit.reason == "holidays"
    assert hit.until == _utc(2027, 1, 2, 5)  # midnight in New York
    assert "frozen until Sat 2027-01-02 05:00 UTC: holidays" in hit.describe()
    assert frozen([holidays], ["staging"], _utc(2027, 1, 2, 5)) is None


@pytest.mark.parametrize(("fields", "message"), [
    ({"cron": "0 18 * * fri"}, "either cron \\+ hours, or start \\+ end"),
    ({"start": "2026-12-24T00:00", "end": "2026-12-20T00:00"}, "end must be after start"),
    ({"cron": "0 18 * * fri", "hours": 2, "timezone": "Europe/Berln"}, "Europe/Berlin"),
    ({"cron": "61 18 * * fri", "hours": 2}, "higher than the maximum value"),
])
def test_bad_windows_are_config_errors(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        FreezeWindow.model_validate({"environments": ["production"], "reason": "r", **fields})
