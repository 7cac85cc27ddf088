"""What one host event costs as the fleet grows, before and after the host journal (issue 23).

A step fanned out to N hosts emits about 3N host events (started, pid, finished). Before,
the worker rewrote the whole run record per event — O(N) bytes each, O(N²) per step — and
the Slack thread copied the whole run per event; now a host event is one HSET of that
host's change to the run's host journal, and the thread folds it into its own copy. Both
ways are measured in the same run against the same real redis-server:

1. per host event, one thread: apply + the store listener (main's full-record rewrite vs
   the journal write), and the Slack listener's copy (deep copy vs ``RunMirror``);
2. a whole step through the real executor and the worker's listener on N hosts (a runner
   that answers at once, so only deckhand's own cost is left), ``max_parallel`` hosts at a
   time: wall per host event, and the announced batch's one WAIT-able write.

Run: python -m bench.host_events [--hosts 20,200,500] [--reps 3]
(starts its own redis-server on a free port; or set REDIS_URL, whose database is flushed).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from agents.config import Config
from agents.engine.recorder import RunRecorder
from agents.plan.model import Plan
from agents.plan.targets import PlanTargets, StepTargets
from agents.run.executor import Deferred, Executor, ExecutorDeps, Listener
from agents.run.mirror import RunMirror
from agents.run.record import HOST_EVENTS, Event, EventKind, Run, RunStatus
from agents.store import Store
from bench.store_history import redis_url
from tests.fixtures.builders import fan_out_events, fleet, make_plan, production_fleet
from tools.inventory import Host
from tools.runners.base import CancelToken, CommandResult, OutputSink, PidSink

TOOLS = """
tools:
  deploy:
    description: change every host of an environment
    command: "deploy {host.name}"
    target: environment
    mutates: true
    rollback: undo
  undo:
    description: undo it
    command: "undo {host.name}"
    target: environment
    mutates: true
"""


class InstantRunner:
    """Answers every command at once: what is measured is deckhand's own cost per host."""

    def __init__(self) -> None:
        self.pids = iter(range(1000, 10**9))

    def run(self, command: str, *, timeout: float, on_output: OutputSink | None = None,
            cancel: CancelToken | None = None, on_start: PidSink | None = None
            ) -> CommandResult:
        if on_start is not None:
            on_start(next(self.pids))
        if on_output is not None:
            on_output("deployed")
        return CommandResult(exit_code=0, tail="deployed", duration=0.0)

    def kill_group(self, pid: int) -> None:
        return None

    def check_ready(self) -> None:
        return None


def fleet_plan() -> Plan:
    return make_plan([{"id": "deploy", "tool": "deploy",
                       "params": {"environment": "production"}}],
                     rollback=[{"id": "undo", "tool": "undo",
                                "params": {"environment": "production"}}])


def full_rewrite(store: Store, worker: str) -> Listener:
    """main's store listener: the whole record rewritten on every event but output."""
    def persist(event: Event, run: Run) -> None:
        if event.kind is not EventKind.STEP_OUTPUT:
            store.leases.save_as_owner(run, worker=worker)
    return persist


def deep_copy(event: Event, run: Run) -> None:
    """main's Slack thread listener: a copy of the whole run per event."""
    if event.kind is not EventKind.STEP_OUTPUT:
        run.model_copy(deep=True)


def fleet_targets(plan: Plan, hosts: list[str]) -> PlanTargets:
    """What resolving the plan against ``production_fleet`` gives, without the config."""
    return PlanTargets({s.id: StepTargets(environments=("production",), hosts=tuple(hosts),
                                          outside=False) for s in plan.all_steps})


def claimed_run(store: Store, plan: Plan, hosts: list[str]) -> Run:
    run = store.runs.create(Run.for_plan(plan, fleet_targets(plan, hosts),
                                         status=RunStatus.QUEUED))
    claimed = store.leases.claim(run.id, worker="bench", lease=300)
    assert claimed is not None
    return claimed


def per_event(store: Store, hosts: list[str], listener: Callable[[Store], Listener]) -> float:
    """Seconds per host event: apply, then the listener and what it defers, one thread."""
    plan = store.plans.save(fleet_plan())
    run = claimed_run(store, plan, hosts)
    listen = listener(store)
    spent = 0.0
    for event in [Event(kind=EventKind.RUN_STARTED, run_id=run.id),
                  *fan_out_events(run.id, "deploy", hosts)]:
        started = time.perf_counter()
        run.apply(event)
        later: Deferred | None = listen(event, run)
        if later is not None:
            later()
        if event.kind in HOST_EVENTS:
            spent += time.perf_counter() - started
    return spent / (3 * len(hosts) + 1)


