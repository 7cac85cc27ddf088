"""A local PromQL syntax check: a tokenizer and a recursive-descent parser of the grammar
(Prometheus 2.x: selectors, matchers, ranges and subqueries, offset and @, functions,
aggregations with by/without, binary operators with bool/on/ignoring/group_left/right).

It answers one question — would Prometheus refuse to parse this? — with the first problem
and its column, so ``deckhand check`` can refuse a gate without a server. It does not type
check (a range vector where an instant one is wanted parses here); when the configured
Prometheus is reachable, ``deckhand check`` also asks it (``bot.cli.check_gates``).
No maintained pure-Python PromQL parser exists on PyPI, hence this one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

AGGREGATORS = frozenset({"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
                         "count_values", "bottomk", "topk", "quantile", "limitk",
                         "limit_ratio"})
FUNCTIONS = frozenset({
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
    "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh",
    "count_over_time", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "deg",
    "delta", "deriv", "exp", "floor", "histogram_avg", "histogram_count",
    "histogram_fraction", "histogram_quantile", "histogram_stddev", "histogram_stdvar",
    "histogram_sum", "holt_winters", "double_exponential_smoothing", "hour", "idelta",
    "increase", "irate", "label_join", "label_replace", "last_over_time", "ln", "log10",
    "log2", "mad_over_time", "max_over_time", "min_over_time", "minute", "month", "pi",
    "predict_linear", "present_over_time", "quantile_over_time", "rad", "rate", "resets",
    "round", "scalar", "sgn", "sin", "sinh", "sort", "sort_by_label", "sort_by_label_desc",
    "sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time", "sum_over_time", "tan",
    "tanh", "time", "timestamp", "vector", "year"})
BINARY = ("==", "!=", "<=", ">=", "<", ">", "+", "-", "*", "/", "%", "^", "and", "or",
          "unless", "atan2")
_TOKEN = re.compile(r"""
    (?P<ws>\s+|\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|`[^`]*`)
  | (?P<duration>(?:[0-9]+(?:ms|[smhdwy]))+(?![\w.]))
  | (?P<number>0[xX][0-9a-fA-F]+|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)
  | (?P<ident>[a-zA-Z_][a-zA-Z0-9_:]*)
  | (?P<op>=~|!~|==|!=|<=|>=|[-+*/%^<>=(){}\[\],:@])
""", re.VERBOSE)


class PromQLError(ValueError):
    """The query does not parse; the message names the problem and its column."""


@dataclass(frozen=True)
class _Tok:
    kind: str
    text: str
    col: int


def check(query: str) -> None:
    """Raise PromQLError unless ``query`` is syntactically valid PromQL."""
    tokens = _tokens(query)
    if not tokens:
        raise PromQLError("the query is empty")
    parser = _Parser(tokens)
    parser.expr()
    if parser.peek() is not None:
        tok = parser.peek()
        assert tok is not None  # noqa: S101 - just checked
        raise PromQLError(f"unexpected {tok.text!r} at column {tok.col}")


def _tokens(query: str) -> list[_Tok]:
    out, pos = [], 0
    while pos < len(query):
        found = _TOKEN.match(query, pos)
        if found is None:
            what = query[pos]
            hint = "an unterminated string" if what in "\"'`" else f"{what!r}"
            raise PromQLError(f"{hint} at column {pos + 1} is not PromQL")
        kind = found.lastgroup or ""
        if kind != "ws":
            out.append(_Tok(kind, found.group(), pos + 1))
        pos = found.end()
    return out


