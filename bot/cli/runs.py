"""``deckhand worker | runs | audit``: the store and its workers from the terminal."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.prompt import Prompt
from rich.table import Table
from rich.text import Text

from agents import tracing
from agents.engine.desk import RunDesk
from agents.engine.retention import JOB as RETENTION_JOB
from agents.engine.retention import kept_runs
from agents.engine.shipper import shipper_for, start_in_thread
from agents.engine.worker import Worker, WorkerOptions
from agents.errors import AmbiguousId, NotFound, ServiceUnknown
from agents.faces import Face
from agents.history.archived import ArchiveNote, missing_run_text, read_archived
from agents.ids import short_id
from agents.org import Org
from agents.plan.model import Plan
from agents.policy.approvals import approvals_needed
from agents.readiness import StoreProbe
from agents.run.gates import gate_lines
from agents.run.judgment import judgment_lines
from agents.run.record import Run
from agents.run.unreplicated import replica_wait_line, unreplicated_note
from agents.services import Services
from agents.settings import Settings
from agents.store import Locks, Plans, Runs
from agents.store.audit import AuditEntry
from bot.cli.audit_chain import handle as audit_chain_handle
from bot.cli.common import (
    Commands,
    add_config_arg,
    add_service_arg,
    add_user_args,
    confirmer,
    embedded_store_note,
    run_services,
    service_of_run,
    services_for,
)
from bot.cli.drain import DRAIN_STORE_WAIT, leave_now, watch_store
from bot.cli.health import warn_about_redis
from bot.cli.reload import reload_on_sighup
from bot.cli.run_views import (
    ALL_STEPS,
    print_json,
    run_detail_json,
    run_summary_json,
    show_output,
)
from bot.healthcheck import advertise, withdraw
from bot.logs import add_log_format_arg, announce
from bot.terminal.console import Confirm, confirmation_problem
from bot.terminal.render import paused_line, provenance_text, status_table, summary
from tools.errors import DeckhandError

if TYPE_CHECKING:
    from bot.metrics import Metrics


def register(commands: Commands) -> None:
    worker = commands.add_parser("worker", help="execute approved runs from the Redis queue")
    worker.add_argument("--name", help="consumer name (default host-pid)")
    worker.add_argument("--lease", type=float, default=30.0, help="seconds a claim lasts")
    worker.add_argument("--claim-after", type=float, default=60.0,
                        help="seconds before a dead worker's run is taken over")
    worker.add_argument("--once", action="store_true", help="handle one queue entry and exit")
    worker.add_argument("--metrics-port", type=int, default=None,
                        help="serve Prometheus metrics at http://HOST:PORT/metrics")
    worker.add_argument("--metrics-host", default=None,
                        help="address for --metrics-port (default $DECKHAND_METRICS_HOST, "
                             "else loopback only)")
    worker.add_argument("--stuck-after", type=float, default=None,
                        help="seconds without progress before /healthz says stuck "
                             "(default max(60, 3 × --lease))")
    worker.add_argument("--drain-store-wait", type=float, default=DRAIN_STORE_WAIT,
                        help="while draining, exit once the store has not answered for this "
                             "many seconds (no primary); the run is taken over (default 10)")
    add_config_arg(worker)
    add_log_format_arg(worker)
    worker.set_defaults(handler=_worker)

    runs = commands.add_parser("runs", help="recent runs, or one run in detail")
    runs.add_argument("action", nargs="?", choices=["list", "show"], default="list")
    runs.add_argument("run_id", nargs="?")
    runs.add_argument("--limit", type=int, default=20)
    runs.add_argument("--archive", type=Path, metavar="FILE",
                      help="show: read the run from a retention export file (a run "
                           "retention trimmed from Redis)")
    runs.add_argument("--timeline", type=Path, metavar="PNG",
                      help="with show: save the run's timeline chart to this PNG file")
    runs.add_argument("--llm", action="store_true",
                      help="with show: what made each plan version (prompt version, model, "
                           "tokens, latency, repairs, the model's answer)")
    runs.add_argument("--output", nargs="?", const=ALL_STEPS, default=None, metavar="STEP",
                      help="with show: what the steps printed (one STEP, or all), redacted, "
                           "paged at a terminal")
    runs.add_argument("--host", help="with show --output: only this host's output")
    runs.add_argument("--json", action="store_true",
                      help="JSON for scripts (fields in docs/json.md)")
    add_config_arg(runs)
    runs.set_defaults(handler=_runs)

    audit = commands.add_parser("audit", help="who did what when (append-only, hash-chained)")
    audit.add_argument("what", nargs="?",
                       choices=["log", "verify", "export", "ship", "checkpoint"],
                       default="log",
                       help="verify: check the hash chain and its signed checkpoints, exit 1 "
                            "at the first broken link; export: entries with their links as "
                            "JSON lines; ship: send them to audit.sink as they come; "
                            "checkpoint: sign the chain's head (DECKHAND_AUDIT_KEY_FILE)")
    audit.add_argument("--full", action="store_true",
                       help="with verify: walk the whole chain, not only what came after "
                            "the last verified checkpoint")
    audit.add_argument("--since", help="with export: a date, a time or an age (24h, 7d)")
    audit.add_argument("--copy", metavar="FILE",
                       help="with verify: check a copy (the sink's or export's JSON lines; "
                            "- for stdin) instead of Redis")
    audit.add_argument("--once", action="store_true",
                       help="with ship: send what is there now, then exit")
    audit.add_argument("--name", help="with ship: this shipper's name, the lease's owner "
                                      "(default: the host name; a restart under the same "
                                      "name takes the lease back at once)")
    audit.add_argument("--format", default="jsonl", help="with export: jsonl")
    audit.add_argument("--run", dest="run_id")
    audit.add_argument("--service", metavar="NAME",
                       help="only entries about this service's runs, plans and locks "
                            "(among the newest 10 × --limit)")
    audit.add_argument("--json", action="store_true",
                       help="JSON lines for scripts (fields in docs/json.md)")
    audit.add_argument("--limit", type=int, default=200)
    add_config_arg(audit)
    add_log_format_arg(audit)  # ship runs for good, as a worker does
    audit.set_defaults(handler=_audit)

    approve = commands.add_parser("approve", help="approve a waiting run (as --user)")
    approve.add_argument("run_id")
    add_user_args(approve, who="who approves")
    add_config_arg(approve)
    add_service_arg(approve)
    approve.set_defaults(handler=_approve)



def _worker(args: argparse.Namespace, console: Console) -> int:
    settings = Settings()
    services = services_for(args)
    warn_about_redis(services.store.health)
    options = WorkerOptions(lease=args.lease, claim_after=args.claim_after,
                            stuck_after=args.stuck_after)
    metrics = _worker_metrics(args, services)
    worker = Worker(services, services.store, name=args.name, options=options,
                    listener_factories=[metrics.run_listener_factory(services.store.plans)]
                    if metrics else [])
    if args.once:
        return 0 if worker.step() else 1
    probe = StoreProbe(services.store.ping_primary)
    if metrics is not None:
        _serve_worker_port(args, settings, metrics, worker, probe, console)
    stop = threading.Event()
    _ship_audit(services, worker.name, stop)
    _drain_on_signals(stop, console, services.store.ping_primary, wait=args.drain_store_wait)
    reload_on_sighup(services, actor=worker.name, stop=stop,  # a new planner is counted too
                     adopt=[lambda fresh: observe_planners(metrics, fresh)]
                     if metrics else [])
    announce(console, f"worker {worker.name} on {services.store.where}; Ctrl-C (or SIGTERM) "
                      f"drains: the current run finishes, no new one starts; SIGHUP reloads "
                      f"the config")
    try:
        worker.serve(stop)
    except KeyboardInterrupt:
        pass
    finally:
        withdraw(settings.health_file)
        services.close()
    return 0


def _drain_on_signals(stop: threading.Event, console: Console, ping: Callable[[], object],
                      *, wait: float) -> None:
    """SIGTERM or Ctrl-C: finish the run in hand, take no new one, exit. A second one stops
    at once; the run is then taken over by another worker when this one's lease runs out.
    So does a store that stops answering for ``wait`` seconds while draining
    (``bot.cli.drain``), said when the outage starts and when it gives up."""
    def handle(signum: int, frame: object) -> None:
        if stop.is_set():
            leave_now(console, "stopping now, without finishing the run in hand: another "
                               "worker takes it over after this one's lease")
        stop.set()
        announce(console, "draining: finishing the current run (again to stop now; another "
                          "worker takes the run over after this one's lease)")
        watch_store(console, ping, wait=wait, doing="draining")

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


def _worker_metrics(args: argparse.Namespace, services: Services) -> Metrics | None:
    """With --metrics-port: this worker's metrics (its runs, queue and SSH figures)."""
    if args.metrics_port is None:
        return None
    from bot.metrics import Metrics

    metrics = Metrics()
    observe_planners(metrics, services)  # replans call the model from workers
    metrics.watch_queue(services.store.queue)
    metrics.watch_ssh(lambda: services.runners.setup_stats)
    if services.common.audit.sink is not None:
        metrics.watch_audit_sink(services.store.feed)
    return metrics


