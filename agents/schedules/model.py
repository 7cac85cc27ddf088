"""Recurring plans: the Schedule model, when it fires, and its durable storage in Redis.

Specs
    A 5-field cron expression with standard (Vixie cron / cronie) semantics, or a readable
    form. In cron, day of week 0 and 7 are both Sunday; APScheduler 3 numbers Monday 0, so
    day-of-week numbers are expanded to names here and never passed through. When both day
    of month and day of week are restricted (neither starts with ``*``), a day matching
    either fires, as in cron (``0 9 1 * mon``: the 1st of the month and every Monday).
    ``@hourly @daily @midnight @weekly @monthly @yearly @annually`` are accepted.
    Readable forms translate to cron: ``every day at 9:30`` (``daily at``), ``every weekday
    at 02:00``, ``every weekend at 10:00``, ``every monday at 08:00``, ``every mon and thu
    at 8am``, ``every hour``, ``every 6h`` (``0 */6 * * *``), ``every 30m``
    (``*/30 * * * *``). ``every Nh`` / ``every Nm`` need N to divide the day / the hour, so
    that the times are the same every day; anything else takes a cron expression.

Time zones and daylight saving time
    A schedule's times are wall-clock times in its own zone (``--tz``, default
    ``DECKHAND_TZ``). Across DST changes it follows cronie's rules:

    * spring forward: a fixed-time job (neither minute nor hour starts with ``*``) whose
      time falls in the skipped hour fires once, when the clock jumps (02:30 daily in
      Europe/Berlin fires at 03:00 CEST on 2026-03-29). A wildcard job (``*/30 * * * *``,
      ``every 6h``) simply has no such wall time, so the time between its fires stays even.
    * fall back: a fixed-time job fires once, at the first of the two instants (02:30 CEST
      on 2026-10-25, not again at 02:30 CET); a wildcard job fires at both, because they
      are different moments.

    APScheduler 3's own CronTrigger gets both wrong (a non-existent 02:30+01:00, and two
    02:30 runs on the fall-back day), so fire times are computed here; APScheduler only
    decides when to wake up.

Missed occurrences
    Occurrences are due once they are after the schedule's ``armed_at`` (creation, resume,
    or the last fire). When several are due at once (the bot was down, or busy), they are
    coalesced into a single firing at the latest of them, provided that one is no older
    than the grace time (``DECKHAND_SCHEDULE_GRACE``, default 30 minutes). If even the
    latest is older, nothing fires: the schedule is re-armed and the miss is audited
    (``schedule_missed``). Occurrences while a schedule is paused never fire: resuming
    re-arms it.

Exactly once across replicas
    Every replica computes the same fire times, and a firing first claims
    ``schedule:ID:fired:<UTC ISO fire time>`` with SET NX (TTL well beyond the grace time).
    Only the replica that got the claim handles the occurrence, under a lease its heartbeat
    renews. A replica that dies while handling it (planning, typically) lets the lease
    lapse; the next replica to tick takes the occurrence over once, with the same
    idempotency key (the run's id is derived from schedule and fire time, so it is stored
    once), or records it missed with the reason (``agents.schedules.keys``). Either way it
    shows in ``schedules list``.

Storage: ``agents.store.schedules.ScheduleBook`` (``schedule:ID`` as JSON, an index by
creation, ``schedules:version`` bumped on every change so replicas rebuild their jobs, and
``schedule:ID:fired:<iso>`` / ``schedule:ID:missed:<iso>`` claims).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from agents.errors import ScheduleError
from agents.ids import new_id

if TYPE_CHECKING:
    from apscheduler.triggers.cron import CronTrigger

DEFAULT_GRACE = timedelta(minutes=30)
WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
"""Cron numbering: the index is the cron number (7 is Sunday again)."""
_DAY_NAMES = ("sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday")
FIELDS = ("minute", "hour", "day of month", "month", "day of week")
MACROS = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
          "@weekly": "0 0 * * 0", "@monthly": "0 0 1 * *", "@yearly": "0 0 1 1 *",
          "@annually": "0 0 1 1 *"}
_NUMERIC = re.compile(r"^(\*|[0-9]+(-[0-9]+)?)(/[0-9]+)?$")
_NAMED = re.compile(r"^(\*|[0-9a-z]+(-[0-9a-z]+)?)(/[0-9]+)?$")  # month and weekday names
_DST_SLACK = timedelta(hours=3)  # more than any clock change: how far a wall time can repeat
_MAX_SCAN = 10_000  # occurrences examined per question, so a minutely schedule stays cheap


def utc_now() -> datetime:
    return datetime.now(UTC)


# -- cron rules --------------------------------------------------------------------------


class CronRule:
    """A 5-field cron expression with standard cron semantics, evaluated in a time zone.

    Attributes:
        expr: the expression, normalized to single spaces (macros expanded).
        fixed: neither minute nor hour starts with ``*`` (decides DST behaviour).
    """

    def __init__(self, expr: str):
        self.expr = " ".join(MACROS.get(expr.strip().lower(), expr).lower().split())
        fields = self.expr.split(" ")
        if len(fields) != 5:
            raise ScheduleError(f"a cron expression has 5 fields (minute hour day-of-month month "
                                f"day-of-week); {expr.strip()!r} has {len(fields)}")
        for name, text in zip(FIELDS, fields, strict=True):
            _check_syntax(name, text)
        self.fixed = not fields[0].startswith("*") and not fields[1].startswith("*")
        self._triggers = _triggers(self.expr, fields)

    def next_after(self, after: datetime, zone: ZoneInfo) -> datetime | None:
        """The first occurrence strictly after ``after``, in UTC (None if there is none)."""
        after = after.astimezone(UTC)
        slack = _repeat_ahead(after, zone)
        best: datetime | None = None
        for wall in self._walls(_wall(after, zone) - slack):
            if best is not None and wall > _wall(best, zone) + slack:
                break
            for instant in self._instants(wall, zone):
                if instant > after and (best is None or instant < best):
                    best = instant
        return best

    def _walls(self, start: datetime) -> Iterator[datetime]:
        """Matching wall-clock times (naive) from ``start`` on, in order."""
        wall = start
        for _ in range(_MAX_SCAN):
            found = [t.get_next_fire_time(None, wall.replace(tzinfo=UTC)) for t in self._triggers]
            hits = [f for f in found if f is not None]
            if not hits:
                return
            match = min(hits).replace(tzinfo=None)
            yield match
            wall = match + timedelta(microseconds=1)

    def _instants(self, wall: datetime, zone: ZoneInfo) -> list[datetime]:
        """The instants (UTC) at which wall time ``wall`` fires, per cron's DST rules."""
        first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
        second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
        if _wall(first, zone) == wall:
            if first == second or self.fixed:
                return [first]  # fall back: a fixed-time job runs once, at the first one
            return sorted({first, second})
        return [_gap_end(min(first, second), wall, zone)] if self.fixed else []


