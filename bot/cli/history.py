"""``deckhand where | history | stats``: what runs where, what was deployed, how delivery goes."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from agents.history.deploys import DAY, Deploy, Stats, Where, stats
from agents.history.verify import Observed
from agents.ids import short_id
from agents.services import Services
from agents.store.manual_locks import ManualLock
from bot.cli.common import Commands, add_config_arg, in_process_note, services_for
from bot.cli.json_views import history_json, stats_json, where_json
from bot.cli.run_views import print_json
from tools.gitlog import GitRepo


def register(commands: Commands) -> None:
    where = commands.add_parser("where", help="which version runs where (drift flagged)",
                                epilog="example: deckhand where production")
    where.add_argument("environment", nargs="?")
    where.add_argument("--verify", action="store_true",
                       help="ask every host which version it serves (history.version_tool)")
    add_json_arg(where)
    add_config_arg(where)
    where.set_defaults(handler=_where)

    history = commands.add_parser("history", help="the last deploys to an environment",
                                  epilog="example: deckhand history production --limit 10")
    history.add_argument("environment")
    history.add_argument("--limit", type=int, default=20)
    add_json_arg(history)
    add_config_arg(history)
    history.set_defaults(handler=_history)

    stats_cmd = commands.add_parser("stats", help="delivery metrics (DORA) per environment",
                                    epilog="example: deckhand stats production --days 30")
    stats_cmd.add_argument("environment", nargs="?")
    stats_cmd.add_argument("--days", type=float, default=30.0)
    add_json_arg(stats_cmd)
    add_config_arg(stats_cmd)
    stats_cmd.set_defaults(handler=_stats)


def add_json_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="JSON for scripts (fields in docs/json.md)")


def _where(args: argparse.Namespace, console: Console) -> int:
    services = services_for(args)
    states = _states(services, args.environment)
    held = {env: lock for env, lock in
            services.store.manual_locks.all(service=services.config.key).items()
            if args.environment in (None, env)}
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
    services = services_for(args)
    deploys = services.store.history.recent(services.config.key, args.environment,
                                            limit=args.limit)
    if args.json:
        print_json(history_json(deploys))
        return 0
    if not deploys:
        in_process_note(services.store.in_process_reason)
        console.print(f"No deploys to {args.environment} recorded.", markup=False)
        return 0
    console.print(history_table(args.environment, deploys))
    return 0


def history_table(environment: str, deploys: list[Deploy]) -> Table:
    table = Table("finished", "version", "outcome", "by", "approved by", "run",
                  title=f"Deploys to {environment}, newest first")
    for deploy in deploys:
        label = deploy.version or "?"
        if deploy.rollback_of_version:
            label = f"{label} (rollback)"
        table.add_row(_when(deploy.finished_at), Text(label), Text(deploy.outcome.value),
                      Text(deploy.requested_by), Text(", ".join(deploy.approvers) or "-"),
                      Text(short_id(deploy.run_id)))
    return table


def _stats(args: argparse.Namespace, console: Console) -> int:
    services = services_for(args)
    settings = services.config.history
    repo = GitRepo(Path(settings.repo)) if settings.repo else None
    envs = [args.environment] if args.environment else list(services.config.inventory.environments)
    now = time.time()
    since = now - args.days * DAY  # the whole window: an index range, never a sample
    key = services.config.key
    figures = [stats(services.store.history.facts_since(key, env, since), environment=env, now=now,
                     days=args.days, undo_window=settings.undo_window_hours * 3600,
                     commit_time=repo.commit_time if repo else None) for env in envs]
    if args.json:
        print_json(stats_json(figures))
        return 0
    console.print(stats_table(figures))
    return 0


def stats_table(figures: list[Stats]) -> Table:
    table = Table("environment", "deploys", "per day", "change failure rate",
                  "time to restore", "lead time", title="Delivery (DORA)",
                  caption=_window(figures))
    for s in figures:
        rate = "-" if s.change_failure_rate is None else f"{s.change_failure_rate:.0%}"
        table.add_row(Text(s.environment), str(s.deploys), f"{s.per_day:.2f}", rate,
                      _span(s.time_to_restore), _span(s.lead_time))
    return table


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
