"""``deckhand services``: every service of the organisation with its owners, environments,
what runs where and what holds it; and the service × environment matrix ``where`` prints
for an organisation with ``services:`` (docs/services.md 2.6)."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from agents.history.deploys import Where
from agents.history.verify import Observed
from agents.ids import short_id
from agents.org import Org
from agents.run.record import TERMINAL, Run, RunStatus
from agents.services import Services
from agents.store import History, LockInfo, Locks, ManualLock, ManualLocks, Runs
from bot.cli.common import Commands, add_config_arg, in_process_note, run_services
from bot.cli.json_views import lock_json, where_host
from bot.cli.run_views import print_json

OPEN = [s for s in RunStatus if s not in TERMINAL]
IN_FLIGHT_SCAN = 2_000
"""Open runs read at most (the index of open runs; a store holds far fewer)."""


@dataclass
class Scope:
    """One (service, environment): what is deployed, who holds it, what runs there now."""

    service: str
    state: Where
    lock: LockInfo | None = None
    """A run's lock on it."""
    held: ManualLock | None = None
    """A person's lock on it (``deckhand lock``)."""
    runs: list[Run] = field(default_factory=list)
    """Runs not yet ended that touch it, newest first."""

    @property
    def environment(self) -> str:
        return self.state.environment


@dataclass(frozen=True)
class Readers:
    """The store's nouns ``where`` and ``services`` read."""

    history: History
    locks: Locks
    manual_locks: ManualLocks
    runs: Runs

    @classmethod
    def of(cls, services: Services) -> Readers:
        store = services.store
        return cls(store.history, store.locks, store.manual_locks, store.runs)


def read_scopes(readers: Readers, org: Org, services: list[str],
                environment: str | None = None) -> list[Scope]:
    """Every environment of ``services`` (configured, then any only history knows), or
    only ``environment``: the ``where`` keys in one MGET, the run locks in another, the
    open runs from their index once."""
    keys = {name: org.services[name].key for name in services}
    recorded = {(w.service, w.environment): w for w in readers.history.matrix(keys.values())}
    locks = {(i.service, i.environment): i for i in readers.locks.all()}
    held = readers.manual_locks.everywhere()
    runs = _open_runs(readers.runs)
    out: list[Scope] = []
    for name in services:
        key = keys[name]
        known = [*org.services[name].inventory.environments,
                 *sorted(env for svc, env in recorded if svc == key)]
        for env in dict.fromkeys(known):
            if environment not in (None, env):
                continue
            state = recorded.get((key, env)) or Where(environment=env, service=key)
            out.append(Scope(name, state, locks.get((key, env)), held.get((key, env)),
                             runs.get((key, env), [])))
    return out


def _open_runs(runs: Runs) -> dict[tuple[str | None, str], list[Run]]:
    found: dict[tuple[str | None, str], list[Run]] = {}
    for run in runs.recent(limit=IN_FLIGHT_SCAN, statuses=OPEN):
        for env in run.environments:
            found.setdefault((run.service, env), []).append(run)
    return found


def register(commands: Commands) -> None:
    cmd = commands.add_parser("services", help="every service: owners, environments, what "
                                               "runs where, locks",
                              epilog="example: deckhand services --json")
    cmd.add_argument("--json", action="store_true",
                     help="JSON for scripts (fields in docs/json.md)")
    add_config_arg(cmd)
    cmd.set_defaults(handler=_services)


def _services(args: argparse.Namespace, console: Console) -> int:
    services, org = run_services(args)
    scopes = read_scopes(Readers.of(services), org, list(org.services))
    if args.json:
        print_json(services_json(org, scopes))
        return 0
    in_process_note(services.store.in_process_reason)
    console.print(services_table(org, scopes))
    return 0


def services_json(org: Org, scopes: list[Scope]) -> list[dict[str, Any]]:
    """One object per service, in config order, its environments as ``where`` reads them."""
    return [{"service": name, "legacy": name == org.legacy, "path": str(config.path),
             "owners": _owners(org, name),
             "environments": [scope_json(s) for s in scopes if s.service == name]}
            for name, config in org.services.items()]


def _owners(org: Org, name: str) -> dict[str, Any] | None:
    owners = org.services[name].owners
    if owners is None:
        return None
    who = owners.approvers
    return {"users": list(who.users), "groups": list(who.groups), "source": owners.source}


def scope_json(scope: Scope, observed: dict[str, Observed] | None = None) -> dict[str, Any]:
    """A scope as ``where --json`` adds it up for an organisation (docs/json.md): the
    one-service object's fields, ``service``, the run holding it and the runs in flight."""
    state = scope.state
    return {"service": scope.service, "environment": state.environment,
            "version": state.version, "since": state.since, "by": state.by,
            "run_id": state.run_id,
            "hosts": [where_host(state, h, observed) for h in sorted(state.hosts)],
            "lock": lock_json(scope.held),
            "run_lock": None if scope.lock is None else {
                "run_id": scope.lock.run_id, "worker": scope.lock.worker,
                "since": scope.lock.since},
            "in_flight": [{"run_id": r.id, "status": r.status.value} for r in scope.runs]}


def services_table(org: Org, scopes: list[Scope]) -> Table:
    table = Table("service", "owners", "environments", title="Services")
    for name in org.services:
        owners = org.services[name].owners
        who = owners.approvers.describe() if owners else "-"
        envs = Text()
        for scope in (s for s in scopes if s.service == name):
            envs.append(f"{scope.environment}: ")
            envs.append_text(_cell(scope))
            envs.append("\n")
        envs.rstrip()
        table.add_row(Text(name), Text(who), envs)
    return table


def matrix_table(scopes: list[Scope]) -> Table:
    """Service × environment: version (drift flagged), since, who holds it, runs in flight."""
    table = Table("service", "environment", "version", "since", "lock", "in flight",
                  title="Deployed")
    for scope in scopes:
        table.add_row(Text(scope.service), Text(scope.environment), _version(scope.state),
                      Text(_when(scope.state.since)), _locks(scope),
                      Text(", ".join(f"{short_id(r.id)} {r.status.value}" for r in scope.runs)
                           or "-"))
    return table


def _cell(scope: Scope) -> Text:
    out = _version(scope.state)
    if scope.held is not None:
        out.append(f"  🔒 {scope.held.holder}")
    if scope.lock is not None:
        out.append(f"  locked by {scope.lock.run_id}")
    if scope.runs:
        out.append(f"  {len(scope.runs)} in flight")
    return out


def _version(state: Where) -> Text:
    text = Text(state.version or "-")
    drift = state.drift
    if drift and state.hosts:
        text.append(f"  drift: {', '.join(sorted(drift))}", style="bold red")
    return text


def _locks(scope: Scope) -> Text:
    parts = []
    if scope.held is not None:
        parts.append(f"🔒 {scope.held.holder}: {scope.held.reason}")
    if scope.lock is not None:
        parts.append(f"run {scope.lock.run_id}")
    return Text("; ".join(parts) or "-")


def _when(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at)) if at else "-"
