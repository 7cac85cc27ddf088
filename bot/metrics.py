"""Prometheus metrics for the bot and its workers. Every metric deckhand exports is defined here.

Each ``Metrics`` has its own registry (no module globals), served at ``/metrics`` by
``deckhand serve --http`` and, with ``--metrics-port``, by ``deckhand worker``:

=====================================  ==========================================================
``deckhand_runs_total{outcome,service}``  runs that ended (succeeded, rolled_back, failed, …)
``deckhand_step_duration_seconds``     step (and rollback step) durations, by ``tool``, ``phase``
                                       and ``status``
``deckhand_run_start_delay_seconds``   last approval → run start: queueing, plus any wait behind
                                       another run's environment lock (``lock: wait`` policy)
``deckhand_queue_depth{state}``        queue entries ``waiting`` for a worker / ``in_progress``
``deckhand_redis_up``                  1 if Redis answered the scrape
``deckhand_slack_api_errors_total``    Slack Web API failures by ``method`` and ``error``
``deckhand_slack_rate_limited_total``  429 answers by ``method`` (each one, retries included)
``deckhand_plans_total{planner,service}``  plans made
``deckhand_plan_latency_seconds``      planner latency by ``planner``
``deckhand_llm_tokens_total``          LLM tokens by ``model`` and ``kind`` (prompt/completion)
``deckhand_llm_retries_total``         model calls retried by ``model`` and ``reason``
                                       (rate_limited, server_error, timeout, connection)
``deckhand_timeline_uploads_total``    run timeline uploads by ``result`` (ok/failed)
``deckhand_deploys_per_day``           deploys per ``service`` and ``environment``, last 30 days
``deckhand_change_failure_rate``       failed or undone deploys / deploys, same labels
``deckhand_time_to_restore_seconds``   mean failed deploy → next good one, same labels
``deckhand_slack_work_depth``          Slack jobs waiting or running in the bot's own pool
``deckhand_slack_work_refused_total``  Slack jobs refused because that pool was full
``deckhand_plan_outcomes``             runs of the last 30 days by what made their first plan
                                       (``planner``, ``prompt_version``, ``model``) and what
                                       became of it (``outcome``: planned, approved_unchanged,
                                       modified, rejected, replanned, succeeded, failed,
                                       rolled_back)
``deckhand_plan_modified_changes``     plan-diff size summed over those modified, same labels
``deckhand_ssh_setups_total{result}``  SSH connection setups: ``connected``, ``retried`` (the
                                       server dropped it before login, e.g. sshd's MaxStartups,
                                       and it was tried again), ``failed`` (every attempt dropped)
``deckhand_audit_sink_lag``            audit entries not yet taken by ``audit.sink`` (read from
                                       Redis at scrape time; absent when Redis does not answer)
=====================================  ==========================================================

``service`` is the service's name, empty for the legacy service (a config without
``services:``): Prometheus reads an empty label as none, so one-service queries and
dashboards are unchanged. Step durations carry no service (tools × phases × buckets ×
services would be tens of thousands of series).

Hooks, so ``agents`` never imports this module: a run listener factory for workers, a
planner wrapper, and an observing retry handler on the Slack client.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agents.errors import StoreError
from agents.evaluation.quality import (
    OUTCOMES,
    Fate,
    PlanRef,
    counted,
    fate_from,
    plans_needed,
    tally,
)
from agents.history.deploys import DAY, stats
from agents.plan.model import Plan
from agents.run.executor import Listener
from agents.run.record import Event, EventKind, Run, StepStatus
from agents.store import AuditFeed, History, Plans, Queue, Runs
from tools.runners.pacing import SetupStats

STEP_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
DELAY_BUCKETS = (0.05, 0.25, 1, 5, 15, 60, 300, 900, 3600)
PLAN_BUCKETS = (0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class Metrics:
    """The metrics of one process, and the hooks that feed them."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.runs = Counter("deckhand_runs", "Runs that ended, by outcome",
                            ["outcome", "service"], registry=r)
        self.step_seconds = Histogram(
            "deckhand_step_duration_seconds", "Step durations by tool",
            ["tool", "phase", "status"], buckets=STEP_BUCKETS, registry=r)
        self.start_delay = Histogram(
            "deckhand_run_start_delay_seconds",
            "From the last approval to the run starting, lock waits included",
            buckets=DELAY_BUCKETS, registry=r)
        self.slack_errors = Counter("deckhand_slack_api_errors", "Failed Slack Web API calls",
                                    ["method", "error"], registry=r)
        self.slack_rate_limited = Counter("deckhand_slack_rate_limited",
                                          "Slack 429 answers", ["method"], registry=r)
        self.plans = Counter("deckhand_plans", "Plans made", ["planner", "service"],
                             registry=r)
        self.plan_seconds = Histogram("deckhand_plan_latency_seconds", "Planner latency",
                                      ["planner"], buckets=PLAN_BUCKETS, registry=r)
        self.llm_tokens = Counter("deckhand_llm_tokens", "LLM tokens used for plans",
                                  ["model", "kind"], registry=r)
        self.llm_retries = Counter("deckhand_llm_retries",
                                   "Model calls retried after a transient failure",
                                   ["model", "reason"], registry=r)
        self.timeline_uploads = Counter("deckhand_timeline_uploads",
                                        "Run timeline uploads to Slack", ["result"], registry=r)

    # -- exposition ---------------------------------------------------------------------------

    def wsgi_app(self) -> Callable[..., Iterable[bytes]]:
        """A WSGI app answering with the text exposition format (for ``/metrics``)."""
        return make_wsgi_app(self.registry)

    def serve(self, *, host: str, port: int) -> Any:
        """Serve ``/metrics`` on its own port (for ``deckhand worker``); returns the server."""
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return server

    # -- hooks --------------------------------------------------------------------------------

    def watch_history(self, history: History, environments: list[str], *,
                      undo_window: float, service: str | None = None) -> None:
        """Export delivery figures (DORA, last 30 days) per environment of ``service``,
        read at scrape time."""
        self.watch_org_history(history, [(service, env) for env in environments],
                               undo_window=undo_window)

    def watch_org_history(self, history: History, scopes: list[tuple[str | None, str]], *,
                          undo_window: float) -> None:
        """Export delivery figures (DORA, last 30 days) per (service, environment) of an
        organisation, read at scrape time (one collector: the families are registered once)."""
        self.registry.register(_HistoryCollector(history, scopes, undo_window))

    def watch_plan_quality(self, *, runs: Runs, plans: Plans, max_makers: int = 10,
                           clock: Callable[[], float] = time.time) -> None:
        """Export what became of each prompt version's and model's plans, read from the store
        at most once a minute (``max_makers`` bounds the label sets; the rest are summed as
        ``other``)."""
        self.registry.register(_QualityCollector(runs=runs, plans=plans, max_makers=max_makers,
                                                 clock=clock))

    def watch_work(self, depth: Callable[[], int], refused: Callable[[], int]) -> None:
        """Export the Slack work pool's depth and refusals, read at scrape time."""
        self.registry.register(_WorkCollector(depth, refused))

    def watch_ssh(self, stats: Callable[[], SetupStats]) -> None:
        """Export SSH connection setups (connected, retried, failed), read at scrape time."""
        self.registry.register(_SSHCollector(stats))

    def watch_queue(self, queue: Queue) -> None:
        """Export the queue's depth (and whether Redis answers), read at scrape time."""
        self.registry.register(_QueueCollector(queue))

    def watch_audit_sink(self, feed: AuditFeed) -> None:
        """Export how many audit entries the sink has not taken yet, read at scrape time."""
        self.registry.register(_AuditSinkCollector(feed))

    def observe_planner(self, planner: Any) -> Any:
        """Wrap a planner so every plan it makes is counted (tokens, latency), and so are
        its model calls' retries."""
        self.observe_retries(planner)
        return _ObservedPlanner(planner, self)

    def observe_retries(self, planner: Any) -> None:
        """Count the retried model calls of ``planner`` (one without a model has none)."""
        observe = getattr(planner, "observe_retries", None)
        if observe is not None:
            observe(lambda model, reason: self.llm_retries.labels(model, reason).inc())

    def record_plan(self, plan: Plan) -> None:
        """Count a plan, its planner's latency and, for an LLM plan, its tokens."""
        info = plan.planner
        self.plans.labels(info.name, plan.service or "").inc()
        self.plan_seconds.labels(info.name).observe(info.latency_ms / 1000)
        if info.model:
            self.llm_tokens.labels(info.model, "prompt").inc(info.prompt_tokens)
            self.llm_tokens.labels(info.model, "completion").inc(info.completion_tokens)

    def timeline_uploaded(self, ok: bool | None) -> None:
        """Count a timeline upload that worked (``ok``), failed, or could not be drawn
        (None: matplotlib is not installed; see bot.charts)."""
        self.timeline_uploads.labels("unavailable" if ok is None
                                     else "ok" if ok else "failed").inc()

    def run_listener_factory(self, plans: Plans) -> Callable[[Run], Listener]:
        """For workers: an executor listener per run that records its steps and outcome."""
        def factory(run: Run) -> Listener:
            plan = plans.get(run.plan_id, run.plan_version)
            tools = {s.id: s.tool for s in plan.steps} | {r.id: r.tool for r in plan.rollback}
            return _RunRecorder(self, tools)
        return factory