def observe_planners(metrics: Metrics, services: Services) -> None:
    """Count the retried model calls of every service's planner (built now, so a run's
    replan is counted whichever service it is)."""
    for name in services.org.services:
        metrics.observe_retries(services.service(name).planner)


def _ship_audit(services: Services, name: str, stop: threading.Event) -> None:
    """With ``audit.sink``: ship the audit stream on a thread of its own (one process at a
    time across workers; the others stand by for its lease)."""
    shipper = shipper_for(services, owner=name)
    if shipper is not None:
        start_in_thread(shipper, stop)


def _serve_worker_port(args: argparse.Namespace, settings: Settings, metrics: Metrics,
                       worker: Worker, probe: StoreProbe, console: Console) -> None:
    """/metrics, /healthz (stuck or not) and /readyz (Redis answers) on --metrics-port."""
    from bot.worker_http import serve_worker_http, worker_app

    host = args.metrics_host or settings.metrics_host
    serve_worker_http(worker_app(metrics.wsgi_app(), worker.liveness, probe), host=host,
                      port=args.metrics_port)
    announce(console, f"metrics and health on http://{host}:{args.metrics_port}/metrics "
                      f"(/healthz, /readyz)")
    problem = advertise(host, args.metrics_port, settings.health_file)  # the HEALTHCHECK's
    if problem:
        announce(console, problem, level=logging.WARNING)


