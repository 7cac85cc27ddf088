"""deckhand: plan deploys, approve them, run them over SSH, roll back loudly.

Exit codes are ``bot.terminal.console.ExitCode``: errors deckhand raises on purpose are one
clear message (exit 2, a refused approval 3); anything else is a bug, printed with its
traceback (exit 70).
"""

from __future__ import annotations

import argparse
import getpass
import json
import logging
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from agents import tracing
from agents.config import Config
from agents.errors import ApprovalRefused
from agents.org import cross_service_hosts, load_org, policy_notes
from agents.plan.limit import parse_limit
from agents.plan.yaml import plan_to_yaml
from agents.policy.eligibility import shared_host_notes
from agents.prompts.templates import PromptSet
from agents.requests.explicit import parse_assignments
from agents.run.record import RunStatus
from agents.services import store_dir
from agents.settings import Settings
from bot.cli.common import (
    Commands,
    Handler,
    add_config_arg,
    add_limit_arg,
    add_param_arg,
    add_service_arg,
    add_user_args,
    confirmer,
    given_config,
    service_for_request,
    services_for,
)
from bot.cli.health import report_audit_key, report_audit_sink, report_redis
from bot.cli.where_can import answer_where
from bot.logs import announce, configure_logging, requested_format
from bot.telemetry import configure_tracing
from bot.telemetry import shutdown as shutdown_tracing
from bot.terminal.border import TerminalConsole, yaml_for_terminal
from bot.terminal.console import ConsoleFlow, ExitCode
from bot.terminal.output import guard_output
from bot.terminal.render import plan_table
from tools.command_lint import silent_failures
from tools.errors import ConfigError, DeckhandError

SETTINGS_PLACES = {"environment", "network", "slack"}
"""Problem places that are no file: the environment's settings, the network, Slack."""


def _config_error_text(exc: ConfigError) -> str:
    """One line for one problem with the settings (a bad token is not an "invalid config");
    the full list, each at its file:line, otherwise."""
    if len(exc.problems) == 1 and exc.problems[0].where in SETTINGS_PLACES:
        return f"error: {exc.problems[0]}"
    return str(exc)