def _check_syntax(name: str, text: str) -> None:
    """Only what standard cron accepts (APScheduler also knows ``last``, ``1st mon``...)."""
    pattern = _NAMED if name in ("month", "day of week") else _NUMERIC
    for item in text.split(","):
        if not pattern.match(item):
            names = ", mon" if pattern is _NAMED else ""
            raise ScheduleError(f"cron {name} field {text!r}: {item!r} is not a number, range "
                                f"or step (like 5, 1-5, */15{names})")


def _triggers(expr: str, fields: list[str]) -> list[CronTrigger]:
    """APScheduler triggers evaluated on naive wall time (as UTC); several mean OR.
    APScheduler is imported here: a config without cron never pays for it (start-up)."""
    from apscheduler.triggers.cron import CronTrigger

    minute, hour, dom, month, dow_text = fields
    dow = _dow_names(dow_text)
    if dom.startswith("*") or dow_text.startswith("*"):
        specs = [(dom, dow)]
    else:  # cron: both restricted means either may match
        specs = [(dom, "*"), ("*", dow)]
    try:
        return [CronTrigger(minute=minute, hour=hour, day=d, month=month, day_of_week=w,
                            timezone=UTC) for d, w in specs]
    except ValueError as exc:
        raise ScheduleError(f"invalid cron expression {expr!r}: {exc}") from exc


