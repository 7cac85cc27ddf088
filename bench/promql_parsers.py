"""deckhand's local PromQL check (``tools.promql``) against the ``promql-parser`` package
(issue 42 §4), both judged by a real Prometheus (Debian's, started on a loopback port).

Each query is sent to Prometheus' query API: refused (400/422) or accepted is the truth.
For each checker, printed: how many of the accepted queries it refuses (a false refusal
stops a deploy whose gate is right) and how many of the refused ones it accepts (a gate
that fails only once a batch has deployed), naming each; and the time per query.

    PYTHONPATH=$PWD python bench/promql_parsers.py [--old FILE]

``tools.promql`` is the promql-parser wrapper now; ``--old FILE`` also judges another
checker module with a ``check(query)`` (the hand-written parser it replaced:
``git show a60c420:tools/promql.py > /tmp/old_promql.py``). Measured on 2 shared cores,
Prometheus 2.42: 73 queries, 29 accepted; promql-parser refuses 0 of the 29 and accepts 2
of the 44 refused (``info``, ``sort_by_label``: Prometheus 3), 6 µs/query (28 with its
1 ms import in the first call); the hand-written parser refused 0 and accepted 23 of the
44, 14 µs/query.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
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


def module_checker(path: str) -> Callable[[str], bool]:
    """``check`` of the module at ``path``: True unless it raises ValueError."""
    spec = importlib.util.spec_from_file_location("old_promql", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_promql"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)

    def checks(query: str) -> bool:
        try:
            module.check(query)
            return True
        except ValueError:
            return False
    return checks


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
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old", help="another checker module to judge (a file path)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = Prometheus(Path(tmp), {})
        try:
            queries = VALID + INVALID + TYPE_ERRORS + NEWER
            truth = {q: prometheus_accepts(server, q) for q in queries}
        finally:
            server.stop()
    print(f"{len(truth)} queries, Prometheus accepts {sum(truth.values())}")
    judge("tools.promql (promql-parser)", local, truth)
    judge("promql-parser, directly", package, truth)
    if args.old:
        judge(f"{args.old}", module_checker(args.old), truth)


if __name__ == "__main__":
    main()
