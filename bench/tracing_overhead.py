"""What tracing costs the executor, measured against the executor itself in the same run.

1. Off (no OTLP endpoint, the OpenTelemetry API's no-op tracer): the cost of one
   ``agents.tracing.span`` block, and the executor's per-step time on an 8-step chain of
   ``true`` steps, as a ratio against a bare ``subprocess.run`` of the same command.
2. On (the SDK with its batching exporter sending OTLP/HTTP to a loopback receiver, as
   ``deckhand`` configures it from ``OTEL_EXPORTER_OTLP_ENDPOINT``): the same chain again.
   The difference of the two per-step medians is tracing's cost per step (target < 0.2 ms);
   the spans the receiver decoded are counted, so "on" is shown to be on. A span's own
   cost, off and on, times the spans a step makes, is the steadier figure on a busy machine.

Off is measured first: OpenTelemetry allows one tracer provider per process.

Run: python -m bench.tracing_overhead [--reps 60]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from agents import tracing
from bench.executor_overhead import TOOLS, bare_median, executor_per_step
from bot import telemetry
from tests.fixtures.builders import make_config, make_executor
from tests.fixtures.otlp import Receiver
from tests.fixtures.polling import wait_until

STEPS = 8
SPAN_CALLS_ON = 1500  # under the batch queue's 2048, so the exporter keeps up and none drops


def span_cost(calls: int = 50_000) -> float:
    """Seconds per ``span`` block with whatever provider is installed (none: the no-op)."""
    started = time.perf_counter()
    for _ in range(calls):
        with tracing.span("deckhand.bench", {"n": 1}):
            pass
    return (time.perf_counter() - started) / calls


def per_step(executor: object, reps: int) -> float:
    """Median of three medians, so one noisy stretch does not decide the figure."""
    return statistics.median(executor_per_step(executor, reps, STEPS) for _ in range(3))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=60)
    args = parser.parse_args()
    receiver = Receiver()
    with tempfile.TemporaryDirectory() as tmp:
        executor = make_executor(make_config(Path(tmp), tools=TOOLS))
        executor_per_step(executor, 5, STEPS)  # warm imports and thread pools
        bare = bare_median(args.reps * STEPS)
        off_span = span_cost()
        off = per_step(executor, args.reps)
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
        assert telemetry.configure_tracing("deckhand-bench"), "tracing did not switch on"
        executor_per_step(executor, 5, STEPS)
        on = per_step(executor, args.reps)
        on_span = span_cost(SPAN_CALLS_ON)
        telemetry.shutdown()  # flushes what is queued
        wait_until(lambda: receiver.starting("step "), timeout=10)
        steps_traced = len(receiver.starting("step "))
        spans_per_step = (len(receiver.spans) - SPAN_CALLS_ON) / max(steps_traced, 1)
    receiver.shutdown()
    print(f"bare subprocess `true`:       {bare * 1000:.3f} ms median")
    print(f"one span, off / on:           {off_span * 1e6:.1f} µs / {on_span * 1e6:.1f} µs "
          f"({spans_per_step:.1f} spans per step: {spans_per_step * on_span * 1000:.3f} ms "
          f"a step on, the steadier figure)")
    print(f"executor per step, off:       {off * 1000:.3f} ms ({off / bare:.2f}x bare)")
    print(f"executor per step, on:        {on * 1000:.3f} ms ({on / bare:.2f}x bare)")
    print(f"tracing cost per step:        {(on - off) * 1000:+.3f} ms "
          f"({on / off:.3f}x off; target < 0.2 ms); {steps_traced} step spans exported")


if __name__ == "__main__":
    main()