class _RunRecorder:
    """An executor listener: cheap counter updates only (it runs under the executor's lock)."""

    def __init__(self, metrics: Metrics, tools: dict[str, str]):
        self.metrics, self.tools = metrics, tools

    def __call__(self, event: Event, run: Run) -> None:
        if event.kind is EventKind.RUN_STARTED:
            self._started(run)
        elif event.kind is EventKind.STEP_FINISHED and event.step_id:
            self._step(event, run)
        elif event.kind is EventKind.RUN_FINISHED:
            self.metrics.runs.labels(event.status or "unknown", run.service or "").inc()

    def _started(self, run: Run) -> None:
        if run.meta.get("previous_worker") or not run.approvals or run.started_at is None:
            return  # a resumed run was measured when it first started
        delay = run.started_at - max(a.at for a in run.approvals)
        self.metrics.start_delay.observe(max(delay, 0.0))

    def _step(self, event: Event, run: Run) -> None:
        state = run.states(event.phase)[event.step_id or ""]
        if state.started_at is None or state.status is StepStatus.SKIPPED:
            return
        took = (state.finished_at or event.at) - state.started_at
        tool = self.tools.get(state.id, "unknown")
        self.metrics.step_seconds.labels(tool, event.phase.value,
                                         state.status.value).observe(took)


