"""Schedule specs, standard cron semantics, time zones, DST and the missed-occurrence policy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from agents.errors import ScheduleError
from agents.schedules.model import Schedule, cron_rule, spec_to_cron, split_spec, zone_named

BERLIN = ZoneInfo("Europe/Berlin")


def fires(expr: str, start: datetime, count: int, zone: ZoneInfo = BERLIN) -> list[str]:
    """The next ``count`` fire times after ``start``, as local wall times with zone names."""
    out, at = [], start
    rule = cron_rule(expr)
    for _ in range(count):
        at = rule.next_after(at, zone)
        out.append(at.astimezone(zone).strftime("%a %m-%d %H:%M %Z"))
    return out


def schedule(cron: str, armed: datetime, tz: str = "Europe/Berlin") -> Schedule:
    return Schedule(spec=cron, cron=cron, timezone=tz, request="status staging",
                    created_by="U1", created_at=armed, armed_at=armed)


@pytest.mark.parametrize(("spec", "cron"), [
    ("every weekday at 02:00", "0 2 * * mon-fri"),
    ("every day at 9:30", "30 9 * * *"),
    ("Daily at 7pm", "0 19 * * *"),
    ("every monday at 08:00", "0 8 * * mon"),
    ("every Mondays and thursday at 8am", "0 8 * * mon,thu"),
    ("every weekend at 10:15", "15 10 * * sat,sun"),
    ("every 6h", "0 */6 * * *"),
    ("every 1 hour", "0 * * * *"),
    ("every 30m", "*/30 * * * *"),
    ("every 24h", "0 0 * * *"),
    ("hourly", "0 * * * *"),
    ("@weekly", "0 0 * * 0"),
    ("0  2 * *  MON-FRI", "0 2 * * mon-fri"),
])
def test_readable_and_cron_specs(spec: str, cron: str) -> None:
    assert spec_to_cron(spec) == cron


@pytest.mark.parametrize(("spec", "message"), [
    ("61 2 * * *", "higher than the maximum value"),
    ("0 2 * *", "5 fields"),
    ("0 2 * * 8", "0 and 7 are Sunday"),
    ("0 2 * * fri-mon", "low to high"),
    ("0 2 last * *", "not a number"),
    ("0 2 * * */0", "at least 1"),
    ("every 7h", "does not divide the day"),
    ("every 45m", "does not divide the hour"),
    ("every day at 24:00", "not a time of day"),
    ("every fortnight", "cannot read schedule"),
])
def test_bad_specs_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        spec_to_cron(spec)


def test_day_of_week_0_and_7_are_sunday_not_monday() -> None:
    wednesday = datetime(2026, 3, 25, 12, tzinfo=BERLIN)
    assert fires("0 9 * * 0", wednesday, 2) == ["Sun 03-29 09:00 CEST", "Sun 04-05 09:00 CEST"]
    assert fires("0 9 * * 7", wednesday, 1) == ["Sun 03-29 09:00 CEST"]
    assert fires("0 9 * * 1", wednesday, 1) == ["Mon 03-30 09:00 CEST"]
    assert fires("0 9 * * 5-7", wednesday, 3) == ["Fri 03-27 09:00 CET", "Sat 03-28 09:00 CET",
                                                    "Sun 03-29 09:00 CEST"]
    assert fires("0 9 * * fri-sun", wednesday, 3) == fires("0 9 * * 5-7", wednesday, 3)


def test_day_of_week_steps_count_from_sunday_as_in_cron() -> None:
    wednesday = datetime(2026, 3, 25, 12, tzinfo=BERLIN)
    days = [f.split()[0] for f in fires("0 9 * * */2", wednesday, 4)]
    assert days == ["Thu", "Sat", "Sun", "Tue"]  # 0,2,4,6 = sun,tue,thu,sat


def test_day_of_month_and_weekday_both_restricted_means_either() -> None:
    start = datetime(2026, 3, 28, tzinfo=BERLIN)
    assert fires("0 9 1 * mon", start, 3) == ["Mon 03-30 09:00 CEST", "Wed 04-01 09:00 CEST",
                                              "Mon 04-06 09:00 CEST"]
    # a '*'-prefixed field means both must match, as in cron
    assert fires("0 9 */7 * mon", start, 1) == ["Mon 06-01 09:00 CEST"]


def test_spring_forward_fixed_time_fires_once_when_the_clock_jumps() -> None:
    start = datetime(2026, 3, 28, 12, tzinfo=BERLIN)
    assert fires("30 2 * * *", start, 3) == ["Sun 03-29 03:00 CEST", "Mon 03-30 02:30 CEST",
                                             "Tue 03-31 02:30 CEST"]


def test_fall_back_fixed_time_fires_once_at_the_first_instant() -> None:
    start = datetime(2026, 10, 24, 12, tzinfo=BERLIN)
    assert fires("30 2 * * *", start, 2) == ["Sun 10-25 02:30 CEST", "Mon 10-26 02:30 CET"]


def test_wildcard_jobs_keep_even_spacing_across_dst() -> None:
    spring = datetime(2026, 3, 29, 1, 10, tzinfo=BERLIN)
    assert fires("*/30 * * * *", spring, 3) == ["Sun 03-29 01:30 CET", "Sun 03-29 03:00 CEST",
                                                "Sun 03-29 03:30 CEST"]
    autumn = datetime(2026, 10, 25, 1, 40, tzinfo=BERLIN)
    assert fires("*/30 * * * *", autumn, 5) == [
        "Sun 10-25 02:00 CEST", "Sun 10-25 02:30 CEST", "Sun 10-25 02:00 CET",
        "Sun 10-25 02:30 CET", "Sun 10-25 03:00 CET"]


def test_next_after_from_inside_the_repeated_hour() -> None:
    rule = cron_rule("*/30 * * * *")
    first_pass = datetime(2026, 10, 25, 0, 45, tzinfo=UTC)  # 02:45 CEST
    assert rule.next_after(first_pass, BERLIN) == datetime(2026, 10, 25, 1, 0, tzinfo=UTC)
    second_pass = datetime(2026, 10, 25, 1, 45, tzinfo=UTC)  # 02:45 CET
    assert rule.next_after(second_pass, BERLIN) == datetime(2026, 10, 25, 2, 0, tzinfo=UTC)


def test_other_zones_and_impossible_dates() -> None:
    start = datetime(2026, 3, 7, 12, tzinfo=UTC)
    new_york = ZoneInfo("America/New_York")
    assert fires("30 2 * * *", start, 2, new_york) == ["Sun 03-08 03:00 EDT",
                                                      "Mon 03-09 02:30 EDT"]
    assert cron_rule("0 0 30 2 *").next_after(start, BERLIN) is None


def test_unknown_time_zone_suggests_close_names() -> None:
    with pytest.raises(ScheduleError, match="unknown time zone 'europe/berln'.*Europe/Berlin"):
        zone_named("europe/berln")
    with pytest.raises(ScheduleError, match="unknown time zone"):
        zone_named("../../etc/passwd")
    assert zone_named("Asia/Kolkata").key == "Asia/Kolkata"


def test_split_spec_quoted_unquoted_and_readable() -> None:
    assert split_spec(["0 2 * * mon-fri", "deploy", "main"]) == (
        "0 2 * * mon-fri", "0 2 * * mon-fri", "deploy main")
    assert split_spec(["0", "2", "*", "*", "1", "deploy", "main"]) == ("0 2 * * 1", "0 2 * * 1",
                                                           "deploy main")
    assert split_spec(["every", "weekday", "at", "02:00", "deploy", "v1", "to", "staging"]) == (
        "every weekday at 02:00", "0 2 * * mon-fri", "deploy v1 to staging")
    with pytest.raises(ScheduleError, match="say when and what"):
        split_spec(["every 6h"])
    with pytest.raises(ScheduleError, match="does not divide"):
        split_spec(["every", "5h", "status", "staging"])


def test_due_coalesces_missed_occurrences_within_grace() -> None:
    armed = datetime(2026, 3, 30, 1, 0, tzinfo=BERLIN)
    s = schedule("*/10 * * * *", armed)
    assert s.due(armed) is None
    now = datetime(2026, 3, 30, 1, 35, tzinfo=BERLIN)  # 01:10, :20, :30 are due
    due = s.due(now, grace=timedelta(minutes=30))
    assert due is not None and due.fire_time == datetime(2026, 3, 30, 1, 30, tzinfo=BERLIN)
    assert due.coalesced == 2 and due.missed_since is None
    short = s.due(now, grace=timedelta(minutes=20))  # 01:10 is too old: dropped
    assert short is not None and short.coalesced == 1
    assert short.missed_since == datetime(2026, 3, 30, 1, 10, tzinfo=BERLIN)


def test_due_beyond_grace_fires_nothing_and_reports_the_miss() -> None:
    armed = datetime(2026, 3, 30, 1, 0, tzinfo=BERLIN)
    s = schedule("0 2 * * *", armed)
    due = s.due(datetime(2026, 3, 30, 6, 0, tzinfo=BERLIN), grace=timedelta(minutes=30))
    assert due is not None and due.fire_time is None
    assert due.missed_since == datetime(2026, 3, 30, 2, 0, tzinfo=BERLIN)
    paused = s.model_copy(update={"paused": True})
    assert paused.due(datetime(2026, 3, 30, 2, 0, tzinfo=BERLIN)) is None


def test_local_display_uses_the_schedules_zone() -> None:
    s = schedule("30 2 * * *", datetime(2026, 10, 24, 12, tzinfo=BERLIN))
    first, second = s.next_fires(datetime(2026, 10, 24, 12, tzinfo=BERLIN), 2)
    assert s.local(first) == "Sun 2026-10-25 02:30 CEST"
    assert s.local(second) == "Mon 2026-10-26 02:30 CET"