class _Parser:
    def __init__(self, tokens: list[_Tok]):
        self.tokens, self.i = tokens, 0

    def peek(self, ahead: int = 0) -> _Tok | None:
        index = self.i + ahead
        return self.tokens[index] if index < len(self.tokens) else None

    def take(self) -> _Tok:
        tok = self.peek()
        if tok is None:
            raise PromQLError("the query ends too early (an unclosed bracket, or an operator "
                              "with nothing after it)")
        self.i += 1
        return tok

    def expect(self, text: str) -> _Tok:
        if self.peek() is None and text in ")]}":
            raise PromQLError(f"unbalanced brackets: the query ends where {text!r} is needed")
        tok = self.take()
        if tok.text != text:
            raise PromQLError(f"expected {text!r} at column {tok.col}, found {tok.text!r}")
        return tok

    def at(self, *texts: str) -> bool:
        tok = self.peek()
        return tok is not None and tok.text.lower() in texts

    # -- expressions -------------------------------------------------------------------------

    def expr(self) -> None:
        self.unary()
        while self.at(*BINARY):
            self.take()
            if self.at("bool"):
                self.take()
            if self.at("on", "ignoring"):
                self.take()
                self.labels()
            if self.at("group_left", "group_right"):
                self.take()
                if self.at("("):
                    self.labels()
            self.unary()

    def unary(self) -> None:
        while self.at("+", "-"):
            self.take()
        self.primary()
        self.postfix()

    def postfix(self) -> None:
        while True:
            if self.at("["):
                self.range()
            elif self.at("offset"):
                self.take()
                if self.at("-"):
                    self.take()
                self.duration()
            elif self.at("@"):
                self.take()
                self.at_modifier()
            else:
                return

    def range(self) -> None:
        self.expect("[")
        self.duration()
        if self.at(":"):
            self.take()
            if not self.at("]"):
                self.duration()
        self.expect("]")

    def at_modifier(self) -> None:
        tok = self.take()
        if tok.text in ("start", "end"):
            self.expect("(")
            self.expect(")")
        elif tok.kind != "number":
            raise PromQLError(f"@ needs a timestamp, start() or end(), at column {tok.col}")

    def duration(self) -> None:
        tok = self.take()
        if tok.kind not in ("duration", "number"):
            raise PromQLError(f"expected a duration (5m, 1h30m) at column {tok.col}, found "
                              f"{tok.text!r}")

    def primary(self) -> None:
        tok = self.take()
        if tok.kind in ("number", "string") or tok.text.lower() in ("inf", "nan"):
            return
        if tok.text == "(":
            self.expr()
            self.expect(")")
        elif tok.text == "{":
            self.matchers(needed=True)
        elif tok.kind == "ident":
            self.named(tok)
        else:
            raise PromQLError(f"unexpected {tok.text!r} at column {tok.col}")

    def named(self, tok: _Tok) -> None:
        name = tok.text
        if name in AGGREGATORS and (self.at("(") or self.at("by", "without")):
            self.aggregation()
        elif self.at("("):
            if name not in FUNCTIONS:
                raise PromQLError(f"unknown function {name!r} at column {tok.col}")
            self.call()
        elif self.at("{"):
            self.take()
            self.matchers(needed=False)
        elif name.lower() in ("by", "without", "bool", "on", "ignoring", "offset", *BINARY):
            raise PromQLError(f"unexpected {name!r} at column {tok.col}")

    def aggregation(self) -> None:
        if self.at("by", "without"):
            self.take()
            self.labels()
            self.call()
            return
        self.call()
        if self.at("by", "without"):
            self.take()
            self.labels()

    def call(self) -> None:
        self.expect("(")
        if self.at(")"):
            self.take()
            return
        self.expr()
        while self.at(","):
            self.take()
            self.expr()
        self.expect(")")

    def labels(self) -> None:
        self.expect("(")
        while not self.at(")"):
            tok = self.take()
            if tok.kind not in ("ident", "string"):
                raise PromQLError(f"expected a label name at column {tok.col}, found "
                                  f"{tok.text!r}")
            if not self.at(")"):
                self.expect(",")
        self.take()

    def matchers(self, *, needed: bool) -> None:
        """After ``{``: ``label op "value"`` pairs up to ``}``."""
        count = 0
        while not self.at("}"):
            name = self.take()
            if name.kind not in ("ident", "string"):
                raise PromQLError(f"expected a label name at column {name.col}, found "
                                  f"{name.text!r}")
            if self.at(",", "}") and name.kind == "string":  # {"metric_name"}
                count += 1
            else:
                op = self.take()
                if op.text not in ("=", "!=", "=~", "!~"):
                    raise PromQLError(f"expected =, !=, =~ or !~ at column {op.col}, found "
                                      f"{op.text!r}")
                value = self.take()
                if value.kind != "string":
                    raise PromQLError(f"a label value must be a quoted string, at column "
                                      f"{value.col}")
                count += 1
            if not self.at("}"):
                self.expect(",")
        self.take()
        if needed and count == 0:
            raise PromQLError("a selector needs a metric name or at least one label matcher")