def recorder(store: Store) -> Listener:
    return RunRecorder(leases=store.leases, audit=store.audit, plans=store.plans,
                       worker="bench", token=CancelToken())


def whole_step(store: Store, config: Config, listener: Callable[[Store], Listener]) -> float:
    """Seconds of wall time per host event for one step on every host, real executor."""
    plan = store.plans.save(fleet_plan())
    run = claimed_run(store, plan, config.inventory.environments["production"].hosts)
    runner = InstantRunner()
    lock = threading.Lock()

    def runner_for(host: Host) -> InstantRunner:
        with lock:
            return runner

    executor = Executor(ExecutorDeps(config.catalog, config.inventory, runner_for))
    listen = listener(store)
    durable = listen.durable if isinstance(listen, RunRecorder) else None
    started = time.perf_counter()
    final = executor.execute(plan, run, listeners=[listen], durable=durable)
    took = time.perf_counter() - started
    assert final.status is RunStatus.SUCCEEDED, final.reason
    return took / (3 * len(final.steps["deploy"].hosts) + 1)


def copies(hosts: list[str], listener: Callable[[], Listener]) -> float:
    """Seconds per host event for the Slack thread's listener alone."""
    plan = fleet_plan()
    run = Run.for_plan(plan, fleet_targets(plan, hosts), status=RunStatus.APPROVED)
    listen = listener()
    spent = 0.0
    for event in [Event(kind=EventKind.RUN_STARTED, run_id=run.id),
                  *fan_out_events(run.id, "deploy", hosts)]:
        run.apply(event)
        started = time.perf_counter()
        listen(event, run)
        if event.kind in HOST_EVENTS:
            spent += time.perf_counter() - started
    return spent / (3 * len(hosts) + 1)


def median(reps: int, measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(reps))


def rewrite(store: Store) -> Listener:
    return full_rewrite(store, "bench")


def no_store(store: Store) -> Listener:
    """No listener at all: the executor's own cost, the floor for the whole step."""
    def listen(event: Event, run: Run) -> None:
        return None
    return listen


def round_trip(store: Store, times: int = 200) -> float:
    """Seconds per bare PING: the floor a write that must be acknowledged cannot beat."""
    started = time.perf_counter()
    for _ in range(times):
        store.r.ping()
    return (time.perf_counter() - started) / times


def measure(store: Store, workdir: Path, n: int, reps: int) -> list[float]:
    """µs per host event: store rewrite, journal, a round trip, Slack copy, mirror, step
    wall (rewrite, journal, no store)."""
    hosts = fleet(n)
    config = production_fleet(workdir, hosts, TOOLS)
    found = [median(reps, lambda: per_event(store, hosts, rewrite)),
             median(reps, lambda: per_event(store, hosts, recorder)),
             median(reps, lambda: round_trip(store)),
             median(reps, lambda: copies(hosts, lambda: deep_copy)),
             median(reps, lambda: copies(hosts, RunMirror)),
             median(reps, lambda: whole_step(store, config, rewrite)),
             median(reps, lambda: whole_step(store, config, recorder)),
             median(reps, lambda: whole_step(store, config, no_store))]
    store.r.flushdb()
    return [f * 1e6 for f in found]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", default="20,200,500")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    with redis_url() as url, tempfile.TemporaryDirectory() as tmp:
        store = Store.connect(url)
        store.r.flushdb()
        print("µs per host event   store listener (1 thread)         Slack listener   "
              "whole step, wall")
        print(f"{'hosts':>5}  {'rewrite':>8} {'journal':>8} {'ratio':>6} {'RTTs':>5}  "
              f"{'copy':>7} {'mirror':>7}  {'rewrite':>8} {'journal':>8} {'ratio':>6} "
              f"{'no store':>8}")
        for n in (int(x) for x in args.hosts.split(",")):
            old, new, rtt, copy, mirror, wall_old, wall_new, floor = measure(
                store, Path(tmp), n, args.reps)
            print(f"{n:>5}  {old:>8.0f} {new:>8.0f} {old / new:>5.1f}× {new / rtt:>5.1f}  "
                  f"{copy:>7.0f} {mirror:>7.0f}  {wall_old:>8.0f} {wall_new:>8.0f} "
                  f"{wall_old / wall_new:>5.1f}× {floor:>8.0f}")
        print("RTTs: the journal's cost in bare PING round trips measured alongside (a write "
              "under the lease check is 3)")


if __name__ == "__main__":
    main()
