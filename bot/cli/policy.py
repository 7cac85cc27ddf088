"""``deckhand policy explain RUN|--plan FILE``: who may approve, how many are still needed,
and which rule of which environment, host or freeze says so — the answer Slack, the App
Home and MCP give, from ``agents.policy.eligibility``. ``deckhand policy diff OLD NEW``:
what a config change would change for each environment (``agents.policy.diff``)."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml
from pydantic import ValidationError
from rich.console import Console

from agents.config import Config
from agents.engine.desk import RunDesk
from agents.errors import PlanError
from agents.faces import Face
from agents.org import Org, load_org
from agents.plan.model import Plan
from agents.policy.approvals import live_approvals, policy_version
from agents.policy.diff import policy_diff
from agents.policy.eligibility import Eligibility, Grant, PlanSubject, eligibility
from agents.policy.rules import Policy
from agents.run.record import Run
from agents.services import Services, build_services
from bot.cli.common import (
    DEFAULT_NAME,
    Commands,
    add_config_arg,
    embedded_store_note,
    given_config,
    run_services,
    services_for,
)
from bot.cli.history import add_json_arg
from bot.cli.json_views import policy_diff_json
from bot.cli.run_views import print_json
from tools.errors import ConfigError, DeckhandError


def register(commands: Commands) -> None:
    parser = commands.add_parser("policy", help="explain who may approve a run or a plan; diff "
                                 "two configs' policies")
    sub = parser.add_subparsers(title="actions", metavar="ACTION", required=True)
    explain = sub.add_parser("explain", help="who may approve RUN (or --plan FILE), how many "
                             "approvals are still needed, and which rule says so")
    explain.add_argument("run_id", nargs="?", metavar="RUN")
    explain.add_argument("--plan", type=Path, metavar="FILE",
                         help="a plan file (YAML or JSON: goal, steps, rollback), e.g. from "
                              "`deckhand plan --format yaml`")
    explain.add_argument("--requested-by", default="", metavar="USER",
                         help="with --plan: who would ask (self-approval rules)")
    explain.add_argument("--user", metavar="USER", help="also say whether USER may approve")
    add_config_arg(explain)
    explain.set_defaults(handler=_explain)
    diff = sub.add_parser("diff", help="what changing config OLD into NEW would change for "
                          "each environment (exit 0: nothing, 1: changes, 2: invalid config)")
    diff.add_argument("old", type=Path, metavar="OLD", help="config file (or its directory)")
    diff.add_argument("new", type=Path, metavar="NEW", nargs="?",
                      help="config file (or its directory); default: the config in use "
                           "(--config, $DECKHAND_CONFIG, ./deckhand.yml)")
    add_json_arg(diff)
    add_config_arg(diff)
    diff.set_defaults(handler=_diff)
    add_config_arg(parser)  # `deckhand policy --config X explain …` as with every group


def _diff(args: argparse.Namespace, console: Console) -> int:
    new_path = given_config(args.new, getattr(args, "config", None))
    old, new = _load(args.old, "OLD"), _load(new_path, "NEW")
    found = policy_diff((old.policy, old.inventory), (new.policy, new.inventory))
    if args.json:
        print_json(policy_diff_json(found))
    else:
        for line in found.lines() or [f"no policy change between {old.path} and {new.path}"]:
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    return 1 if found.changed else 0


def _load(path: Path, name: str) -> Config:
    """The config at ``path`` (a directory: its deckhand.yml); one line (exit 2)
    naming the file and field of the first problem otherwise."""
    file = path / DEFAULT_NAME if path.is_dir() else path
    try:
        return load_org(file).only()
    except ConfigError as exc:
        first, more = exc.problems[0], len(exc.problems) - 1
        also = f" (and {more} more: `deckhand check {file}` lists them)" if more else ""
        raise DeckhandError(f"{name} is not a valid config: {first}{also}") from exc


def _explain(args: argparse.Namespace, console: Console) -> int:
    if (args.run_id is None) == (args.plan is None):
        raise PlanError("name a run (deckhand policy explain RUN) or a plan file (--plan FILE)")
    if args.run_id is not None:
        embedded_store_note()
    services, org = run_services(args) if args.run_id is not None else (
        _plan_services(args), None)
    try:
        answer, title, environments, policy, run = _answer(args, services, org)
        counts = _counts(services, policy, environments, args.user) if args.user else []
        grant = _verdict(services, org, answer, policy, environments, run, args.user) \
            if args.user else None
    finally:
        services.close()
    console.print(f"{title.rstrip(':')} {_versions(policy, run)}:", markup=False,
                  highlight=False, soft_wrap=True)
    for line in answer.explain():
        console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
    if grant is not None:
        kind = "the break-glass grant" if grant is Grant.BREAK_GLASS else "an environment approval"
        verdict = f"yes ({kind})" if isinstance(grant, Grant) else f"no: {grant}"
        console.print(f"{args.user} may approve: {verdict}", markup=False, highlight=False,
                      soft_wrap=True)
    for line in counts:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return 0


def _versions(policy: Policy, run: Run | None) -> str:
    """Which policy the answer is given under, and which ones the run met before."""
    now = policy_version(policy)
    if run is None:
        return f"[policy {now}]"
    seen = dict.fromkeys(v for v in [run.meta.get("policy"), *(a.policy for a in run.approvals)]
                         if v)
    before = [v for v in seen if v != now]
    also = f"; earlier under {', '.join(before)}" if before else ""
    return f"[policy {now}{also}]"


def _verdict(services: Services, org: Org | None, answer: Eligibility, policy: Policy,
             environments: list[str], run: Run | None, user: str) -> Grant | str:
    """The answer ``deckhand approve`` gives ``user`` (the desk's), limits included; for a
    plan file, the rules' and the per-hour count as they stand."""
    if run is not None and org is not None:
        desk = RunDesk(services, rules=lambda service: org.service_of(service).policy)
        return desk.verdict(run, user=user, face=Face.CLI)
    if answer.impossible:  # the desk would not even store it
        return f"the plan would be refused: {answer.impossible}"
    grant = answer.grant(user)
    if not isinstance(grant, Grant):
        return grant
    limited = services.store.limits.problem(policy, services.config.key,
                                            environments, run_id="", user=user)
    return limited or grant


def _counts(services: Services, policy: Policy, environments: list[str], user: str
            ) -> list[str]:
    """How many runs ``user`` approved lately where ``policy.limits`` counts them (the
    store's count, the one the approval is checked against)."""
    limits = policy.limits
    capped = [(env, limits[env].runs_per_hour) for env in environments if env in limits]
    recent, key = services.store.limits.recent, services.config.key
    counted = {env: policy.foreign.get(env, (key, env)) for env, _ in capped}  # web/production
    return [f"{user} approved {len(recent(*counted[env], user))} {env} run(s) in "
            f"the last hour (limit {cap})" for env, cap in capped if cap is not None]


def _answer(args: argparse.Namespace, services: Services, org: Org | None
            ) -> tuple[Eligibility, str, list[str], Policy, Run | None]:
    """The answer, its title, the environments it is about, the policy (every layer: a run
    is judged by its own service's) and the run (None: a plan file)."""
    policy, now = services.config.policy, services.clock()
    if org is not None:
        run = services.store.runs.find(args.run_id)
        policy = org.service_of(run.service).policy
        of = f" of {run.service or org.legacy}" if org.split else ""
        current = run.model_copy(update={"approvals": live_approvals(run, policy, now=now)})
        return (eligibility(current, policy, now=now),
                f"run {run.id}{of} ({run.status.value}), requested by {run.requested_by}:",
                run.scopes, policy, run)
    plan = _read_plan(args.plan, requested_by=args.requested_by or "(nobody yet)")
    subject = PlanSubject.of(services.targets(plan), requested_by=plan.requested_by)
    return (eligibility(subject, policy, now=now), f"plan {args.plan} ({plan.goal}):",
            subject.scopes, policy, None)


def _plan_services(args: argparse.Namespace) -> Services:
    """Services for the service a plan file names (``service:``, as `deckhand plan
    --format yaml` writes it), else for the config's one service."""
    plan = _read_plan(args.plan, requested_by="")
    if plan.service is None:
        return services_for(args)
    org = load_org(given_config(None, getattr(args, "config", None)))
    return build_services(org.service_of(plan.service))


def _read_plan(path: Path, *, requested_by: str) -> Plan:
    try:
        body = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise PlanError(f"cannot read the plan file {path}: {exc}") from exc
    if not isinstance(body, dict):
        raise PlanError(f"{path}: a plan is a mapping with goal, steps and rollback")
    keep = {k: body[k] for k in ("goal", "steps", "rollback", "service") if k in body}
    try:
        return Plan.model_validate({**keep, "requested_by": requested_by})
    except ValidationError as exc:
        raise PlanError(f"{path} is not a plan: {exc.errors()[0]['msg']}") from exc
