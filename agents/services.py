"""The typed bundle of services every front end (terminal, Slack, worker) is handed.

One ``Services`` serves an organisation (docs/services.md 2.2): the store, settings, one
``RunnerPool`` over every service's hosts, one redactor with every service's secrets, and
the ``Service``s (a config, its planner, its executor) built on first use and cached. A
``Services`` is *focused* on one service (``focus``): its ``config``, ``planner`` and methods
(``make_plan``, ``check``, ``targets`` …) are that service's, so a face handed a focused
bundle never sees another service's tools, hosts or rules. Unfocused, it means the only
service (or the legacy one), else ``WhichService``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from agents import tracing
from agents.config import Config
from agents.errors import (
    BreakGlassRefused,
    EnvironmentLocked,
    FreezeRefused,
    ModelError,
    PlanError,
    PlanInvalid,
    ServiceNotChosen,
    ServiceUnknown,
    StoreError,
    WhichService,
)
from agents.history.deploys import changelog_lines, deploys_of, rollback_target_problems, shipped
from agents.history.verify import Observed, VersionProbe
from agents.org import Org
from agents.plan.dryrun import DryPlan, dry_plan
from agents.plan.model import MAX_REQUEST, Plan, is_read_only
from agents.plan.targets import PlanTargets, resolve
from agents.plan.validation import validate_plan
from agents.planning.planner import build_planner, changes_mutating_steps, explicit_choice
from agents.policy.eligibility import unapprovable
from agents.policy.freeze import Frozen, frozen
from agents.requests.services import Picked, ServiceNames, choose, pick
from agents.run.executor import Executor, ExecutorDeps, Listener
from agents.run.record import Run, RunStatus
from agents.settings import Settings
from agents.store import Store
from tools.gitlog import GitRepo
from tools.inventory import Inventory
from tools.redact import Redactor, activate
from tools.runners.pool import RunnerPool

log = logging.getLogger("deckhand.services")


class Planner(Protocol):
    """Turns a request into a plan, or a plan plus an instruction into a new version."""

    def plan(self, request: str, *, requested_by: str) -> Plan: ...

    def modify(self, plan: Plan, instruction: str, *, requested_by: str) -> Plan: ...


@dataclass
class Service:
    """One service: its config, and the planner and executor that see only it."""

    name: str
    config: Config
    planner: Planner
    executor: Executor


@dataclass
class _Generation:
    """What one load of the config gave: swapped as one object, so no reader sees one
    load's services with another's runners or redactor."""

    org: Org
    runners: RunnerPool
    redact: Redactor
    names: ServiceNames
    built: dict[str, Service] = field(default_factory=dict)
    """Services built so far (``Services.service``), by name."""
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Shared:
    """The one mutable cell every focused view of a bundle reads its generation from."""

    def __init__(self, generation: _Generation):
        self.generation = generation


@dataclass
class Services:
    """Everything the front ends need, passed explicitly (no module globals)."""

    settings: Settings
    # The whole Store: this is where the one connection is wired and its nouns handed out
    # (callers pass ``services.store.runs`` … to modules that take parts), and its own
    # methods span several: queue_read_only saves the plan, creates the run and writes its
    # state with the queue entry in one EXEC; record_history reads a plan into history.
    store: Store
    shared: _Shared
    current: str | None = None
    """The service this view is focused on; None: the only (or legacy) one."""
    single: bool = False
    """Built from one service's config (a face that serves one): reloads keep it so."""
    clock: Callable[[], float] = field(default=time.time)

    # -- the organisation and its services -------------------------------------------------

    @property
    def org(self) -> Org:
        return self.shared.generation.org

    @property
    def runners(self) -> RunnerPool:
        return self.shared.generation.runners

    @property
    def redact(self) -> Redactor:
        return self.shared.generation.redact

    @property
    def names(self) -> ServiceNames:
        return self.shared.generation.names

    def service(self, name: str | None = None) -> Service:
        """Service ``name`` (None: this view's, else the only or legacy one), built on
        first use. ServiceUnknown names the known ones (a view focused on a service a
        reload dropped); WhichService when several could be meant."""
        generation = self.shared.generation
        name = name or self.current or _default(generation.org)
        with generation.lock:
            built = generation.built.get(name)
            if built is None:
                config = generation.org.services.get(name)
                if config is None:
                    raise ServiceUnknown(f"unknown service {name!r}; known services: "
                                         f"{generation.names.known()}")
                built = generation.built[name] = _build(name, config, self.settings,
                                                        generation)
            return built

    def focus(self, name: str | None) -> Services:
        """This bundle focused on service ``name`` (checked now: ServiceUnknown)."""
        chosen = self.service(name).name
        return replace(self, current=chosen)

    def for_request(self, request: str, *, given: str | None = None,
                    given_by: str = "--service") -> tuple[Services, Picked]:
        """The bundle focused on the service ``request`` names (else ``given``, else the
        only one) and what was read; raised before anything is planned: ServiceNotChosen,
        WhichService (the face asks)."""
        picked = pick(request, self.names)
        name = choose(picked, self.names, given=given or self.current, given_by=given_by)
        return self.focus(name), picked

    def for_run(self, run: Run) -> Services:
        """The bundle focused on ``run``'s service (see ``for_record``)."""
        return self.for_record(run.service, what=f"run {run.id}")

    def for_record(self, service: str | None, *, what: str) -> Services:
        """The bundle focused on the service a record (run, schedule) names: one without
        is the legacy service's. ServiceUnknown (fail closed) if this process does not
        serve it: a record is never acted on under another service's config."""
        try:
            config = self.org.service_of(service)
        except ServiceUnknown as exc:
            raise ServiceUnknown(f"{what}: {exc}") from None
        return self.focus(config.name)

    @property
    def common(self) -> Config:
        """A config to read the organisation-wide sections from (``audit``,
        ``retention``, ``prompts``): every service's hold the main config's."""
        return next(iter(self.org.services.values()))

    @property
    def config(self) -> Config:
        return self.service().config

    @config.setter
    def config(self, value: Config) -> None:
        self.service().config = value

    @property
    def planner(self) -> Planner:
        return self.service().planner

    @planner.setter
    def planner(self, value: Planner) -> None:
        self.service().planner = value

    @property
    def executor(self) -> Executor:
        return self.service().executor

    @executor.setter
    def executor(self, value: Executor) -> None:
        self.service().executor = value

    def make_plan(self, request: str, *, requested_by: str, face: str,
                  break_glass: str | None = None,
                  params: Mapping[str, str] | None = None,
                  limit: Sequence[str] = ()) -> Plan:
        """Plan ``request`` and validate the result; raises PlanError subclasses
        (FreezeRefused during a freeze, unless a ``break_glass`` reason is given;
        BreakGlassRefused for a break-glass reason when nothing is frozen).

        Every refusal is audited here, once for every front end (``face``: slack, cli,
        terminal, mcp, schedule), as ``plan_refused`` with the request and the reason. A
        model that gave no answer (ModelError) refused nothing: ``plan_failed``, with the
        error's class.
        """
        parent, root = tracing.request_root()  # the trace's root: emitted when it ends
        try:
            plan = self._make_plan(request, requested_by, break_glass, params, limit, parent)
            plan.planner.trace_root = root
            plan.requested_via = face  # only a name from Slack is ever shown as a mention
            return plan
        except ModelError as exc:
            raise self._model_failed(exc, root, request, requested_by, face) from exc
        except PlanError as exc:
            problems = exc.problems if isinstance(exc, PlanInvalid) else [str(exc)]
            tracing.request_ended(root, status="refused", ok=False,
                                  why=type(exc).__name__)  # never the request text
            try:
                self.store.audit.refused("plan", action="plan_refused", actor=requested_by,
                                         face=face, rule="; ".join(problems),
                                         request=request[:MAX_REQUEST], problems=problems)
            except StoreError as lost:  # the refusal stands; the store's outage is its own news
                log.warning("could not audit a refused plan: %s", lost)
            raise

    def _model_failed(self, exc: ModelError, root: Any, request: str, requested_by: str,
                      face: str) -> ModelError:
        """A model that gave no answer refused nothing: the trace says ``failed`` with the
        error's class, the audit ``plan_failed`` with it, and the person reads it first."""
        error = type(exc).__name__
        tracing.request_ended(root, status="failed", ok=False, why=error)
        try:
            self.store.audit.record("plan_failed", actor=requested_by, face=face, error=error,
                                    message=str(exc)[:500], request=request[:MAX_REQUEST])
        except StoreError as lost:
            log.warning("could not audit a failed plan: %s", lost)
        return type(exc)(f"No plan: the planner's model gave no answer ({error}); this is "
                         f"not a refusal.\n{exc}", repairs=exc.repairs)

    def _make_plan(self, request: str, requested_by: str, break_glass: str | None,
                   params: Mapping[str, str] | None, limit: Sequence[str],
                   parent: Any) -> Plan:
        # A request longer than MAX_REQUEST is refused here, once for every front end,
        # rather than cut before the model or failing later as an invalid goal.
        if len(request) > MAX_REQUEST:
            raise PlanError(f"the request is {len(request)} characters long; at most "
                            f"{MAX_REQUEST} can be planned")
        with tracing.span("deckhand.plan", {"deckhand.requested_by": requested_by,
                                            "deckhand.request.length": len(request)},
                          parent=parent) as span:
            request = self._wording(request, params)
            plan = (self._plan_with(request, requested_by, params) if params
                    else self.planner.plan(request, requested_by=requested_by))
            plan.planner.traceparent = tracing.current_traceparent()
            if limit:  # part of the plan and its hash: approvers see the narrowed hosts
                plan.limit = list(limit)
            plan.service = self.config.key  # the config's, whatever a planner said
            span.set_attributes(_plan_attributes(plan))
            self.check(plan)
        self.refuse_if_locked(plan)
        blocked = self.frozen(self.targets(plan).scopes)
        if blocked is not None and not break_glass:
            raise FreezeRefused(blocked.describe())
        if blocked is None and break_glass:  # it lifts a freeze; it never replaces approvers
            raise BreakGlassRefused(
                f"no freeze covers {', '.join(self.targets(plan).environments) or 'this plan'} "
                f"now, so there is nothing to break: ask again without --break-glass")
        return plan

    def _wording(self, request: str, params: Mapping[str, str] | None) -> str:
        """``request`` as typed if a playbook takes it (``restart api`` may spell the
        service), else without the service's name if one takes that, else as typed (the
        model reads it whole). Naming another service than this one is refused."""
        picked = pick(request, self.names)
        mine = self.service().name
        if picked.service not in (None, mine):
            raise ServiceNotChosen(f"the request names service {picked.service}, but this "
                                   f"plan is for {mine}: ask for it under {picked.service}")
        playbooks = getattr(self.planner, "playbooks", None)
        if picked.rest == picked.typed or playbooks is None:
            return request
        for wording in picked.wordings:
            taken = (explicit_choice(playbooks, wording, params) if params
                     else playbooks.match(wording))
            if taken is not None:
                return request if wording == picked.typed else wording
        return request

    def _plan_with(self, request: str, requested_by: str, params: Mapping[str, str]) -> Plan:
        """A plan with parameters set explicitly (``-e``), by planners that take them."""
        plan_with = getattr(self.planner, "plan_with", None)
        if plan_with is None:
            raise PlanError("this planner cannot take parameters set with -e; put them in "
                            "the request")
        plan: Plan = plan_with(request, requested_by=requested_by, params=params)
        return plan

    def break_glass_note(self, plan: Plan, reason: str) -> str:
        """What approvers of a break-glass plan are told (the freeze, why, who grants it)."""
        blocked = self.frozen(self.targets(plan).scopes)
        grant = self.config.policy.break_glass
        who = ", ".join([*grant.users, *grant.groups]) or "nobody (set policy.break_glass)"
        during = f"{blocked.environment} is frozen ({blocked.reason}); " if blocked else ""
        return (f"Break-glass: {during}requested because: {reason}. The environments' "
                f"approvals still apply in full, plus one grant from {who}.")

    def frozen(self, environments: list[str]) -> Frozen | None:
        """The freeze that blocks a change to ``environments`` now, if any."""
        now = datetime.fromtimestamp(self.clock(), UTC)
        return frozen(self.config.policy.freeze, environments, now)

    def refuse_if_locked(self, plan: Plan) -> None:
        """EnvironmentLocked when a person locked an environment ``plan`` changes (a read-only
        plan changes nothing, so it passes). Approvals meet the same lock in the store."""
        if self.is_read_only(plan):
            return
        held = self.store.manual_locks.blocking(self.targets(plan).environments,
                                                service=plan.service)
        if held is not None:
            raise EnvironmentLocked(held.refusal())

    def is_read_only(self, plan: Plan) -> bool:
        """The over-planning guard: one read-only tool call needs no approval."""
        return is_read_only(plan, self.config.catalog)

    def queue_read_only(self, plan: Plan, *, user: str,
                        before_enqueue: Callable[[Run], Run] | None = None) -> Run:
        """Store and queue a read-only plan without approval (``is_read_only`` must hold).

        ``before_enqueue`` runs first, e.g. to post the message a worker will update. If it
        fails, the run is left awaiting approval (and expires), never queued without an entry.
        """
        if not self.is_read_only(plan):
            raise PlanError("only a single read-only step may run without approval")
        self.store.plans.save(plan)
        run = self.store.runs.create(Run.for_plan(plan, self.targets(plan)))
        if before_enqueue is not None:
            run = before_enqueue(run)

        def queue(current: Run) -> list[Callable[[Any], Any]]:
            current.meta["read_only"] = True  # its output is the answer: faces show it
            current.move(RunStatus.APPROVED)
            current.move(RunStatus.QUEUED)
            return [self.store.queue.step(current.id)]  # state and entry in one EXEC

        run = self.store.runs.update(run.id, queue)
        self.store.audit.record("queued_read_only", actor=user, run_id=run.id, plan_id=plan.id)
        return run

    def targets(self, plan: Plan) -> PlanTargets:
        """What ``plan`` touches, resolved against this config's catalog and inventory."""
        return resolve(plan, self.config.catalog, self.config.inventory)

    def host_counts(self, plan: Plan) -> dict[str, int]:
        """How many hosts each step targets: a rollout starts them batch by batch, so the
        hosts started so far would undercount (``0/1`` for a two-host environment)."""
        targets = self.targets(plan)
        return {step.id: len(targets.of(step.id).hosts) for step in plan.steps}

    def check(self, plan: Plan) -> None:
        """Raise PlanInvalid unless ``plan`` passes every rule."""
        validate_plan(plan, self.config.catalog, self.config.inventory, self.config.policy)
        problems = rollback_target_problems(plan, self.config.catalog,
                                            partial(self.store.history.versions, plan.service))
        if problems and self.store.in_process_reason:  # it saw no earlier command's deploys
            problems.append(f"this store is in-process, so it saw no earlier command's "
                            f"deploys: {self.store.in_process_reason}; or set REDIS_URL to a "
                            f"Redis every deckhand process shares")
        if plan.steps and not self.is_read_only(plan):  # read-only: runs without approval
            nobody = unapprovable(self.targets(plan), self.config.policy,
                                  requested_by=plan.requested_by)
            problems += [f"step {plan.steps[0].id}: {nobody}"] if nobody else []
        if problems:
            raise PlanInvalid(problems)

    def dry_run(self, plan: Plan, *, user: str,
                listeners: Iterable[Listener] = ()) -> tuple[Run, DryPlan]:
        """Execute ``plan``'s checks (no approval, no locks, no rollback); see agents.dryrun."""
        dry = dry_plan(plan, self.config.catalog)
        executor = Executor(replace(self.executor.deps, catalog=dry.catalog, replan=None))
        run = Run.for_plan(dry.plan, resolve(dry.plan, dry.catalog, self.config.inventory),
                           status=RunStatus.APPROVED,
                           meta={"dry_run": True, "unchecked": dry.unchecked})
        self.store.audit.record("dry_run", actor=user, plan_id=plan.id, goal=plan.goal,
                                unchecked=dry.unchecked)
        return executor.execute(dry.plan, run, listeners=listeners), dry

    def changelog(self, plan: Plan) -> list[str]:
        """What ``plan`` ships over what is live, from the app's git repository (if set)."""
        settings = self.config.history
        target = shipped(plan, self.config.catalog)
        if settings.repo is None or target is None:
            return []
        env, version = target
        try:
            live = self.store.history.current(plan.service, env).version
        except StoreError:
            live = None
        log = GitRepo(Path(settings.repo)).changelog(live, version, limit=settings.max_commits)
        return changelog_lines(log, env, settings.compare_url)

    def observe_versions(self, environment: str) -> list[Observed]:
        """Each host's live version, asked with ``history.version_tool`` (PlanError if unset)."""
        probe = VersionProbe(self.config.history, self.config.catalog, self.config.inventory,
                             self.runners, self.config.vars)
        return probe.observe(environment)

    def record_history(self, run: Run) -> None:
        """Add a finished run to the deployment history (once; a failure is only logged:
        the run's own record is already written and stays the truth)."""
        try:
            plan = self.store.plans.get(run.plan_id, run.plan_version)  # the last replan's
            deploys = deploys_of(plan, run, self.config.catalog)
            if deploys:
                self.store.history.record(run.service, run.id, deploys)
        except StoreError as exc:
            log.error("run %s: could not record deployment history (%s)", run.id, exc)

    def swap(self, fresh: Services) -> None:
        """Take ``fresh``'s organisation and everything built from it (services, runners,
        redactor) in one step: one attribute assignment, so no reader sees one config's
        planner with another's rules, and every focused view sees the new one at once.
        What already holds an old executor — a run executing — keeps it, with its catalog,
        inventory and runners; the old runners are not closed under it (idle connections
        close by themselves, ``RunnerPool``'s reaper). A focused view whose service is
        gone answers ServiceUnknown from then on."""
        self.shared.generation = fresh.shared.generation

    def close(self) -> None:
        self.runners.close()