def _dow_names(text: str) -> str:
    """Cron's day-of-week field as APScheduler names (never numbers: 0 means Monday there)."""
    days: set[int] = set()
    for item in text.split(","):
        span, _, step = item.partition("/")
        lo, hi = _dow_span(span, bool(step))
        if lo > hi:
            raise ScheduleError(f"cron day of week {item!r}: a range must go from low to high")
        if step and int(step) == 0:
            raise ScheduleError(f"cron day of week {item!r}: the step must be at least 1")
        days.update(d % 7 for d in range(lo, hi + 1, int(step or 1)))
    if len(days) == 7:
        return "*"
    return ",".join(("mon", "tue", "wed", "thu", "fri", "sat", "sun")[(d - 1) % 7]
                    for d in sorted(days, key=lambda d: (d - 1) % 7))


def _dow_span(span: str, stepped: bool) -> tuple[int, int]:
    if span == "*":
        return 0, 7
    if "-" in span:
        low, high = span.split("-")
        return _day_number(low, end=False), _day_number(high, end=True)
    if stepped:
        raise ScheduleError(f"cron day of week {span!r}/...: a step needs a range or *")
    day = _day_number(span, end=False)
    return day, day


def _day_number(token: str, *, end: bool) -> int:
    """Cron's number for a day name or number; ``sun`` ending a range counts as 7."""
    if token.isdigit() and int(token) <= 7:
        return int(token)
    if len(token) >= 3 and not token.isdigit():
        for number, name in enumerate(_DAY_NAMES):
            if name.startswith(token):
                return 7 if number == 0 and end else number
    raise ScheduleError(f"cron day of week {token!r}: use 0-7 (0 and 7 are Sunday) or "
                        f"sun, mon, tue, wed, thu, fri, sat")


def _wall(instant: datetime, zone: ZoneInfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None)


def _repeat_ahead(instant: datetime, zone: ZoneInfo) -> timedelta:
    """How much wall time repeats soon after ``instant`` (a fall-back ahead), else 0."""
    return max(timedelta(0), _offset(instant, zone) - _offset(instant + _DST_SLACK, zone))


def _offset(instant: datetime, zone: ZoneInfo) -> timedelta:
    return instant.astimezone(zone).utcoffset() or timedelta(0)


def _gap_end(start: datetime, wall: datetime, zone: ZoneInfo) -> datetime:
    """The instant the clock jumps past ``wall`` (which the spring-forward gap skipped)."""
    instant = start.replace(second=0, microsecond=0)
    while _wall(instant, zone) < wall:
        instant += timedelta(minutes=1)
    return instant


@functools.lru_cache(maxsize=512)
def cron_rule(expr: str) -> CronRule:
    """The parsed rule for ``expr`` (ScheduleError if it is not valid cron)."""
    return CronRule(expr)


# -- readable specs ----------------------------------------------------------------------

_TIME = r"(?P<hh>\d{1,2})(?::(?P<mm>\d{2}))?\s*(?P<ampm>am|pm)?"
_DAY = r"(?:sun|mon|tue|wed|thu|fri|sat)[a-z]*"
_READABLE: list[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]] = []


Build = Callable[[re.Match[str]], str]


def _readable(pattern: str) -> Callable[[Build], Build]:
    """Register a readable form: ``pattern`` matched in full, ``build`` gives its cron."""
    def add(build: Build) -> Build:
        _READABLE.append((re.compile(pattern), build))
        return build
    return add


@_readable(r"every (?P<n>\d+) ?(?:h|hrs?|hours?)")
def _every_hours(m: re.Match[str]) -> str:
    n = int(m["n"])
    field = _every_n(n, per=24, unit="h", span="day", example=f"0 */{n} * * *")
    return "0 0 * * *" if n == 24 else f"0 {field} * * *"


@_readable(r"every (?P<n>\d+) ?(?:m|mins?|minutes?)")
def _every_minutes(m: re.Match[str]) -> str:
    n = int(m["n"])
    return "0 * * * *" if n == 60 else f"{_every_n(n, per=60, unit='m', span='hour')} * * * *"


def _every_n(n: int, *, per: int, unit: str, span: str, example: str = "") -> str:
    """The cron field for "every n units": n must divide the ``per`` units of a ``span``."""
    if n == 0 or per % n:
        hint = f' (e.g. "{example}")' if example else ""
        raise ScheduleError(f"every {n}{unit} does not divide the {span} evenly; use a cron "
                            f"expression{hint} for uneven times")
    return "*" if n == 1 else f"*/{n}"


@_readable(r"(?:every hour|hourly)")
def _hourly(m: re.Match[str]) -> str:
    return "0 * * * *"


