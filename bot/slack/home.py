"""The App Home tab: what to publish for a user, and when to publish it again.

A user's Home is published when they open it, and again when a run they care about
changes: one they requested, approved, or may approve. Re-publishing is bounded: it is
only for users who opened their Home recently (at most ``max_viewers`` of them), at most
once per ``interval`` seconds per user, and at most ``per_minute`` publishes overall
(``views.publish`` is rate limited per workspace). Changes arriving meanwhile are
coalesced. A sender thread does the work, started when there is some and gone when not.

Viewers are remembered in Redis too (``store.viewers``): with several bot replicas, the
one that says a run's thread refreshes the Homes of users who opened theirs through any.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from slack_sdk.errors import SlackApiError

from agents.engine.schedule_health import checked
from agents.policy.approvals import approval_problem, judgment_problem
from agents.policy.rules import Policy
from agents.run.record import Run, RunStatus, Verdict
from agents.schedules.model import Schedule
from bot.slack.bot import Bot
from bot.slack.home_blocks import (
    MAX_ENVIRONMENTS,
    MAX_SCHEDULES,
    HomeData,
    home_view,
    in_progress,
)
from tools.errors import DeckhandError

log = logging.getLogger("deckhand.slack.home")

RUN_SCAN = 200
OPEN = [status for status in RunStatus if not status.terminal]
"""Recent runs the Home looks through (the store scans a bounded window too)."""


def home_data(bot: Bot, user: str) -> HomeData:
    """Read everything ``user``'s Home shows: each run judged by its own service's rules
    (a run of a service this process lacks is left out: never shown under another's)."""
    store, policy = bot.store, bot.policy_of
    now = store.clock()
    groups = bot.directory.groups_of(user)
    runs = [r for r in store.runs.mentioning(user, scan=RUN_SCAN)  # parses only theirs
            if _known(bot, r.service)]
    unfinished = [r for r in store.runs.recent(limit=RUN_SCAN, statuses=OPEN)  # an index
                  if _known(bot, r.service)]
    pending = [r for r in unfinished if _may_approve(r, user, groups, policy(r.service), now)]
    environments = _environments(bot, user, groups)
    return HomeData(
        user=user, now=now, pending=pending,
        mine=[r for r in unfinished if r.status is RunStatus.AWAITING_APPROVAL
              and r.requested_by == user and r not in pending],
        active=[r for r in unfinished if in_progress(r)],
        recent=[r for r in runs if r.status.terminal and _involves(r, user)],
        environments=[label for _, _, label in environments],
        schedules=_schedules(bot, user, groups),
        **_environment_states(bot, environments),
        deciding={r.id for r in unfinished if r.awaiting is not None and judgment_problem(
            r, user=user, user_groups=groups, policy=policy(r.service),
            verdict=Verdict.ROLLBACK) is None})


def _known(bot: Bot, service: str | None) -> bool:
    try:
        bot.services.org.service_of(service)
    except DeckhandError:
        return False
    return True


Scope = tuple[str | None, str, str]
"""(service key, environment, label): ``production`` alone, ``api/production`` in an
organisation of several services."""


def _environments(bot: Bot, user: str, groups: list[str]) -> list[Scope]:
    """Every environment, the services ``user`` (or a group of theirs) owns first."""
    org = bot.services.org
    owned = org.index.owned_by(user, groups)
    names = [*owned, *[name for name in org.services if name not in owned]]
    several = len(org.services) > 1
    return [(org.services[name].key, env, f"{name}/{env}" if several else env)
            for name in names for env in sorted(org.services[name].inventory.environments)]


def _environment_states(bot: Bot, scopes: list[Scope]) -> dict[str, Any]:
    """Locks, deployed versions and locks by hand of the environments the Home shows (the
    first ``MAX_ENVIRONMENTS``: a large organisation's Home reads no more than it shows),
    by label: one read of the locks, one MGET of what is deployed."""
    shown = scopes[:MAX_ENVIRONMENTS]
    label = {(key, env): name for key, env, name in shown}
    services = list(dict.fromkeys(key for key, _, _ in shown))
    store = bot.store
    locks = {label[(i.service, i.environment)]: i for i in store.locks.all()
             if (i.service, i.environment) in label}
    deployed = {label[(w.service, w.environment)]: w for w in store.history.matrix(services)
                if (w.service, w.environment) in label}
    held = {label[(key, env)]: lock for key in services
            for env, lock in store.manual_locks.all(service=key).items() if (key, env) in label}
    return {"locks": locks, "deployed": deployed, "held": held}


def _may_approve(run: Run, user: str, groups: list[str], policy: Policy, now: float) -> bool:
    if run.status is not RunStatus.AWAITING_APPROVAL:
        return False
    return approval_problem(run, user=user, user_groups=groups, plan_version=run.plan_version,
                            plan_hash=run.plan_hash, policy=policy, now=now) is None


def _involves(run: Run, user: str) -> bool:
    return run.requested_by == user or any(a.user == user for a in run.approvals)


def _schedules(bot: Bot, user: str, groups: list[str]
               ) -> list[tuple[Schedule, datetime | None]]:
    """Every service's schedules, the user's owned services' first; each of the first
    ``MAX_SCHEDULES`` (those shown) checked against its own service's config and given its
    next fire time, the rest only counted: 200 services' schedules would be 200 plan checks
    and cron walks a publish. One of a service this process lacks is left out (it would not
    validate here)."""
    now = datetime.now(UTC)
    org = bot.services.org
    owned = set(org.index.owned_by(user, groups))
    known = [s for s in bot.store.schedules.all() if _known(bot, s.service)]
    known.sort(key=lambda s: org.service_of(s.service).name not in owned)  # stable
    shown = [(checked(s, org.service_of(s.service), plans=bot.store.plans),
              None if s.paused else s.next_fire(now)) for s in known[:MAX_SCHEDULES]]
    return shown + [(s, None) for s in known[MAX_SCHEDULES:]]  # counted, never shown


def publish_home(bot: Bot, user: str) -> None:
    """Publish ``user``'s Home now (errors reach the caller)."""
    view = home_view(home_data(bot, user), bot.policy_of)
    bot.client.views_publish(user_id=user, view=view)


class HomeTab:
    """Publishes Homes on open, and re-publishes them (bounded) when runs change."""

    def __init__(self, bot: Bot, *, interval: float = 5.0, per_minute: int = 50,
                 max_viewers: int = 200, forget_after: float = 3600.0,
                 clock: Callable[[], float] = time.monotonic):
        self.bot = bot
        self.interval, self.per_minute = interval, per_minute
        self.max_viewers, self.forget_after = max_viewers, forget_after
        self.clock = clock
        self._viewers: OrderedDict[str, float] = OrderedDict()  # user -> last opened
        self._published: dict[str, float] = {}
        self._changes: list[Run] = []
        self._due: set[str] = set()
        self._sent: deque[float] = deque()  # publish times in the last minute, all users
        self._cond = threading.Condition()
        self._sender: threading.Thread | None = None

    def opened(self, user: str) -> None:
        """The user opened their Home: publish it now and keep it fresh for a while."""
        with self._cond:
            now = self.clock()
            self._viewers[user] = now
            self._viewers.move_to_end(user)
            while len(self._viewers) > self.max_viewers:
                self._viewers.popitem(last=False)
            self._published[user] = now
            self._sent.append(now)
            self._due.discard(user)
        try:  # shared: the replica saying a run's thread refreshes this Home too
            self.bot.store.viewers.opened(user)
        except DeckhandError as exc:
            log.warning("could not share that %s opened their Home: %s", user, exc)
        publish_home(self.bot, user)

    def changed(self, run: Run) -> None:
        """A run changed. Quick: only queues it for the sender thread."""
        with self._cond:
            self._changes.append(run)
            if self._sender is None:
                self._sender = threading.Thread(target=self._send_loop, daemon=True,
                                                name="slack-home")
                self._sender.start()
            self._cond.notify()

    def idle(self) -> bool:
        """Nothing queued or due (for tests and shutdown)."""
        with self._cond:
            return self._sender is None

    # -- sender thread ------------------------------------------------------------------------

    def _send_loop(self) -> None:
        try:
            self._serve()
        finally:  # however it ended, the next change starts a new sender
            with self._cond:
                self._sender = None

    def _serve(self) -> None:
        while True:
            with self._cond:
                changes = list({r.id: r for r in self._changes}.values())
                self._changes = []
                viewers = self._recent_viewers()
            interested = self._interested(changes, viewers)  # may ask Slack for groups
            with self._cond:
                self._due |= interested
                user, wait = self._next_due()
                if user is None and wait is None and not self._changes:
                    return
                if user is None:
                    self._cond.wait(wait)
                    continue
                self._due.discard(user)
                self._published[user] = self._sent_now()
            self._publish_safely(user)

    def _recent_viewers(self) -> list[str]:
        """Who opened their Home lately, through this replica or any other."""
        cutoff = self.clock() - self.forget_after
        for user in [u for u, at in self._viewers.items() if at < cutoff]:
            del self._viewers[user]
        try:
            shared = self.bot.store.viewers.recent(self.forget_after, limit=self.max_viewers)
        except DeckhandError:  # the store is away: this replica's own viewers still count
            shared = []
        return list(dict.fromkeys([*self._viewers, *shared]))[:self.max_viewers]

    def _interested(self, changes: Iterable[Run], viewers: list[str]) -> set[str]:
        out: set[str] = set()
        for run in changes:
            if not _known(self.bot, run.service):
                continue
            policy = self.bot.policy_of(run.service)
            for user in viewers:
                if user in out:
                    continue
                if _involves(run, user) or policy.may_approve(
                        user, self.bot.directory.groups_of(user), run.scopes):
                    out.add(user)
        return out

    def _next_due(self) -> tuple[str | None, float | None]:
        """The user to publish now, or how long to wait (None: nothing is due)."""
        if not self._due:
            return None, None
        now = self.clock()
        while self._sent and self._sent[0] < now - 60:
            self._sent.popleft()
        budget_wait = self._sent[0] + 60 - now if len(self._sent) >= self.per_minute else 0.0
        user = min(self._due, key=lambda u: self._published.get(u, 0.0))
        wait = max(budget_wait, self._published.get(user, -1e9) + self.interval - now)
        return (user, None) if wait <= 0 else (None, wait)

    def _sent_now(self) -> float:
        now = self.clock()
        self._sent.append(now)
        return now

    def _publish_safely(self, user: str) -> None:
        try:
            publish_home(self.bot, user)
        except SlackApiError as exc:  # a refresh is best effort: the next change retries
            log.warning("could not refresh %s's Home (%s)", user, exc.response.get("error"))
        except OSError as exc:
            log.warning("could not refresh %s's Home: cannot reach Slack (%s)", user, exc)
        except DeckhandError as exc:  # e.g. Redis is down: the Home cannot be read now
            log.warning("could not refresh %s's Home: %s", user, exc)