def _runs(args: argparse.Namespace, console: Console) -> int:
    embedded_store_note()
    services = services_for(args)
    if args.action == "show":
        if not args.run_id:
            console.print("usage: deckhand runs show RUN_ID")
            return 2
        return _show_run(args, console, services)
    if args.json:
        print_json([run_summary_json(r) for r in services.store.runs.recent(limit=args.limit)])
        return 0
    console.print(runs_table(services.store.runs.recent(limit=args.limit)))
    return 0


def _show_run(args: argparse.Namespace, console: Console, services: Services) -> int:
    store = services.store
    kept = _kept_runs(services)
    source = args.archive if args.archive is not None else kept
    if source is not None:
        run, plan = read_archived(source, args.run_id)
        if not args.json:  # --json prints the run and nothing else
            console.print(f"from the archive {source} (trimmed from Redis)" if source is
                          args.archive else f"from {source} (runs kept by deckhand run "
                          f"without REDIS_URL)", highlight=False, soft_wrap=True)
    else:
        run, plan = _stored_run(args.run_id, runs=store.runs, locks=store.locks,
                                plans=store.plans)
    with contextlib.suppress(ServiceUnknown):  # its hosts are its service's (if served)
        services = services.for_run(run)
    if args.output is not None:
        return show_output(console, services, run, step=args.output, host=args.host,
                           as_json=args.json)
    if args.json:
        print_json(run_detail_json(run, plan))
        return 0
    console.print(status_table(plan, run, services.host_counts(plan)))
    console.print(summary(plan, run))
    if run.paused is not None:
        console.print(Text(pause_line(run)), soft_wrap=True)
    waiting = replica_wait_line(run)
    if waiting:
        console.print(Text(f"⏳ {waiting}"), soft_wrap=True)
    for line in gate_lines(run):  # every measured value against its threshold
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    for line in judgment_lines(run):  # go/no-go between batches: decided, or waiting
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    note = unreplicated_note(run)
    if note:
        console.print(Text(f"⚠ {note}"), soft_wrap=True)
    found = tracing.reference(run.meta.get("traceparent"), services.settings.trace_url)
    if found:
        console.print(f"trace: {found}", highlight=False, soft_wrap=True)
    if args.llm:
        versions = dict.fromkeys(run.plan_versions or [run.plan_version])
        console.print(provenance_text([store.plans.get(run.plan_id, v) for v in versions]))
    if args.timeline:
        from bot import charts

        charts.require("--timeline")
        from bot.timeline import save_timeline  # matplotlib loads only when asked

        drawn = save_timeline(plan, run, args.timeline)
        console.print(f"timeline: {args.timeline} ({drawn.width}×{drawn.height}, "
                      f"{len(drawn.bars)} bars)")
    return 0


