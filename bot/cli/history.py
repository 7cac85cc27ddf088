"""``deckhand where | history | stats``: what runs where, what was deployed, how delivery goes."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from agents.history.deploys import (
    DAY,
    ORG,
    Deploy,
    Stats,
    Timeline,
    Where,
    organisation,
    stats,
)
from agents.history.verify import Observed
from agents.ids import short_id
from agents.org import Org
from agents.services import Services, build_services
from agents.store.manual_locks import ManualLock
from bot.cli.common import (
    Commands,
    add_config_arg,
    add_service_arg,
    in_process_note,
    read_scope,
    run_services,
)
from bot.cli.json_views import history_json, stats_json, where_json
from bot.cli.run_views import print_json
from bot.cli.services import Readers, matrix_table, read_scopes, scope_json
from tools.errors import DeckhandError
from tools.gitlog import GitRepo


def register(commands: Commands) -> None:
    where = commands.add_parser("where", help="which version runs where (drift flagged)",
                                epilog="example: deckhand where production; with services: "
                                       "deckhand where api production")
    _scope_args(where, env_required=False)
    where.add_argument("--verify", action="store_true",
                       help="ask every host which version it serves (history.version_tool)")
    add_json_arg(where)
    add_config_arg(where)
    where.set_defaults(handler=_where)

    history = commands.add_parser("history", help="the last deploys to an environment",
                                  epilog="example: deckhand history production --limit 10; "
                                         "with services: deckhand history api production")
    _scope_args(history, env_required=True)
    history.add_argument("--limit", type=int, default=20)
    add_json_arg(history)
    add_config_arg(history)
    history.set_defaults(handler=_history)

    stats_cmd = commands.add_parser("stats", help="delivery metrics (DORA) per environment",
                                    epilog="example: deckhand stats production --days 30; "
                                           "with services: deckhand stats api")
    _scope_args(stats_cmd, env_required=False)
    stats_cmd.add_argument("--days", type=float, default=30.0)
    add_json_arg(stats_cmd)
    add_config_arg(stats_cmd)
    stats_cmd.set_defaults(handler=_stats)


def _scope_args(parser: argparse.ArgumentParser, *, env_required: bool) -> None:
    """``[SERVICE] ENV`` or ``[SERVICE] [ENV]``: a first word naming a service is one."""
    parser.add_argument("first", nargs=None if env_required else "?",
                        metavar="SERVICE|ENVIRONMENT",
                        help="a service (with `services:`), else an environment")
    parser.add_argument("second", nargs="?", metavar="ENVIRONMENT",
                        help="the environment, after a service")
    add_service_arg(parser)


def add_json_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="JSON for scripts (fields in docs/json.md)")


def _where(args: argparse.Namespace, console: Console) -> int:
    services, org = run_services(args)
    names, environment = read_scope(args, org)
    if org.split:
        return _where_org(services, org, names, environment, args, console)
    states = _states(services, environment)
    held = {env: lock for env, lock in
            services.store.manual_locks.all(service=services.config.key).items()
            if environment in (None, env)}
    if not any(s.hosts for s in states) and not args.json:
        in_process_note(services.store.in_process_reason)
        console.print("No deploys recorded yet.", markup=False)
        _print_locks(console, held)
        return 0
    observed = _observe(services, states) if args.verify else None
    if args.json:
        print_json(where_json(states, observed, held))
    else:
        console.print(where_table(states, observed))
        _print_locks(console, held)
    return 1 if observed and _disagree(states, observed) else 0


def _where_org(services: Services, org: Org, names: list[str], environment: str | None,
               args: argparse.Namespace, console: Console) -> int:
    """The service × environment matrix; ``--verify`` asks one service's hosts."""
    scopes = read_scopes(Readers.of(services), org, names, environment)
    observed = None
    if args.verify:
        if len(names) != 1:
            raise DeckhandError(f"where --verify asks one service's hosts: name it "
                                f"(deckhand where {names[0]} --verify; services: "
                                f"{', '.join(names)})")
        one = build_services(org.services[names[0]], services.settings, store=services.store)
        observed = _observe(one, [s.state for s in scopes])
    if args.json:
        print_json([scope_json(s, observed) for s in scopes])
    elif observed is not None:
        console.print(where_table([s.state for s in scopes], observed))
    else:
        in_process_note(services.store.in_process_reason)
        console.print(matrix_table(scopes))
    return 1 if observed and _disagree([s.state for s in scopes], observed) else 0


def _print_locks(console: Console, held: dict[str, ManualLock]) -> None:
    """Each environment locked by hand, under the table: whoever deploys next reads it."""
    for lock in held.values():
        console.print(f"🔒 {lock.describe()}", markup=False, highlight=False)


def _observe(services: Services, states: list[Where]) -> dict[str, Observed]:
    found = [o for s in states if s.hosts for o in services.observe_versions(s.environment)]
    return {o.host: o for o in found}


def _disagree(states: list[Where], observed: dict[str, Observed]) -> bool:
    return any(o.version is None or o.version != s.hosts[h].version
               for s in states for h, o in observed.items() if h in s.hosts)


def _states(services: Services, environment: str | None) -> list[Where]:
    if environment is not None:
        return [services.store.history.current(services.config.key, environment)]
    recorded = {s.environment: s for s in services.store.history.everywhere(services.config.key)}
    names = [*services.config.inventory.environments, *sorted(recorded)]
    return [recorded.get(n) or Where(environment=n) for n in dict.fromkeys(names)]