def _plan_attributes(plan: Plan) -> dict[str, str | int | float]:
    info = plan.planner
    found: dict[str, str | int | float | None] = {
        "deckhand.plan.id": plan.id, "deckhand.plan.steps": len(plan.steps),
        "deckhand.service": plan.service,  # never service.name: that one names deckhand
        "deckhand.planner": info.name, "deckhand.planner.model": info.model,
        "deckhand.prompt.name": info.prompt, "deckhand.prompt.version": info.prompt_version,
        "deckhand.planner.latency_ms": info.latency_ms, "deckhand.planner.repairs": info.repairs}
    # no gen_ai.* here: a trace view would show the plan as a model call and count its
    # tokens twice; each model call's "chat" span carries the model, usage and messages
    return {k: v for k, v in found.items() if v is not None}


def build_services(config: Config | Org, settings: Settings | None = None, *,
                   store: Store | None = None) -> Services:
    """Wire the default services for ``config`` (one service) or an organisation (the
    store: REDIS_URL, else the state directory's server, else in-process:
    ``Store.local``). Services are built on first use."""
    settings = settings or Settings()
    org = config if isinstance(config, Org) else _org_of(config)
    if store is None:
        url = settings.redis_url.get_secret_value() if settings.redis_url else None
        any_service = next(iter(org.services.values()))  # every one's is the org's server
        store = Store.connect(url) if url else Store.local(
            store_dir(any_service), mode=settings.embedded_store,
            binary=settings.redis_server, idle=settings.embedded_idle)
        store.replica_wait = settings.replica_wait
    services = Services(settings, store, _Shared(_generation(org, settings)),
                        single=not isinstance(config, Org))
    store.redact_with(services.redact)  # the store's door knows the config's secrets too
    activate(services.redact)  # and so do the process's log, terminal and span doors
    return services