def _kept_runs(services: Services) -> Path | None:
    """Without REDIS_URL: the state directory's record of the runs executed on the
    in-process store (``retention.keep_run``), if there is one."""
    if not services.store.embedded:
        return None
    state_dir = services.config.state_dir  # the service's (--service, with several)
    if state_dir is None:
        return None
    path = kept_runs(state_dir)
    return path if path.exists() else None


def pause_line(run: Run) -> str:
    """The live table's pause line, with the command that lifts it."""
    line = paused_line(run)
    return line + f" (`deckhand resume {short_id(run.id)}`)" if line else ""


def _stored_run(typed: str, *, runs: Runs, locks: Locks, plans: Plans) -> tuple[Run, Plan]:
    try:
        run = runs.find(typed)
    except NotFound as exc:  # retention may have moved it to its export file
        note = locks.job_note(RETENTION_JOB)
        archived = missing_run_text(typed, ArchiveNote(float(note["cutoff"]), str(
            note["export"])) if note else None)
        if archived is None:
            raise
        raise NotFound(archived) from exc
    return run, plans.get(run.plan_id, run.plan_version)


def runs_table(runs: list[Run]) -> Table:
    table = Table("run", "status", "goal", "requested by", "started", "took")
    for run in runs:
        started = time.strftime("%m-%d %H:%M", time.localtime(run.started_at or run.created_at))
        took = f"{run.duration:.0f}s" if run.duration is not None else ""
        table.add_row(short_id(run.id), run.status.value, Text(run.goal),
                      Text(run.requested_by), started, took)
    return table