def where_table(states: list[Where], observed: dict[str, Observed] | None = None) -> Table:
    """Environment × host: version, since, run; hosts that disagree are marked drift.

    With ``observed``, a column shows what each host itself reported.
    """
    columns = ["environment", "host", "version", "since", "run"]
    table = Table(*columns, *(["host says"] if observed is not None else []), title="Deployed")
    for state in states:
        drift = state.drift
        for host, live in sorted(state.hosts.items()):
            version = Text(live.version or "unknown")
            if host in drift:
                version.append("  drift", style="bold red")
            row = [Text(state.environment), Text(host), version, _when(live.since),
                   Text(short_id(live.run_id))]
            if observed is not None:
                row.append(_said(observed.get(host), live.version))
            table.add_row(*row)
    return table


def _said(seen: Observed | None, recorded: str | None) -> Text:
    if seen is None:
        return Text("not asked", style="dim")
    if seen.version is None:
        return Text(seen.problem or "no version in its output", style="bold red")
    return Text(seen.version, style="green" if seen.version == recorded else "bold red")


def _history(args: argparse.Namespace, console: Console) -> int:
    services, org = run_services(args)
    names, environment = read_scope(args, org)
    if environment is None:
        raise DeckhandError(f"history of which environment? e.g. deckhand history {names[0]} "
                            f"production")
    found = [(name, d) for name in names if _has(org, name, environment)
             for d in services.store.history.recent(org.services[name].key, environment,
                                                    limit=args.limit)]
    found.sort(key=lambda pair: pair[1].finished_at, reverse=True)
    found = found[:args.limit]
    deploys = [d for _, d in found]
    if args.json:
        rows = history_json(deploys)
        if org.split:  # which service's: only where several can meet
            rows = [{"service": name, **row} for (name, _), row in zip(found, rows, strict=True)]
        print_json(rows)
        return 0
    if not deploys:
        in_process_note(services.store.in_process_reason)
        console.print(f"No deploys to {environment} recorded.", markup=False)
        return 0
    console.print(history_table(environment, deploys,
                                [n for n, _ in found] if org.split else None))
    return 0


def _has(org: Org, name: str, environment: str) -> bool:
    """Whether ``name`` has ``environment`` (always, for a one-service config: as before)."""
    return not org.split or environment in org.services[name].inventory.environments


def history_table(environment: str, deploys: list[Deploy],
                  services: list[str] | None = None) -> Table:
    """Deploys newest first; with ``services`` (one per deploy), a column saying whose."""
    columns = ["finished", "version", "outcome", "by", "approved by", "run"]
    table = Table(*(["service"] if services else []), *columns,
                  title=f"Deploys to {environment}, newest first")
    for n, deploy in enumerate(deploys):
        label = deploy.version or "?"
        if deploy.rollback_of_version:
            label = f"{label} (rollback)"
        table.add_row(*([Text(services[n])] if services else []),
                      _when(deploy.finished_at), Text(label), Text(deploy.outcome.value),
                      Text(deploy.requested_by), Text(", ".join(deploy.approvers) or "-"),
                      Text(short_id(deploy.run_id)))
    return table


def _stats(args: argparse.Namespace, console: Console) -> int:
    services, org = run_services(args)
    names, environment = read_scope(args, org)
    now = time.time()
    since = now - args.days * DAY  # the whole window: an index range, never a sample
    rows: list[tuple[str, Stats]] = []
    timelines: list[Timeline] = []
    for name in names:
        config = org.services[name]
        repo = GitRepo(Path(config.history.repo)) if config.history.repo else None
        commit_time = repo.commit_time if repo else None
        envs = [e for e in ([environment] if environment else config.inventory.environments)
                if _has(org, name, e)]
        for env in envs:
            facts = services.store.history.facts_since(config.key, env, since)
            window = config.history.undo_window_hours * 3600
            rows.append((name, stats(facts, environment=env, now=now, days=args.days,
                                     undo_window=window, commit_time=commit_time)))
            timelines.append((facts, commit_time, window))
    figures = [s for _, s in rows]
    if not org.split:
        print_json(stats_json(figures)) if args.json else console.print(stats_table(figures))
        return 0
    total = organisation(timelines, environment=ORG, now=now, days=args.days)
    if args.json:
        print_json([*({"service": n, **row} for (n, _), row in
                      zip(rows, stats_json(figures), strict=True)),
                    {**stats_json([total])[0], "service": None, "environment": None}])
        return 0
    console.print(stats_table(figures, [n for n, _ in rows], total))
    return 0


def stats_table(figures: list[Stats], services: list[str] | None = None,
                total: Stats | None = None) -> Table:
    """Per environment (and service, when given), then the organisation's line."""
    table = Table(*(["service"] if services else []), "environment", "deploys", "per day",
                  "change failure rate", "time to restore", "lead time",
                  title="Delivery (DORA)", caption=_window(figures))
    for n, s in enumerate(figures):
        table.add_row(*([Text(services[n])] if services else []), Text(s.environment),
                      *_figures(s))
    if total is not None:
        table.add_section()
        table.add_row(*(["organisation"] if services else []), "all", *_figures(total),
                      style="bold")
    return table


def _figures(s: Stats) -> list[str]:
    rate = "-" if s.change_failure_rate is None else f"{s.change_failure_rate:.0%}"
    return [str(s.deploys), f"{s.per_day:.2f}", rate, _span(s.time_to_restore),
            _span(s.lead_time)]


def _window(figures: list[Stats]) -> str:
    days = figures[0].days if figures else 0
    return f"every deploy that finished in the last {days:g} days (nothing sampled)"


def _when(at: float | None) -> Text:
    return Text(time.strftime("%Y-%m-%d %H:%M", time.localtime(at)) if at else "-")


def _span(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h" if seconds < 2 * 86400 else f"{seconds / 86400:.1f} d"
