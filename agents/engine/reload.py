"""Reloading the config of a running ``serve`` or ``worker`` (on SIGHUP).

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

from agents.config import load_config
from agents.policy.diff import policy_diff
from agents.services import Services, build_services
from tools.errors import ConfigError, DeckhandError

log = logging.getLogger("deckhand.reload")

Adopt = Callable[[Services], None]
"""Prepares freshly built services before they are swapped in (e.g. wraps the planner)."""


class ConfigReload:
    """The one place a process's config is replaced. ``request()`` is safe to call from a
    signal handler: the reload itself runs on this object's thread."""

    def __init__(self, services: Services, *, actor: str, path: Path | None = None,
                 adopt: Iterable[Adopt] = ()):
        self.services, self.actor = services, actor
        self.path = path or services.config.path
        self.adopt = list(adopt)
        self._asked = threading.Event()
        self._lock = threading.Lock()

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
                self.reload()

    def reload(self) -> bool:
        """Load, check and swap in the config file; False (the old one kept) if invalid."""
        with self._lock:
            try:
                config = load_config(self.path)
                fresh = build_services(config, self.services.settings,
                                       store=self.services.store)
            except DeckhandError as exc:
                return self._refuse(_one_line(exc))
            return self._swap(fresh)

    def _refuse(self, reason: str) -> bool:
        log.error("config reload refused, still running the previous config: %s", reason)
        self.services.store.audit.record("config_reload_refused", actor=self.actor,
                                         path=str(self.path), reason=reason)
        return False

    def _swap(self, fresh: Services) -> bool:
        old, new = self.services.config, fresh.config
        diff = policy_diff((old.policy, old.inventory), (new.policy, new.inventory))
        for adopt in self.adopt:
            adopt(fresh)
        self.services.swap(fresh)
        summary = diff.summary()
        self.services.store.audit.record("config_reloaded", actor=self.actor,
                                         path=str(self.path), policy_changed=diff.changed,
                                         diff=summary)
        log.info("config reloaded from %s: %s", self.path,
                 "; ".join(summary) if summary else "no policy change")
        return True


def _one_line(exc: DeckhandError) -> str:
    """The first problem at its file:line and field (and how many more there are)."""
    if isinstance(exc, ConfigError) and exc.problems:
        more = len(exc.problems) - 1
        return str(exc.problems[0]) + (f" (and {more} more)" if more else "")
    return str(exc).splitlines()[0]