class _HistoryCollector(Collector):
    """Deploy frequency, change-failure rate and time to restore from the recorded history."""

    DAYS = 30.0

    def __init__(self, history: History, scopes: list[tuple[str | None, str]],
                 undo_window: float):
        self.history, self.scopes, self.undo_window = history, scopes, undo_window

    def describe(self) -> Iterable[Metric]:
        return self._families()  # no samples: registering must not call Redis

    def collect(self) -> Iterator[Metric]:
        per_day, failure, restore = self._families()
        now = time.time()
        for service, env in self.scopes:
            labels = [service or "", env]
            try:
                deploys = self.history.facts_since(service, env,
                                                   now - self.DAYS * DAY)  # all of it
            except StoreError:
                return  # deckhand_redis_up says why
            figures = stats(deploys, environment=env, now=now, days=self.DAYS,
                            undo_window=self.undo_window)
            per_day.add_metric(labels, figures.per_day)
            if figures.change_failure_rate is not None:
                failure.add_metric(labels, figures.change_failure_rate)
            if figures.time_to_restore is not None:
                restore.add_metric(labels, figures.time_to_restore)
        yield from (per_day, failure, restore)

    @staticmethod
    def _families() -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily("deckhand_deploys_per_day", "Deploys per day, last 30 days",
                                  labels=["service", "environment"]),
                GaugeMetricFamily("deckhand_change_failure_rate",
                                  "Failed or undone deploys / deploys, last 30 days",
                                  labels=["service", "environment"]),
                GaugeMetricFamily("deckhand_time_to_restore_seconds",
                                  "Mean time from a failed deploy to the next good one",
                                  labels=["service", "environment"])]
