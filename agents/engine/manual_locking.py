"""Locking an environment by hand, from every face (``deckhand lock``, ``.lock`` in Slack):
the same policy as approving there (who may approve it may lock and unlock it; the holder
may always lift their own), a reason always, an expiry if asked. The lock itself, and the
refusals it causes, live in ``agents.store.manual_locks``."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

from agents.errors import ManualLockRefused, NotFound
from agents.ids import short_id
from agents.policy.eligibility import eligibility, of_scopes
from agents.policy.freeze import Frozen
from agents.run.record import Run, RunStatus
from agents.said import Said
from agents.services import Services
from agents.store.manual_locks import ManualLock

MAX_REASON = 300
_PART = re.compile(r"(\d+)\s*([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_UNDER_WAY = (RunStatus.APPROVED, RunStatus.QUEUED, RunStatus.RUNNING)


@dataclass(frozen=True)
class LockAsked:
    """What the person asked: the environment as typed, why, and until when (None: until
    unlocked)."""

    environment: str
    reason: str
    until: float | None = None


def lock(services: Services, asked: LockAsked, *, user: str, groups: Iterable[str] = (),
         face: str) -> str:
    """Lock ``asked.environment`` for ``user`` and say what that means (ManualLockRefused:
    not an approver there, or someone else holds it; audited)."""
    with _refusal_audited(services, "lock", user, face, asked.environment):
        return _lock(services, asked, user=user, groups=groups, face=face)


def unlock(services: Services, environment: str, *, user: str, groups: Iterable[str] = (),
           face: str) -> str:
    """Lift the lock on ``environment``: its holder, or anyone who may approve there (a
    refusal is audited)."""
    with _refusal_audited(services, "unlock", user, face, environment):
        return _unlock(services, environment, user=user, groups=groups, face=face)


@contextmanager
def _refusal_audited(services: Services, what: str, user: str, face: str,
                     environment: str) -> Iterator[None]:
    try:
        yield
    except (ManualLockRefused, NotFound) as exc:
        services.store.audit.refused(what, actor=user, face=face, rule=str(exc),
                                     environment=environment)
        raise


def _lock(services: Services, asked: LockAsked, *, user: str, groups: Iterable[str],
          face: str) -> str:
    env = known_environment(services, asked.environment)
    reason = " ".join(asked.reason.split())
    if not reason:
        raise ManualLockRefused("a lock needs a reason (--reason \"db migration\"): it is "
                                "what everyone refused is told")
    if len(reason) > MAX_REASON:
        raise ManualLockRefused(f"the reason is {len(reason)} characters; at most "
                                f"{MAX_REASON}")
    now = services.clock()
    if asked.until is not None and asked.until <= now:
        raise ManualLockRefused("the expiry is in the past; give --for 2h or a later --until")
    _may(services, env, user, groups, "lock")
    held = ManualLock(env, holder=user, reason=reason, since=now, until=asked.until,
                      service=services.config.key, via=face)
    services.store.manual_locks.take(held, face=face)
    return f"🔒 {held.describe()}. {_meaning(services, env)}"


def _unlock(services: Services, environment: str, *, user: str, groups: Iterable[str],
            face: str) -> str:
    env = known_environment(services, environment)
    store = services.store.manual_locks
    held = store.get(env, service=services.config.key)
    if held is None:
        raise ManualLockRefused(f"{env} is not locked; nothing to unlock")
    if held.holder != user:
        _may(services, env, user, groups, "unlock")
    store.release(env, service=services.config.key, by=user, face=face, holder=held.holder)
    whose = "" if held.holder == user else \
        f" (it was held by {held.holder} since {held.since_text}: {held.reason})"
    return f"🔓 {env} is unlocked by {user}{whose}. New plans and approvals there may go ahead."


def _may(services: Services, env: str, user: str, groups: Iterable[str], verb: str) -> None:
    answer = eligibility(of_scopes([env], requested_by=""), services.config.policy)
    if not answer.allows(user, list(groups)):
        raise ManualLockRefused(Said(f"only someone who may approve {env} may {verb} it. "
                                     f"Who can: ", answer.who()))


def _meaning(services: Services, env: str) -> str:
    """What the lock does: the runs it does not stop, and those it keeps from starting."""
    runs = [r for r in services.store.runs.recent(limit=200, statuses=_UNDER_WAY)
            if env in r.environments]
    running = [r for r in runs if r.status is RunStatus.RUNNING]
    waiting = [r for r in runs if r.status is not RunStatus.RUNNING]
    text = (f"New plans, approvals and starts in {env} are refused until it is unlocked "
            f"(`deckhand unlock {env}` or `.unlock {env}`)")
    if running:
        text += f"; a run already running is not stopped: {_listed(running)}"
    if waiting:
        text += f"; approved runs that have not started will not start: {_listed(waiting)}"
    return text + "."


def _listed(runs: list[Run]) -> str:
    return ", ".join(f"{short_id(r.id)} ({r.status.value})" for r in runs[:5])


def known_environment(services: Services, typed: str) -> str:
    """The environment ``typed`` names (a name or an alias), or NotFound listing them."""
    environments = services.config.inventory.environments
    if typed in environments:
        return typed
    aliases = {a: name for name, e in environments.items() for a in e.aliases}
    if typed.lower() in aliases:
        return aliases[typed.lower()]
    raise NotFound(f"no environment {typed!r}; known: {', '.join(environments) or 'none'}")


def parse_expiry(*, for_: str | None, until: str | None, now: float) -> float | None:
    """``--for 2h`` (s, m, h, d, w; ``1h30m``) or ``--until`` an ISO 8601 time (UTC unless
    it says otherwise) as an epoch, or None for a lock until unlocked."""
    if for_ and until:
        raise ManualLockRefused("give --for or --until, not both")
    if for_:
        return now + _seconds(for_)
    if until:
        return _moment(until).timestamp()
    return None


def _seconds(text: str) -> float:
    compact = text.strip().lower().replace(" ", "")
    parts = _PART.findall(compact)
    if not parts or "".join(n + u for n, u in parts) != compact:
        raise ManualLockRefused(f"--for {text!r} is not a duration; write e.g. 30m, 2h, "
                                f"1h30m or 1d")
    seconds = sum(int(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise ManualLockRefused("--for must be longer than 0")
    return float(seconds)


def _moment(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ManualLockRefused(f"--until {text!r} is not a time; write ISO 8601, e.g. "
                                f"2026-12-01T18:00Z") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)




LOCK_VERBS = {"lock": "lock", ".lock": "lock", "!lock": "lock",
              "unlock": "unlock", ".unlock": "unlock", "!unlock": "unlock"}
"""The words that lock or unlock by hand in chat (branch-deploy's ``.lock``, hubot's ``!``)."""


def said_in_chat(services: Services, words: list[str], *, user: str, groups: Iterable[str],
                 face: str) -> str:
    """``lock ENV --reason "…" [--for 2h | --until TIME]`` or ``unlock ENV``, as split by
    the chat face (the verb first, as in ``LOCK_VERBS``); a reason may also follow ENV
    without ``--reason``. What to say back (ManualLockRefused: why not)."""
    verb, rest = LOCK_VERBS[words[0].lower()], words[1:]
    if not rest:
        raise ManualLockRefused(f"which environment? e.g. `.{verb} production"
                                + (' --reason "db migration"`' if verb == "lock" else "`"))
    if verb == "unlock":
        return unlock(services, rest[0], user=user, groups=groups, face=face)
    flags, loose = _flags(rest[1:])
    reason = flags.get("reason") or " ".join(loose)
    until = parse_expiry(for_=flags.get("for"), until=flags.get("until"), now=services.clock())
    return lock(services, LockAsked(rest[0], reason, until), user=user, groups=groups,
                face=face)


def _flags(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """``--reason R --for 2h`` → ({reason: R, for: 2h}, words that are no flag)."""
    flags: dict[str, str] = {}
    loose: list[str] = []
    at = iter(words)
    for word in at:
        name = word.removeprefix("--")
        if word.startswith("--") and name in ("reason", "for", "until"):
            value = next(at, None)
            if value is None:
                raise ManualLockRefused(f"{word} needs a value, e.g. {word} "
                                        + {"reason": '"db migration"', "for": "2h",
                                           "until": "2026-12-01T18:00Z"}[name])
            flags[name] = value
        elif word.startswith("--"):
            raise ManualLockRefused(f"unknown option {word}; a lock takes --reason, --for "
                                    f"and --until")
        else:
            loose.append(word)
    return flags, loose


@dataclass(frozen=True)
class Outlook:
    """``.wcid`` (where can I deploy) for one environment, as one person sees it now."""

    environment: str
    may_approve: bool
    held: ManualLock | None = None
    frozen: Frozen | None = None
    deploying: str | None = None
    """The run holding the environment's run lock, if one is deploying there now."""


NOOP_VERBS = frozenset({".noop", "!noop", "noop"})
"""branch-deploy's dry run: ``.noop v1.2.3 to staging`` (the request's checks, nothing changed)."""
WCID = re.compile(r"[.!]?wcid|where can i deploy\??", re.IGNORECASE)
"""branch-deploy's ``.wcid`` and its words."""


def where_can_i_deploy(services: Services, *, user: str, groups: Iterable[str] = ()
                       ) -> list[Outlook]:
    """Each environment with its lock by hand, its freeze, the run deploying there and
    whether ``user`` may approve there (the same answers a plan and an approval get)."""
    store, policy = services.store, services.config.policy
    held = store.manual_locks.all(service=services.config.key)
    running = {env: info.run_id for env, info in store.locks.of(services.config.key).items()}
    listed = list(groups)
    return [Outlook(env, eligibility(of_scopes([env]), policy).allows(user, listed),
                    held.get(env), services.frozen([env]), running.get(env))
            for env in services.config.inventory.environments]
