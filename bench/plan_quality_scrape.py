"""What a /metrics scrape pays for plan quality from real use (``deckhand_plan_outcomes``).

Seeds N runs through the store API (LLM plans from 3 prompt versions × 2 models and
playbook plans; approved, modified, rejected, failed, rolled back; a sixth still waiting),
then times the plan-quality collector's refresh from the store (at most once a minute): the
first (every run of the window and its plans) and the next ones (runs that ended are kept,
so only the index and the runs still open are read), and a scrape between refreshes. Each
against one bare Redis round trip and the queue collector's scrape, measured in the same run.

Run: python -m bench.plan_quality_scrape [--runs 5000]
(starts its own redis-server on a free port; or set REDIS_URL, whose database is flushed).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import redis
from prometheus_client import CollectorRegistry, generate_latest

from agents.plan.model import Plan, PlannerInfo
from agents.run.record import Approval, Run, RunStatus
from agents.store import Store
from bench.store_history import redis_url
from bench.timing import median_ms
from bot.metrics import Metrics
from tests.fixtures.builders import NO_TARGETS

MAKERS = [PlannerInfo(name="llm", model=model, prompt="plan", prompt_version=version)
          for version in ("3f2a1b0c9d8e", "77ab12cd34ef", "0c0ffee01234")
          for model in ("gpt-4o", "gpt-4o-mini")] + [PlannerInfo(name="playbook deploy")]
ENDINGS = [RunStatus.SUCCEEDED, RunStatus.SUCCEEDED, RunStatus.ROLLED_BACK, RunStatus.FAILED,
           RunStatus.REJECTED, RunStatus.AWAITING_APPROVAL]


def seed(store: Store, n: int) -> None:
    for i in range(n):
        plan = Plan.model_validate({
            "goal": f"deploy v2.{i % 50}.0", "planner": MAKERS[i % len(MAKERS)],
            "steps": [{"id": "build", "tool": "build", "params": {"version": f"v2.{i % 50}.0"}},
                      {"id": "deploy", "tool": "deploy", "depends_on": ["build"],
                       "params": {"environment": "staging"}}]})
        store.plans.save(plan)
        run = store.runs.create(Run.for_plan(plan, NO_TARGETS))
        if i % 7 == 0:  # a Modify: one parameter changed
            edited = plan.revised(steps=[{**plan.steps[0].model_dump(), "params": {"v": "x"}},
                                         plan.steps[1].model_dump()])
            store.plans.save(edited)
            store.runs.revise(run.id, edited, NO_TARGETS)
        store.runs.update(run.id, _ending(ENDINGS[i % len(ENDINGS)]))


def _ending(final: RunStatus) -> Callable[[Run], None]:
    def change(run: Run) -> None:
        if final in (RunStatus.AWAITING_APPROVAL, RunStatus.REJECTED):
            if final is RunStatus.REJECTED:
                run.move(final)
            return
        run.approvals.append(Approval(user="bob", plan_version=run.plan_version,
                                      plan_hash=run.plan_hash))
        run.move(RunStatus.APPROVED)
        run.move(RunStatus.RUNNING)
        run.started_at = time.time()
        if final is RunStatus.ROLLED_BACK:
            run.move(RunStatus.ROLLING_BACK)
        run.move(final)
    return change


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5000)
    args = parser.parse_args()
    with redis_url() as url:
        redis.Redis.from_url(url).flushdb()
        store = Store.connect(url)
        started = time.perf_counter()
        seed(store, args.runs)
        print(f"seeded {args.runs} runs in {time.perf_counter() - started:.1f} s")
        now = [time.time()]
        quality, queue = Metrics(CollectorRegistry()), Metrics(CollectorRegistry())
        quality.watch_plan_quality(runs=store.runs, plans=store.plans, clock=lambda: now[0])
        queue.watch_queue(store.queue)

        def refresh() -> None:
            now[0] += 60  # a minute passed: the collector reads the store again
            generate_latest(quality.registry)

        cold = median_ms(refresh, 1)
        warm = median_ms(refresh, 10)
        cached = median_ms(lambda: generate_latest(quality.registry), 50)
        bare = median_ms(lambda: store.r.ping(), 200)
        peer = median_ms(lambda: generate_latest(queue.registry), 20)
        text = generate_latest(quality.registry).decode()
        series = sum(1 for line in text.splitlines() if line.startswith("deckhand_plan_"))
        print(f"refresh (at most once a minute): first {cold:.0f} ms, then {warm:.1f} ms = "
              f"{warm / bare:.0f} bare round trips ({bare:.3f} ms); a scrape in between "
              f"{cached:.2f} ms vs the queue collector's {peer:.2f} ms "
              f"({cached / peer:.1f}×); {series} series")

if __name__ == "__main__":
    main()