class _QualityCollector(Collector):
    """Plan quality from real use (``agents.evaluation.quality``) over the last 30 days.

    Read from the store at most once a ``REFRESH`` (scrapes in between get the same
    figures: a 30-day window needs no fresher ones). A run's fate is final once it ended, so
    it is kept; so are the plans of runs still open (plan versions never change): a refresh
    reads the window's ids, the runs not yet seen ended, and only plans it lacks.
    """

    DAYS = 30.0
    MAX_RUNS = 5000
    REFRESH = 60.0

    def __init__(self, *, runs: Runs, plans: Plans, max_makers: int,
                 clock: Callable[[], float] = time.time):
        self.runs, self.stored_plans = runs, plans
        self.max_makers, self.clock = max_makers, clock
        self.ended: dict[str, Fate | None] = {}
        self.plans: dict[PlanRef, Plan | None] = {}
        self.figures: tuple[list[Metric], float] | None = None
        self.lock = threading.Lock()  # scrapes may overlap

    def describe(self) -> Iterable[Metric]:
        return self._families()  # no samples: registering must not call Redis

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            now = self.clock()
            if self.figures is None or now - self.figures[1] >= self.REFRESH:
                try:
                    self.figures = (self._read_figures(now), now)
                except StoreError:
                    return  # deckhand_redis_up says why
            families = self.figures[0]
        yield from families

    def _read_figures(self, now: float) -> list[Metric]:
        runs, changes = self._families()
        for maker, counts in tally(self._fates(now), max_makers=self.max_makers).items():
            labels = [maker.planner, maker.prompt_version, maker.model]
            for outcome in OUTCOMES:
                runs.add_metric([*labels, outcome], counts.outcomes[outcome])
            changes.add_metric(labels, counts.changes)
        return [runs, changes]

    def _fates(self, now: float) -> list[Fate]:
        ids = self.runs.ids_since(now - self.DAYS * 86400, limit=self.MAX_RUNS)
        self.ended = {i: self.ended[i] for i in ids if i in self.ended}  # the window moved
        kept = [f for f in self.ended.values() if f is not None]
        return kept + self._read([i for i in ids if i not in self.ended])

    def _read(self, run_ids: list[str]) -> list[Fate]:
        """Fates of these runs; the ones that ended are kept for good."""
        runs = [run for run in self.runs.by_id(run_ids) if counted(run)]
        needed = {run.id: plans_needed(run) for run in runs}
        self._load([ref for refs in needed.values() for ref in refs])
        out = []
        for run in runs:
            one = fate_from(run, self.plans)
            if run.status.terminal:
                self.ended[run.id] = one
            if one is not None:
                out.append(one)
        still_open = {ref for run in runs if not run.status.terminal for ref in needed[run.id]}
        self.plans = {ref: self.plans[ref] for ref in still_open}
        return out

    def _load(self, refs: list[PlanRef]) -> None:
        missing = list(dict.fromkeys(ref for ref in refs if ref not in self.plans))
        self.plans.update(zip(missing, self.stored_plans.at(missing), strict=True))

    @staticmethod
    def _families() -> list[GaugeMetricFamily]:
        makers = ["planner", "prompt_version", "model"]
        return [GaugeMetricFamily("deckhand_plan_outcomes",
                                  "Runs of the last 30 days by what made their first plan and "
                                  "what became of it", labels=[*makers, "outcome"]),
                GaugeMetricFamily("deckhand_plan_modified_changes",
                                  "Plan-diff size from the planner's plan to the last Modify, "
                                  "summed over the modified runs of the last 30 days",
                                  labels=makers)]