def _audit(args: argparse.Namespace, console: Console) -> int:
    embedded_store_note()
    services, org = run_services(args)  # entries of every service: read-only
    store = services.store
    if args.what != "log":
        return audit_chain_handle(args, services, console)
    run_id = _audited_run(store.runs, args.run_id) if args.run_id else None
    wanted = org.index.names.get(args.service.lower()) if args.service else None
    if args.service and wanted is None:
        raise DeckhandError(f"{args.service!r} is not a service of {org.path.name} (known: "
                            f"{', '.join(org.services)})")
    scan = args.limit * 10 if wanted else args.limit
    entries = store.audit.entries(run_id=run_id, limit=scan)
    named: list[str | None] = (audited_services(entries, store.runs, store.plans, org)
                               if org.split or wanted else [None] * len(entries))
    if wanted:
        kept = [(e, n) for e, n in zip(entries, named, strict=True) if n == wanted][-args.limit:]
        entries, named = [e for e, _ in kept], [n for _, n in kept]
    if args.json:
        for entry, name in zip(entries, named, strict=True):
            line = entry.as_json() if not org.split else json.dumps(
                {**entry.__dict__, "service": name}, sort_keys=True)
            sys.stdout.write(line + "\n")
        return 0
    table = Table("when", "who", "action", *(["service"] if org.split else []), "run",
                  "details")
    for entry, name in zip(entries, named, strict=True):
        details = ", ".join(f"{k}={v}" for k, v in entry.details.items() if v is not None)
        table.add_row(time.strftime("%m-%d %H:%M:%S", time.localtime(entry.at)),
                      Text(entry.actor), entry.action,
                      *([Text(name or "-")] if org.split else []),
                      short_id(entry.run_id) if entry.run_id else "", Text(details))
    console.print(table)
    return 0


def audited_services(entries: list[AuditEntry], runs: Runs, plans: Plans,
                     org: Org) -> list[str | None]:
    """The service each entry is about: its ``service`` detail (locks by hand), else its
    run's, else its plan's (records name theirs; none: the legacy service). None when
    neither record is left (trimmed by retention) or the entry is about no run or plan."""
    by_run = {r.id: r.service for r in runs.by_id(
        list(dict.fromkeys(e.run_id for e in entries if e.run_id)))}
    plan_ids = list(dict.fromkeys(e.plan_id for e in entries
                                  if e.plan_id and not (e.run_id and e.run_id in by_run)))
    by_plan = {p.id: p.service for p in (_plan(plans, i) for i in plan_ids) if p is not None}
    out: list[str | None] = []
    for entry in entries:
        if "service" in entry.details:
            key = entry.details.get("service")
        elif entry.run_id and entry.run_id in by_run:
            key = by_run[entry.run_id]
        elif entry.plan_id and entry.plan_id in by_plan:
            key = by_plan[entry.plan_id]
        else:
            out.append(None)
            continue
        out.append(key if key is not None else org.legacy)
    return out


def _plan(plans: Plans, plan_id: str) -> Plan | None:
    try:
        return plans.get(plan_id)
    except NotFound:
        return None


def _audited_run(runs: Runs, typed: str) -> str:
    """The run ``--run`` names (a prefix is enough); as typed if no run record has it."""
    try:
        return runs.find(typed).id
    except AmbiguousId:
        raise
    except NotFound:
        return typed


def _approve(args: argparse.Namespace, console: Console) -> int:
    embedded_store_note()
    services = services_for(args)
    store = services.store
    run = store.runs.find(args.run_id)
    services = service_of_run(services, run)  # the run's rules (every layer), never another's
    desk = RunDesk(services)
    policy = desk.policy_of(run.service)
    problem = desk.problem(run, user=args.user, face=Face.CLI)  # before asking to confirm
    if problem:
        raise desk.refused(run, user=args.user, face=Face.CLI, rule=problem)
    typed = confirmation_problem(run, policy, confirmer(args) or _ask(console))
    if typed:
        raise desk.refused(run, user=args.user, face=Face.CLI, rule=f"not confirmed: {typed}")
    # the rules changed, or another approval landed first: refused, audited by the desk
    run = desk.approve(run.id, user=args.user, face=Face.CLI, plan_version=run.plan_version,
                       plan_hash=run.plan_hash)
    needed = approvals_needed(run, policy)
    console.print(f"run {short_id(run.id)}: {run.status.value}"
                  + (f" — {needed} more approval(s) needed" if needed else
                     " — a `deckhand worker` will run it"))
    return 0


def _ask(console: Console) -> Confirm:
    def ask(word: str) -> str:
        try:
            return Prompt.ask(f"This changes [bold]{escape(word)}[/]. Type its name to confirm",
                              console=console)
        except (EOFError, OSError):  # no terminal: nothing was confirmed
            return ""
    return ask
