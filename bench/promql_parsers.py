"""deckhand's local PromQL check (``tools.promql``) against the ``promql-parser`` package
(issue 42 §4), both judged by a real Prometheus (Debian's, started on a loopback port).

Each query is sent to Prometheus' query API: refused (400/422) or accepted is the truth.
For each checker, printed: how many of the accepted queries it refuses (a false refusal
stops a deploy whose gate is right) and how many of the refused ones it accepts (a gate
that fails only once a batch has deployed), naming each; and the time per query.

    PYTHONPATH=$PWD python bench/promql_parsers.py   # promql-parser must be importable
"""

from __future__ import annotations

import tempfile
import time
import urllib.error
from collections.abc import Callable
from pathlib import Path

from tests.fixtures.prometheus import Prometheus
from tests.integration.test_gate_check import INVALID, VALID
from tools import promql

TYPE_ERRORS = [  # parse as syntax; Prometheus' parser refuses them by type or arity
    'rate(x)', 'sum(x[5m])', 'x[5m] + 1', 'topk(x, y)', 'histogram_quantile("a", x)',
    'label_replace(up, "foo")', 'abs(x, y)', 'time(x)', 'x offset 5m offset 5m',
    'x @ 1 @ 2', '"a" + 1', 'count_values(1, x)', 'x and 1', '1 and 2', '1 > 2',
    '{a=""}', 'x group_left y', 'vector(x)', 'scalar(x[5m])', 'rate(x[5m])[5m]',
    'sum by (a) (x) by (a)', 'x[0s]', 'quantile(x, y)', 'absent(x[5m])']
NEWER = ['info(up)', 'x offset 1m @ 5', 'x[5m:]', 'sort_by_label(up, "job")']


def prometheus_accepts(server: Prometheus, query: str) -> bool:
    try:
        server.query(query)
        return True
    except urllib.error.HTTPError as exc:
        assert exc.code in (400, 422), exc
        return False


def local(query: str) -> bool:
    try:
        promql.check(query)
        return True
    except promql.PromQLError:
        return False


def package(query: str) -> bool:
    import promql_parser

    try:
        promql_parser.parse(query)
        return True
    except Exception:  # it raises ValueError or a Rust panic's exception: both refusals
        return False


def judge(name: str, check: Callable[[str], bool], truth: dict[str, bool]) -> None:
    started = time.perf_counter()
    said = {q: check(q) for q in truth}
    each = (time.perf_counter() - started) / len(truth) * 1e6
    refused = [q for q, ok in truth.items() if ok and not said[q]]
    accepted = [q for q, ok in truth.items() if not ok and said[q]]
    bad = sum(1 for ok in truth.values() if not ok)
    print(f"{name}: refuses {len(refused)} of {len(truth) - bad} queries Prometheus accepts "
          f"{refused}; accepts {len(accepted)} of {bad} it refuses {accepted}; "
          f"{each:.0f} µs/query")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = Prometheus(Path(tmp), {})
        try:
            queries = VALID + INVALID + TYPE_ERRORS + NEWER
            truth = {q: prometheus_accepts(server, q) for q in queries}
        finally:
            server.stop()
    print(f"{len(truth)} queries, Prometheus accepts {sum(truth.values())}")
    judge("tools.promql", local, truth)
    judge("promql-parser", package, truth)


if __name__ == "__main__":
    main()