class _WorkCollector(Collector):
    """The Slack work pool: how far behind it is, and how often it told users it was full."""

    def __init__(self, depth: Callable[[], int], refused: Callable[[], int]):
        self.depth, self.refused = depth, refused

    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily("deckhand_slack_work_depth",
                                  "Slack jobs waiting or running in the bot's work pool")
        depth.add_metric([], self.depth())
        refused = CounterMetricFamily("deckhand_slack_work_refused",
                                      "Slack jobs refused because the work pool was full")
        refused.add_metric([], self.refused())
        yield depth
        yield refused


class _SSHCollector(Collector):
    """The runner pool's connection setups: how often a busy sshd dropped one before login."""

    def __init__(self, stats: Callable[[], SetupStats]):
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self.stats()
        setups = CounterMetricFamily("deckhand_ssh_setups", "SSH connection setups by result",
                                     labels=["result"])
        setups.add_metric(["connected"], stats.connections)
        setups.add_metric(["retried"], stats.retries)
        setups.add_metric(["failed"], stats.failures)
        yield setups


class _QueueCollector(Collector):
    """Reads the queue at scrape time; a Redis outage shows as ``deckhand_redis_up 0``."""

    def __init__(self, queue: Queue):
        self.queue = queue

    def describe(self) -> Iterable[Metric]:
        return [self._up(), self._depth()]  # no samples: registering must not call Redis

    def collect(self) -> Iterator[Metric]:
        up, depth = self._up(), self._depth()
        try:
            waiting, in_progress = self.queue.backlog()
        except StoreError:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        depth.add_metric(["waiting"], waiting)
        depth.add_metric(["in_progress"], in_progress)
        yield up
        yield depth

    @staticmethod
    def _up() -> GaugeMetricFamily:
        return GaugeMetricFamily("deckhand_redis_up", "1 if Redis answered this scrape")

    @staticmethod
    def _depth() -> GaugeMetricFamily:
        return GaugeMetricFamily("deckhand_queue_depth", "Run queue entries by state",
                                 labels=["state"])


class _AuditSinkCollector(Collector):
    """The audit sink's lag: entries in the stream the sink has not taken."""

    def __init__(self, feed: AuditFeed):
        self.feed = feed

    def describe(self) -> Iterable[Metric]:
        return [self._lag()]

    def collect(self) -> Iterator[Metric]:
        lag = self._lag()
        try:
            lag.add_metric([], self.feed.lag())
        except StoreError:
            return  # deckhand_redis_up says why
        yield lag

    @staticmethod
    def _lag() -> GaugeMetricFamily:
        return GaugeMetricFamily("deckhand_audit_sink_lag",
                                 "Audit entries the audit sink has not taken yet")


class _ObservedPlanner:
    """A planner that records each plan it returns; anything else passes through."""

    def __init__(self, inner: Any, metrics: Metrics):
        self._inner, self._metrics = inner, metrics

    def plan(self, request: str, *, requested_by: str) -> Plan:
        plan: Plan = self._inner.plan(request, requested_by=requested_by)
        self._metrics.record_plan(plan)
        return plan

    def modify(self, plan: Plan, instruction: str, *, requested_by: str) -> Plan:
        revised: Plan = self._inner.modify(plan, instruction, requested_by=requested_by)
        self._metrics.record_plan(revised)
        return revised

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