@_readable(rf"(?:every day|daily) at {_TIME}")
def _daily(m: re.Match[str]) -> str:
    return f"{_clock(m)} * * *"


@_readable(rf"every weekday at {_TIME}")
def _weekdays(m: re.Match[str]) -> str:
    return f"{_clock(m)} * * mon-fri"


@_readable(rf"every weekend at {_TIME}")
def _weekend(m: re.Match[str]) -> str:
    return f"{_clock(m)} * * sat,sun"


@_readable(rf"every (?P<days>{_DAY}(?:(?:,| and|, and) {_DAY})*) at {_TIME}")
def _on_days(m: re.Match[str]) -> str:
    names = re.findall(_DAY, m["days"])
    days = sorted({_day_number(n.rstrip("s") if len(n) > 3 else n, end=False) for n in names})
    return f"{_clock(m)} * * {','.join(WEEKDAYS[d] for d in days)}"


def _clock(m: re.Match[str]) -> str:
    """``M H`` for a matched time of day, checked."""
    hour, minute, ampm = int(m["hh"]), int(m["mm"] or 0), m["ampm"]
    if ampm:
        if not 1 <= hour <= 12:
            raise ScheduleError(f"{m['hh']}{ampm}: use 1-12 with am/pm")
        hour = hour % 12 + (12 if ampm == "pm" else 0)
    if hour > 23 or minute > 59:
        raise ScheduleError(f"{m.group(0).split(' at ')[-1]} is not a time of day (00:00-23:59)")
    return f"{minute} {hour}"


def spec_to_cron(spec: str) -> str:
    """The standard cron expression a spec (cron or readable) means; ScheduleError if none."""
    text = " ".join(spec.strip().lower().split())
    readable = _match_readable(text)
    if readable is not None:
        build, found = readable
        return build(found)
    if text.startswith(_READABLE_STARTS):
        raise ScheduleError(f"cannot read schedule {spec.strip()!r}. {SPEC_HELP}")
    return cron_rule(text).expr


SPEC_HELP = ('Try "every weekday at 02:00", "every day at 9:30", "every monday at 08:00", '
             '"every 6h", "every 30m", or cron like "0 2 * * mon-fri".')
_READABLE_STARTS = ("every", "daily", "hourly")


def _match_readable(text: str) -> tuple[Callable[[re.Match[str]], str], re.Match[str]] | None:
    for pattern, build in _READABLE:
        found = pattern.fullmatch(text)
        if found:
            return build, found
    return None


def split_spec(words: list[str]) -> tuple[str, str, str]:
    """Split ``add`` words into (spec as typed, its cron, the request).

    The spec may be one quoted word, or unquoted: five cron fields, an ``@macro``, or the
    longest readable phrase (``every weekday at 02:00 deploy main`` works).
    """
    if len(words) < 2:
        raise ScheduleError('say when and what, e.g. add "0 2 * * mon-fri" deploy main to '
                            'staging')
    first = words[0]
    if len(first.split()) > 1 or first.startswith("@"):
        return _spec_and_rest(words, 1)
    if first.lower() in _READABLE_STARTS:
        for n in range(min(len(words) - 1, 8), 0, -1):
            if _match_readable(" ".join(words[:n]).lower()):
                return _spec_and_rest(words, n)
        raise ScheduleError(f"cannot read the schedule at the start of {' '.join(words)!r}. "
                            f"{SPEC_HELP}")
    if len(words) < 6:
        raise ScheduleError(f"{' '.join(words)!r} is not a schedule and a request: a cron "
                            f"expression has 5 fields. {SPEC_HELP}")
    return _spec_and_rest(words, 5)


def _spec_and_rest(words: list[str], n: int) -> tuple[str, str, str]:
    spec = " ".join(words[:n])
    return spec, spec_to_cron(spec), " ".join(words[n:])