def main(argv: Sequence[str] | None = None, *, own_process: bool | None = None) -> int:
    """Run one command. ``own_process`` (default: ``argv`` is None) says this is the
    process's own command line — the ``deckhand`` entry point, ``python -m bot.cli`` — not a
    test calling ``main`` in its process: output then can never be fatal (guard_output)."""
    if argv is None if own_process is None else own_process:
        guard_output()
    parser = build_parser(_command_word(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(argv)
    console = TerminalConsole()
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    if _runs_for_good(args):  # its log in the format asked for, from the first line
        configure_logging(requested_format(args.log_format))
        if argv is None:  # SIGHUP reloads its config, even one sent while it starts
            from bot.cli.reload import hold_sighup

            hold_sighup()
    configure_tracing()
    if _for_scripts(args):  # its error never lands in what a script reads (`| jq`)
        console = TerminalConsole(stderr=True)
    try:
        return handler(args, console)
    except ConfigError as exc:
        _error(console, _config_error_text(exc))
        return ExitCode.INVALID
    except ApprovalRefused as exc:
        _error(console, f"refused: {exc}")
        return ExitCode.REFUSED
    except DeckhandError as exc:
        _error(console, f"error: {exc}")
        return ExitCode.INVALID
    except EOFError:  # a prompt met the end of its input (</dev/null, Ctrl-D)
        _error(console, "no answer at a prompt (end of input); nothing was changed")
        return ExitCode.INVALID
    except KeyboardInterrupt:  # at a prompt: nothing was started, nothing to undo
        _error(console, "interrupted")
        return 130
    except Exception:  # a bug: keep the traceback, and an exit code no outcome uses
        _error(console, "internal error (a bug in deckhand):\n" + traceback.format_exc())
        return ExitCode.INTERNAL
    finally:
        shutdown_tracing()


def _runs_for_good(args: argparse.Namespace) -> bool:
    """serve, worker, schedules serve, mcp and audit ship: processes that log (the others
    print their answer)."""
    return hasattr(args, "log_format") and getattr(args, "what", "ship") == "ship"


def _for_scripts(args: argparse.Namespace) -> bool:
    """``--json`` or ``--format json|yaml``: stdout is the answer alone (printed with
    print_json / sys.stdout), so the console — errors, notes — writes to stderr."""
    return getattr(args, "json", False) is True or getattr(args, "format", None) in (
        "json", "yaml")


def _error(console: Console, message: str) -> None:
    announce(console, message, level=logging.ERROR)  # JSON too under --log-format json


CORE = frozenset({"demo", "run", "plan", "check"})
"""The commands defined here: naming one, the other modules are not even imported."""


def _command_word(argv: Sequence[str]) -> str | None:
    return next((word for word in argv if not word.startswith("-")), None)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole CLI; only the core commands when ``command`` is one of them (start-up:
    the other subcommands' modules cost ~0.1 s to import)."""
    from bot.cli.help import TOP, add_examples, version

    parser = argparse.ArgumentParser(prog="deckhand", description=__doc__.splitlines()[0],
                                     epilog=TOP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"deckhand {version()}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    _add_demo(commands)
    _add_run(commands)
    _add_plan(commands)
    _add_check(commands)
    for register in ([] if command in CORE else _extra_commands(command)):
        register(commands)
    add_examples(parser)
    parser.set_defaults(root_parser=parser)  # for `deckhand completion`, without a cycle
    return parser


EXTRA = {"init": "init", "runs": "runs", "audit": "runs", "approve": "runs",
         "worker": "runs", "where": "history", "history": "history", "stats": "history",
         "hosts": "hosts", "serve": "serve", "schedules": "schedules",
         "retention": "retention", "mcp": "mcp", "eval": "eval", "policy": "policy",
         "cancel": "control", "pause": "control", "resume": "control", "stop": "control",
         "judge": "judge", "lock": "locks", "unlock": "locks", "services": "services"}
"""The module that registers each other command: naming one, only it is imported (the
others cost ~0.1 s of a read-only command's start); `completion`, help and an unknown word
get them all (test_cli_first_hour keeps this true)."""


def _extra_commands(command: str | None = None) -> list[Callable[[Commands], None]]:
    """Subcommands that live next to what they drive (hosts, store, Slack, schedules): the
    one module registering ``command``, else all of them."""
    if command in EXTRA:
        from importlib import import_module

        return [import_module(f"bot.cli.{EXTRA[command]}").register]
    from bot.cli import (
        completion,
        control,
        history,
        hosts,
        init,
        judge,
        locks,
        mcp,
        policy,
        retention,
        runs,
        schedules,
        serve,
        services,
    )
    from bot.cli import eval as evaluation

    return [init.register, runs.register, history.register, hosts.register, serve.register,
            schedules.register, retention.register, mcp.register, evaluation.register,
            policy.register, completion.register, control.register, judge.register,
            locks.register, services.register]


def _add_demo(commands: Commands) -> None:
    parser = commands.add_parser("demo", help="deploy the sample app twice (no servers needed)")
    parser.add_argument("--keep", action="store_true",
                        help="leave the sample app's servers running (stopped by default)")
    parser.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace, console: Console) -> int:
    from bot.cli.demo import run_demo

    return run_demo(console, keep=args.keep)


def _add_run(commands: Commands) -> None:
    parser = commands.add_parser("run", help="plan a request, approve it here, and run it")
    parser.add_argument("request", help='what to do, e.g. "deploy v2.3.1"')
    parser.add_argument("--yes", "-y", action="store_true",
                        help="approve without the Approve/Modify/Reject question (policy "
                             "confirmations are still asked, or given with --confirm)")
    add_user_args(parser, who="who asks and approves here")
    parser.add_argument("--dry-run", action="store_true",
                        help="run each step's check only: no approval, nothing changes")
    parser.add_argument("--break-glass", metavar="REASON",
                        help="go ahead during a freeze (refused when nothing is frozen): the "
                             "usual approvals plus one grant from policy.break_glass")
    add_param_arg(parser)
    add_limit_arg(parser)
    add_config_arg(parser)
    add_service_arg(parser)
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace, console: Console) -> int:
    org = services_for(args)
    try:
        services, picked = service_for_request(org, args.request, args, console,
                                               ask=not args.yes)  # --yes: never a prompt
        if picked.how == "where":
            return answer_where(console, services, user=args.user)
        flow = ConsoleFlow(services, console, user=args.user, confirm=confirmer(args),
                           params=parse_assignments(args.set), limit=parse_limit(args.limit))
        if args.dry_run:
            dry = flow.dry_run(args.request)
            return ExitCode.SUCCEEDED if dry.status is RunStatus.SUCCEEDED else ExitCode.FAILED
        flow.handle(args.request, yes=args.yes, break_glass=args.break_glass)
    finally:
        org.close()
    return flow.exit_code


def _add_plan(commands: Commands) -> None:
    parser = commands.add_parser("plan", help="show the plan for a request without running it")
    parser.add_argument("request")
    parser.add_argument("--format", choices=["table", "yaml", "json"], default="table")
    add_param_arg(parser)
    add_limit_arg(parser)
    add_config_arg(parser)
    add_service_arg(parser)
    parser.set_defaults(handler=_plan)


def _plan(args: argparse.Namespace, console: Console) -> int:
    services, picked = service_for_request(services_for(args), args.request, args, console,
                                           ask=args.format == "table")  # scripts: never ask
    if picked.how == "where":
        return answer_where(console, services, user=getpass.getuser())
    plan = services.make_plan(args.request, requested_by=getpass.getuser(), face="cli",
                              params=parse_assignments(args.set),
                              limit=parse_limit(args.limit))
    # shown, never run: the request ends here, and so does its trace
    tracing.request_ended(plan.planner.trace_root, status="planned", ok=True,
                          service=plan.service)
    if args.format == "json":
        sys.stdout.write(json.dumps(plan.model_dump(mode="json"), indent=2) + "\n")
    elif args.format == "yaml":
        sys.stdout.write(yaml_for_terminal(plan_to_yaml(plan)))
    else:
        console.print(plan_table(plan, services.targets(plan)))
    return 0


def _add_check(commands: Commands) -> None:
    parser = commands.add_parser("check", help="validate a config file and list every problem; "
                                 "with REDIS_URL, check that Redis keeps records; --store: "
                                 "verify the live store's invariants")
    parser.add_argument("config", type=Path, nargs="?",
                        help="config file (default: $DECKHAND_CONFIG, else ./deckhand.yml)")
    parser.add_argument("--config", "-c", dest="config_flag", type=Path, metavar="CONFIG",
                        help="the same, as every other command takes it")
    parser.add_argument("--store", action="store_true",
                        help="check the store's invariants instead, naming each bad key")
    parser.add_argument("--repair", action="store_true",
                        help="with --store: fix what is safe to fix (never deletes a record)")
    parser.set_defaults(handler=_check)


def _check(args: argparse.Namespace, console: Console) -> int:
    if args.store:
        from bot.cli.store_check import check_store

        return check_store(args, console)
    args.config = given_config(args.config, args.config_flag)
    # every service file, each problem at its file:line; playbook checks only where the
    # service's inputs changed since they passed (agents.config_cache)
    org = load_org(args.config, cache=True)
    configs = list(org.services.values())
    if not org.split:
        config = configs[0]
        console.print(f"[green]{escape(str(args.config))} is valid:[/] "  # a path, whole
                      f"{len(config.catalog.tools)} tools, "
                      f"{len(config.inventory.hosts)} hosts, "
                      f"{len(config.inventory.environments)} environments, "
                      f"{len(config.playbooks)} playbooks", soft_wrap=True)
    else:
        console.print(f"[green]{escape(str(args.config))} is valid:[/] {len(configs)} "
                      f"service(s): {escape(', '.join(org.services))}", soft_wrap=True)
    for config in configs if org.split else []:
        console.print(f"[green]  {escape(f'{config.name} ({config.path})')}:[/] "
                      f"{len(config.catalog.tools)} tools, {len(config.inventory.hosts)} "
                      f"hosts, {len(config.inventory.environments)} environments, "
                      f"{len(config.playbooks)} playbooks", soft_wrap=True)
    for config in configs:
        of = f"{config.name}: " if org.split else ""
        for warning in silent_failures(config.catalog):
            console.print(f"[yellow]warning:[/] {escape(of + warning)}", soft_wrap=True)
    _report_prompts(console, configs[0].prompts)  # organisation-wide: one set
    for config in configs:
        of = f"{config.name}: " if org.split else ""
        for note in shared_host_notes(config.inventory, config.policy):
            console.print(f"note: {of}{note}", markup=False, highlight=False, soft_wrap=True)
    for note in policy_notes(org):
        console.print(f"policy: {note}", markup=False, highlight=False, soft_wrap=True)
    shared, warnings = cross_service_hosts(org)
    for note in shared:
        console.print(f"shared host: {note}", markup=False, highlight=False, soft_wrap=True)
    for warning in warnings:
        console.print(f"warning: {warning}", markup=False, highlight=False, soft_wrap=True)
    state = max(_report_state(console, config) for config in configs)
    _report_charts(console)
    asked: dict[Any, Any] = {}
    gates = max(_report_gates(console, config, asked) for config in configs)
    settings = Settings()
    gates = max(gates, _report_planner(console, configs, settings))
    redis = report_redis(console, settings, store_dir(configs[0]))
    if redis == 0:
        report_audit_sink(console, configs[0], settings)  # organisation-wide
        report_audit_key(console, settings)
    schedules = _report_schedules(console, org.only(), settings) if redis == 0 and len(
        configs) == 1 else 0
    if redis == 0 and len(configs) > 1 and settings.redis_url is not None:
        console.print("note: schedules are checked against their service's config once "
                      "the store knows services (a later step of issue 40); not checked "
                      "here", markup=False, highlight=False, soft_wrap=True)
    return max(redis, gates, state, schedules)


def _report_schedules(console: Console, config: Config, settings: Settings) -> int:
    """With REDIS_URL: each schedule whose plan no longer validates under ``config``."""
    if settings.redis_url is None:
        return 0
    from agents.engine.schedule_health import schedule_findings
    from agents.store import Store

    store = Store.connect(settings.redis_url.get_secret_value())
    findings = schedule_findings(config, schedules=store.schedules, plans=store.plans)
    for line in findings:
        console.print(line, style="red", markup=False, highlight=False, soft_wrap=True)
    return 1 if findings else 0


def _report_gates(console: Console, config: Config, asked: dict[Any, Any]) -> int:
    """Gates' filled URLs and queries, asked of their Prometheus (each URL and query once
    per check: ``asked``); 1 if one is refused."""
    from bot.cli.check_gates import gate_findings

    problems, notes = gate_findings(config, asked=asked)
    for line in problems:
        console.print(line, style="red", markup=False, highlight=False, soft_wrap=True)
    for line in notes:
        console.print(line, style="dim", markup=False, highlight=False, soft_wrap=True)
    return 1 if problems else 0

def _report_planner(console: Console, configs: list[Config], settings: Settings) -> int:
    """The largest prompt against the model's context; the endpoint, asked once (1 if the
    prompt cannot fit or the model is not served)."""
    from bot.cli.check_planner import planner_findings

    problems, notes = planner_findings(configs, settings)
    for line in problems:
        console.print(line, style="red", markup=False, highlight=False, soft_wrap=True)
    for line in notes:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return 1 if problems else 0


def _report_charts(console: Console) -> None:
    from bot import charts

    reason = charts.missing()
    console.print("pictures: on (timeline, eval chart)" if reason is None else
                  f"note: pictures off (Slack timeline, runs show --timeline, eval --chart): "
                  f"{reason}", markup=False, highlight=False, soft_wrap=True)


def _report_state(console: Console, config: Config) -> int:
    """Where ``{state_dir}`` points and whether deckhand can write there (1 if it cannot)."""
    from agents.state_dir import ENV, unwritable

    if config.state_dir is None:
        return 0
    problem = unwritable(config.state_dir)
    if problem is None:
        console.print(f"state: {config.state_dir} (writable)", markup=False, highlight=False,
                      soft_wrap=True)
        return 0
    level = "error" if config.uses_state_dir else "note"
    console.print(f"{level}: state directory {config.state_dir} is not writable ({problem}); "
                  f"set {ENV} or `state_dir:` to a writable directory (in the image: the "
                  f"volume at /var/lib/deckhand)", markup=False, highlight=False, soft_wrap=True)
    return 1 if config.uses_state_dir else 0


def _report_prompts(console: Console, prompts: PromptSet) -> None:
    """The prompt versions new LLM plans will record, and which templates are replaced."""
    versions = ", ".join(f"{name}@{version}" for name, version in prompts.versions().items())
    console.print(f"prompts: {versions}", markup=False, highlight=False, soft_wrap=True)
    for name, source in prompts.overridden.items():
        console.print(f"  template {name} from {source}", markup=False, highlight=False,
                      soft_wrap=True)

