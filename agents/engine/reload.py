"""Reloading the config of a long-running process (on SIGHUP): ``serve``, ``worker``,
``schedules serve``, ``mcp`` and ``audit ship`` alike (``bot.cli.reload``).

The new file is loaded and checked like ``deckhand check`` does; an invalid one is refused
(one log line, audited as ``config_reload_refused``) and the running config stays. A valid
one is swapped into the process's one ``Services`` at once (``Services.swap``): the next
plan, approval and run use it, while a run already executing keeps the executor, inventory
and runners it started with. The policy diff (``agents.policy.diff``) is audited as
``config_reloaded``, so the audit says when who-may-approve changed and how.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from agents.errors import StoreError
from agents.org import Org, load_org
from agents.policy.diff import policy_diff
from agents.services import Services, build_services
from tools.errors import ConfigError, DeckhandError

log = logging.getLogger("deckhand.reload")

Adopt = Callable[[Services], None]
"""Prepares freshly built services before they are swapped in (e.g. wraps the planner)."""
After = Callable[[], None]
"""Runs once each reload request was handled, applied or refused (e.g. a scheduler re-reads
its schedules: SIGHUP means "read again what you run from")."""


class ConfigReload:
    """The one place a process's config is replaced. ``request()`` is safe to call from a
    signal handler: the reload itself runs on this object's thread."""

    def __init__(self, services: Services, *, actor: str, path: Path | None = None,
                 adopt: Iterable[Adopt] = (), after: Iterable[After] = ()):
        self.services, self.actor = services, actor
        self.path = path or services.org.path
        self.adopt = list(adopt)
        self._asked = threading.Event()
        self._lock = threading.Lock()
        self.after = list(after)

    def request(self) -> None:
        self._asked.set()

    def start(self, stop: threading.Event) -> threading.Thread:
        """Reload on each request until ``stop`` is set."""
        thread = threading.Thread(target=self._watch, args=(stop,), daemon=True,
                                  name="config-reload")
        thread.start()
        return thread

    def _watch(self, stop: threading.Event) -> None:
        while not stop.is_set():
            if self._asked.wait(0.5):
                self._asked.clear()
                try:
                    self.reload()
                except Exception:  # a bug: say so, and keep answering the next SIGHUP
                    log.exception("config reload failed, still running the previous config")
                for after in self.after:
                    try:
                        after()
                    except Exception:  # e.g. the store is down: the next SIGHUP tries again
                        log.exception("after the config reload")

    def reload(self) -> bool:
        """Load, check and swap in the config file; False (the old one kept) if invalid, or
        if the store cannot audit the change (who may approve never changes unrecorded)."""
        with self._lock:
            try:
                org = load_org(self.path)  # a face serving one service still serves one
                fresh = build_services(org.only() if self.services.single else org,
                                       self.services.settings, store=self.services.store)
            except DeckhandError as exc:
                return self._refuse(_one_line(exc))
            try:
                return self._swap(fresh)
            except StoreError as exc:
                log.error("config reload not applied, still running the previous config: "
                          "the store cannot record it (%s); send SIGHUP again once it "
                          "answers", exc)
                return False

    def _refuse(self, reason: str) -> bool:
        log.error("config reload refused, still running the previous config: %s", reason)
        try:
            self.services.store.audit.record("config_reload_refused", actor=self.actor,
                                             path=str(self.path), reason=reason)
        except StoreError as exc:
            log.error("the refused reload could not be audited: %s", exc)
        return False

    def _swap(self, fresh: Services) -> bool:
        """Audited first, then swapped: a change the store cannot record is not made."""
        changed, summary = _policy_changes(self.services.org, fresh.org)
        for adopt in self.adopt:  # (only adds redaction to what is shared: safe if undone)
            adopt(fresh)
        self.services.store.audit.record("config_reloaded", actor=self.actor,
                                         path=str(self.path), policy_changed=changed,
                                         diff=summary)
        self.services.swap(fresh)
        log.info("config reloaded from %s: %s", self.path,
                 "; ".join(summary) if summary else "no policy change")
        return True


def _policy_changes(old: Org, new: Org) -> tuple[bool, list[str]]:
    """Whether who-may-do-what changed, and how: per service when there are several
    (a service added or removed is a change: its runs waiting for approval are refused)."""
    if len(old.services) == len(new.services) == 1:
        (before,), (after,) = old.services.values(), new.services.values()
        diff = policy_diff((before.policy, before.inventory), (after.policy, after.inventory))
        return diff.changed, diff.summary()
    changed, summary = False, []
    for name in sorted({*old.services, *new.services}):
        was, now = old.services.get(name), new.services.get(name)
        if was is None or now is None:
            changed = True
            summary.append(f"service {name} {'added' if was is None else 'removed'}")
            continue
        diff = policy_diff((was.policy, was.inventory), (now.policy, now.inventory))
        changed = changed or diff.changed
        summary += [f"{name}: {line}" for line in diff.summary()]
    return changed, summary


def _one_line(exc: DeckhandError) -> str:
    """The first problem at its file:line and field (and how many more there are)."""
    if isinstance(exc, ConfigError) and exc.problems:
        more = len(exc.problems) - 1
        return str(exc.problems[0]) + (f" (and {more} more)" if more else "")
    return str(exc).splitlines()[0]