def _generation(org: Org, settings: Settings) -> _Generation:
    """One load's runners (one pool over every service's hosts), redactor and names."""
    configs = list(org.services.values())
    secrets = [secret for config in configs for secret in config.secrets]
    redact = Redactor.from_env([*dict.fromkeys(secrets), *settings.secret_values()])
    words = [word for config in configs
             for name, env in config.inventory.environments.items()
             for word in (name, *env.aliases)]
    return _Generation(org, RunnerPool(inventory=_union(configs)), redact,
                       ServiceNames.of(org.services, words))


def _org_of(config: Config) -> Org:
    """A config built or loaded on its own: an organisation of one (legacy) service."""
    legacy = config.name if config.key is None else None
    return Org(config.main_path or config.path, {config.name: config}, legacy=legacy)


def _union(configs: list[Config]) -> Inventory:
    """Every service's hosts in one inventory, for the one pool (names are unique across
    services: a host two services share is refused at load until shared hosts land)."""
    if len(configs) == 1:
        return configs[0].inventory
    first = configs[0].inventory
    hosts = {name: host for config in configs for name, host in config.inventory.hosts.items()}
    return Inventory(known_hosts=first.known_hosts, ssh=first.ssh, hosts=hosts)


def _default(org: Org) -> str:
    """The service meant when none is named: the only one, else the legacy one."""
    if len(org.services) == 1:
        return next(iter(org.services))
    if org.legacy is not None:
        return org.legacy
    raise WhichService(sorted(org.services))


def _build(name: str, config: Config, settings: Settings, generation: _Generation) -> Service:
    """Service ``name``: a planner that sees only its tools, inventory and policy, and an
    executor with its catalog, inventory and vars over the organisation's one pool."""
    planner = build_planner(config, settings)
    deps = ExecutorDeps(config.catalog, config.inventory, generation.runners.for_host,
                        config.vars, generation.redact,
                        replan=lambda plan, run: planner.replan(
                            plan, run, requested_by=run.requested_by),
                        needs_approval=lambda old, new: changes_mutating_steps(
                            old, new, config.catalog))
    return Service(name, config, planner, Executor(deps, on_failure=config.policy.on_failure))


def store_dir(config: Config) -> Path | None:
    """The state directory whose server is the store without REDIS_URL: the organisation's
    (a service's own is ``services/NAME`` in it), so every service shares one store."""
    own = config.state_dir
    if own is not None and config.main_path is not None and own.parent.name == "services" \
            and own.name == config.name:
        return own.parent.parent
    return own
