"""PromQL as Prometheus parses it, without a server: the ``promql-parser`` package
(GreptimeTeam's Rust port of Prometheus' parser, Python wheels on PyPI).

It answers two questions: would Prometheus refuse this query (syntax, and the types and
arity of its functions and operators), so ``deckhand check`` can refuse a gate without a
server; and which series does it read (its vector selectors), so a gate can ask how old
their newest samples are (``tools.gates``: staleness from the samples' own time).

Measured against Prometheus 2.42 on 73 queries (``bench/promql_parsers.py``): it refuses
none that Prometheus accepts and accepts 2 of 44 that it refuses (``info`` and
``sort_by_label``, both valid in Prometheus 3); the hand-written parser it replaced
accepted 23 of them (``rate(x)``, ``sum(x[5m])``, ``topk(x, y)`` …), gates that would only
fail once a batch had deployed. When the configured Prometheus is reachable, ``deckhand
check`` also asks it (``bot.cli.check_gates``).
"""

from __future__ import annotations

from typing import Any


class PromQLError(ValueError):
    """The query does not parse; the message names the problem."""


def parse(query: str) -> Any:
    """The query's syntax tree (``promql_parser.Expr``); PromQLError if Prometheus would
    refuse it."""
    import promql_parser  # a compiled module: only when a gate's query is read (start-up)

    if not query.strip():
        raise PromQLError("the query is empty")
    try:
        return promql_parser.parse(query)
    except ValueError as exc:
        raise PromQLError(str(exc)) from exc
    except BaseException as exc:  # a panic in the Rust parser: refuse, never pass
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        raise PromQLError(f"the PromQL parser could not read it ({exc})") from exc


def check(query: str) -> None:
    """Raise PromQLError unless ``query`` is valid PromQL."""
    parse(query)


def selectors(query: str) -> list[str]:
    """The series ``query`` reads, as instant selectors (``up{job="x"}``), each once, in
    order; those with ``offset`` or ``@`` are left out (they read the past on purpose)."""
    import promql_parser

    found: list[str] = []

    def visit(node: Any, *_: Any) -> bool:
        if isinstance(node, promql_parser.VectorSelector) and node.offset is None \
                and node.at is None and str(node) not in found:
            found.append(str(node))
        return True

    promql_parser.walk(parse(query), visit)
    return found