def zone_named(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; ScheduleError (with close matches) if unknown."""
    try:
        if name and not name.startswith(("/", ".")) and ".." not in name:
            return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        pass
    raise ScheduleError(f"unknown time zone {name!r}: use an IANA name like Europe/Berlin or "
                        f"America/New_York.{_zone_hint(name)}")


def _zone_hint(name: str) -> str:
    import difflib

    known = {z.lower(): z for z in available_timezones()}
    close = difflib.get_close_matches(name.lower(), sorted(known), n=3)
    return f" Did you mean {', '.join(known[c] for c in close)}?" if close else ""


# -- the model ---------------------------------------------------------------------------


def new_schedule_id() -> str:
    return new_id("sch")


@dataclass(frozen=True)
class Due:
    """What a schedule should do now: fire once at ``fire_time``, or record a miss."""

    fire_time: datetime | None
    coalesced: int = 0
    """Earlier occurrences folded into this firing."""
    missed_since: datetime | None = None
    """The first occurrence dropped because it was older than the grace time."""


class Schedule(BaseModel):
    """A request planned on a recurring schedule, in one time zone. Times are UTC."""

    id: str = Field(default_factory=new_schedule_id)
    spec: str
    """As the user typed it."""
    cron: str
    """The standard 5-field cron expression it means."""
    timezone: str = "UTC"
    request: str
    service: str | None = None
    """The service the request is planned for (docs/services.md); None: the legacy
    service, and every schedule written before services (the field is then not written)."""
    channel: str | None = None
    created_by: str
    created_by_groups: list[str] = Field(default_factory=list)
    environments: list[str] = Field(default_factory=list)
    """The environments the request planned for at creation (who may change it)."""
    auto: bool = False
    approved_plan_id: str | None = None
    approved_plan_hash: str | None = None
    """For --auto: the plan approved at creation; later plans must hash the same."""
    paused: bool = False
    created_at: datetime
    armed_at: datetime
    """Occurrences strictly after this are due: creation, resume, or the last fire."""
    last_fire: datetime | None = None
    last_coalesced: int = 0
    fires: int = 0
    last_problem: str | None = None
    """What went wrong with the latest troubled occurrence (taken over, missed, failed)."""
    plan_problem: str | None = None
    """Why the request no longer plans (or validates) under the current config; cleared by
    the next occurrence that plans."""

    @model_serializer(mode="wrap")
    def _without_legacy_service(self, handler: SerializerFunctionWrapHandler) -> Any:
        """A legacy schedule is written as before services: without ``service``."""
        data = handler(self)
        if self.service is None and isinstance(data, dict):
            data.pop("service", None)
        return data

    @property
    def zone(self) -> ZoneInfo:
        return zone_named(self.timezone)

    @property
    def rule(self) -> CronRule:
        return cron_rule(self.cron)

    @property
    def requester(self) -> str:
        """Who plans made by this schedule are requested by."""
        return f"schedule:{self.id}"

    @property
    def approver_label(self) -> str:
        """How an unattended approval is recorded."""
        return f"schedule:{self.id} (approved by {self.created_by} at creation)"

    def next_fire(self, after: datetime) -> datetime | None:
        """The first occurrence after ``after`` (and after ``armed_at``), in UTC."""
        return self.rule.next_after(max(after, self.armed_at), self.zone)

    def next_fires(self, after: datetime, count: int) -> list[datetime]:
        out: list[datetime] = []
        nxt = self.next_fire(after)
        while nxt is not None and len(out) < count:
            out.append(nxt)
            nxt = self.rule.next_after(nxt, self.zone)
        return out

    def due(self, now: datetime, *, grace: timedelta = DEFAULT_GRACE) -> Due | None:
        """What to do at ``now``: None if no occurrence is due (see the module docstring)."""
        first = self.rule.next_after(self.armed_at, self.zone)
        if self.paused or first is None or first > now:
            return None
        window = list(self._occurrences(max(self.armed_at, now - grace), now))
        if not window:
            return Due(None, missed_since=first)
        dropped = first if first < window[0] else None
        return Due(window[-1], coalesced=len(window) - 1, missed_since=dropped)

    def _occurrences(self, after: datetime, until: datetime) -> Iterator[datetime]:
        nxt = self.rule.next_after(after, self.zone)
        for _ in range(_MAX_SCAN):
            if nxt is None or nxt > until:
                return
            yield nxt
            nxt = self.rule.next_after(nxt, self.zone)

    def local(self, instant: datetime) -> str:
        """``instant`` as the schedule's wall time, e.g. ``Mon 2026-03-30 02:00 CEST``."""
        return instant.astimezone(self.zone).strftime("%a %Y-%m-%d %H:%M %Z")


def claim_ttl(grace: timedelta) -> timedelta:
    """How long a claim outlives its fire time: well past the grace time and clock skew."""
    return max(grace * 2, timedelta(days=2))
