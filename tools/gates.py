"""Delivery gates: read-only checks with explicit success criteria, evaluated by deckhand.

A gate is a tool with ``gate:`` instead of ``command:``. Kinds:

``http``        one request; expected status codes, a body regex, JSON path comparisons
``prometheus``  a PromQL query through the HTTP API, sampled ``count`` times ``interval``
                seconds apart. Every series the query returns is judged against every
                bound (no aggregation is guessed: write ``max(...)`` to judge one number);
                a round fails when any series is outside ``min``/``max``, is NaN or ±Inf,
                is stale (older than ``stale_after``) or vanished since the last round;
                more than ``failure_limit`` failed rounds fail the gate (Argo Rollouts'
                analysis). A gate needs ``min`` or ``max`` (finite), ``min ≤ max``,
                ``failure_limit < count``, its samples within its tool's ``timeout``,
                and its query must parse (``tools.promql``). Staleness is judged from
                the samples' own time: the newest sample of each series the query reads
                (``timestamp()`` of its selectors), not the time the query was asked
``ci_status``   the combined status and check runs of a git ref through the GitHub REST API

Every result line names the measured value against its threshold, and each Prometheus
sample (query, series, value, bound, time) is kept in ``GateResult.samples`` for the run
record. The gate's deadline bounds all of it, HTTP included (``tools.deadline_http``): past
it the gate fails with "deadline exceeded". Whatever cannot be
evaluated — a server down, a bad query, an empty result, a 5xx — fails the gate with that
reason: a gate never passes by default. Template values (``{version}``) come from plans,
so they are restricted to a safe character set before they reach a URL or a query.
"""

from __future__ import annotations

import json
import math
import operator
import os
import re
import string
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tools import promql

SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.:@+-]{1,200}$")
GATE_TEMPLATE_FIELDS = ("url", "query", "ref", "repo", "api_url")
"""The gate fields that may use ``{param}``, ``{vars.x}`` and ``{host.x}`` placeholders."""
"""What a plan-supplied value may look like inside a gate's URL or query."""
HTTP_TIMEOUT = 10.0
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
    "gt": operator.gt, "ge": operator.ge}


class JsonCheck(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="dotted path into the JSON body, e.g. checks.0.status")
    op: Literal["eq", "ne", "lt", "le", "gt", "ge"] = "eq"
    value: str | int | float | bool | None


def _http_url(value: str) -> str:
    """An http(s) URL, or a template that becomes one (checked again once rendered)."""
    if "{" not in value.split("://", 1)[0] and not value.startswith(("http://", "https://")):
        raise ValueError(f"not an http(s) URL: {value!r} (a gate reads only over HTTP)")
    return value


class HttpGate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["http"]
    url: str
    status: list[int] = Field(default_factory=lambda: [200])
    body_pattern: str | None = None
    json_checks: list[JsonCheck] = Field(default_factory=list, alias="json")

    _url = field_validator("url")(_http_url)

    @field_validator("body_pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            _compile(value)
        return value


class PrometheusGate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["prometheus"]
    url: str = Field(description="the Prometheus server, e.g. http://prometheus:9090")
    query: str
    min: float | None = None
    max: float | None = None
    interval: float = Field(default=10.0, ge=0, le=3600)
    count: int = Field(default=1, ge=1, le=100)
    failure_limit: int = Field(default=0, ge=0)
    stale_after: float = Field(default=300.0, gt=0, description=(
        "seconds: a series whose data is older than this fails as stale — judged from the "
        "samples' own time (the newest sample of each series the query reads)"))

    _url = field_validator("url")(_http_url)

    @field_validator("query")
    @classmethod
    def _parses(cls, value: str) -> str:
        try:
            promql.check(template_free(value))
        except promql.PromQLError as exc:
            raise ValueError(f"not valid PromQL: {exc}") from exc
        return value

    @model_validator(mode="after")
    def _can_judge(self) -> PrometheusGate:
        for name, bound in (("min", self.min), ("max", self.max)):
            if bound is not None and not math.isfinite(bound):
                raise ValueError(f"{name} {bound} is not a number a value can be judged "
                                 f"against (every comparison with it fails or none does); "
                                 f"write a finite number, or leave {name} out")
        if self.min is None and self.max is None:
            raise ValueError("a prometheus gate needs min or max: without a threshold it "
                             "cannot fail")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min:g} is above max {self.max:g}: no value passes")
        if self.failure_limit >= self.count:
            raise ValueError(f"failure_limit {self.failure_limit} ≥ count {self.count}: "
                             f"the gate could never fail; lower it or sample more")
        return self


class CiStatusGate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["ci_status"]
    repo: str = Field(description="OWNER/NAME")
    ref: str
    api_url: str = "https://api.github.com"
    token_env: str = "GITHUB_TOKEN"

    _url = field_validator("api_url")(_http_url)


GateSpec = Annotated[HttpGate | PrometheusGate | CiStatusGate, Field(discriminator="kind")]


def template_free(text: str) -> str:
    """``text`` as rendered with every ``{param}`` / ``{vars.x}`` placeholder a plain token
    (``{{`` and ``}}`` are braces), so a template can be checked before it is rendered."""
    try:
        parts = string.Formatter().parse(text)
        return "".join(literal + ("x" if name is not None else "")
                       for literal, name, _, _ in parts)
    except ValueError as exc:
        raise ValueError(f"not a valid template: {exc} (write {{{{ and }}}} for braces)") \
            from exc


class GateSample(BaseModel):
    """One measured value of one series, as judged (kept in the run record and audit)."""

    query: str
    series: str
    """The series' labels (``{instance="a"}``); empty for a scalar."""
    value: str
    """As Prometheus answered it: ``0.5``, ``NaN``, ``+Inf`` (or ``absent``)."""
    bound: str
    at: float
    """When it was measured (Unix seconds)."""
    round: int
    ok: bool
    problem: str | None = None
    miss: float = Field(default=0.0, exclude=True)
    """How far outside its bound (infinite when it cannot be judged), to find the worst."""

    def line(self, count: int) -> str:
        when = time.strftime("%H:%M:%S", time.gmtime(self.at))
        what = f"{self.series} = {self.value}" if self.series else self.value
        why = f": {self.problem}" if self.problem else ""
        return (f"{'✓' if self.ok else '✗'} sample {self.round}/{count} {what} "
                f"({self.bound}) at {when}Z{why}")


@dataclass
class GateResult:
    ok: bool
    lines: list[str] = field(default_factory=list)
    samples: list[GateSample] = field(default_factory=list)
    reason: str | None = None
    """Why it failed, one line (the last of ``lines``); None when it passed."""

    def failed(self, reason: str) -> GateResult:
        self.ok, self.reason = False, reason
        self.lines.append(f"✗ {reason}")
        return self


class GateError(Exception):
    """The gate could not be evaluated; it fails with this reason."""


Wait = Callable[[float], bool]
"""Sleeps up to the given seconds; True if the run was cancelled meanwhile."""


def evaluate(spec: HttpGate | PrometheusGate | CiStatusGate, wait: Wait, *,
             deadline: float | None = None) -> GateResult:
    """Judge one gate by ``deadline`` (``time.monotonic``; default ``HTTP_TIMEOUT`` from
    now); every failure to evaluate is a failed gate, with its reason."""
    deadline = time.monotonic() + HTTP_TIMEOUT if deadline is None else deadline
    try:
        if isinstance(spec, HttpGate):
            result = _http(spec, deadline)
        elif isinstance(spec, PrometheusGate):
            return _prometheus(spec, wait, deadline)
        else:
            result = _ci_status(spec, deadline)
    except GateError as exc:
        return GateResult(False).failed(f"cannot evaluate: {exc}")
    if not result.ok and result.reason is None:
        result.reason = next((line[2:] for line in result.lines if line.startswith("✗")),
                             "failed")
    return result


# -- http -------------------------------------------------------------------------------------


def _http(spec: HttpGate, deadline: float) -> GateResult:
    status, body = _get(spec.url, deadline=deadline)
    lines = [f"{'✓' if status in spec.status else '✗'} GET {spec.url} → {status} "
             f"(expected {', '.join(map(str, spec.status))})"]
    ok = status in spec.status
    if spec.body_pattern is not None:
        found = _compile(spec.body_pattern).search(body) is not None
        lines.append(f"{'✓' if found else '✗'} body matches {spec.body_pattern!r}")
        ok = ok and found
    for check in spec.json_checks:
        passed, line = _json_check(body, check)
        lines.append(line)
        ok = ok and passed
    return GateResult(ok, lines)


def _json_check(body: str, check: JsonCheck) -> tuple[bool, str]:
    try:
        value: Any = json.loads(body)
        for part in check.path.split("."):
            value = value[int(part)] if isinstance(value, list) else value[part]
    except (ValueError, KeyError, IndexError, TypeError):
        return False, f"✗ {check.path}: not in the response"
    try:
        passed = bool(_OPS[check.op](value, check.value))
    except TypeError:
        passed = False
    return passed, f"{'✓' if passed else '✗'} {check.path} = {value!r} ({check.op} {check.value!r})"


# -- prometheus -------------------------------------------------------------------------------


def _prometheus(spec: PrometheusGate, wait: Wait, deadline: float) -> GateResult:
    """Every series of every sampling round judged against every bound; a round fails when
    any of its samples does. Whatever cannot be evaluated fails, keeping what was measured."""
    result = GateResult(True, [f"query {spec.query} ({_bounds(spec)})"])
    failures, seen = 0, set[str]()
    try:
        try:
            inputs = promql.selectors(spec.query)
        except promql.PromQLError as exc:
            raise GateError(f"not valid PromQL: {exc}") from exc
        for round_no in range(1, spec.count + 1):
            samples = _prom_round(spec, round_no, seen, deadline, inputs)
            seen |= {s.series for s in samples}
            result.samples += samples
            result.lines += [s.line(spec.count) for s in samples]
            failures += 0 if all(s.ok for s in samples) else 1
            if failures > spec.failure_limit:
                return result.failed(f"{failures} failed round(s), limit {spec.failure_limit}; "
                                     f"worst: {_worst(result.samples).line(spec.count)}")
            if round_no < spec.count and wait(spec.interval):
                raise GateError("deadline exceeded while sampling (or the run was cancelled)")
    except GateError as exc:
        return result.failed(f"cannot evaluate: {exc}")
    return result


def _prom_round(spec: PrometheusGate, round_no: int, seen: set[str], deadline: float,
                inputs: list[str]) -> list[GateSample]:
    asked = time.time()
    data = _instant(spec.url, spec.query, asked, deadline)
    if data.get("resultType") == "scalar":
        points = [("", data["result"])]
    else:
        points = [(_series(item.get("metric", {})), item.get("value")) for item in data["result"]]
    if not points:
        raise GateError(f"the query returned no data: {spec.query}")
    measured = _measured(spec.url, inputs, asked, deadline)
    samples = [_judge(spec, round_no, name, point, asked, measured) for name, point in points]
    gone = sorted(seen - {name for name, _ in points})
    return samples + [GateSample(query=spec.query, series=name, value="absent",
                                 bound=_bounds(spec), at=asked, round=round_no, ok=False,
                                 problem="stale: the series vanished since the last round",
                                 miss=math.inf)
                      for name in gone]


def _instant(url: str, query: str, at: float, deadline: float) -> dict[str, Any]:
    """The ``data`` of an instant query evaluated at ``at``."""
    url = f"{url.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode(
        {"query": query, "time": f"{at:.3f}"})
    status, body = _get(url, deadline=deadline)
    try:
        reply = json.loads(body)
        data: dict[str, Any] = reply["data"] if reply.get("status") == "success" else {}
    except (ValueError, AttributeError, KeyError) as exc:
        raise GateError(f"Prometheus answered {status} with no usable JSON") from exc
    if status != 200 or not data:
        raise GateError(f"Prometheus refused the query: {reply.get('error', status)}")
    return data


def _measured(url: str, inputs: list[str], at: float,
              deadline: float) -> tuple[float, str] | None:
    """When the data a query read was measured: of each series it reads (``inputs``), the
    time of its newest sample (``timestamp()`` reads the samples' own time, where the
    query's answer carries only the time it was evaluated at), and of those the oldest,
    with its selector. None when no input has a sample (an ``absent()`` query)."""
    found: list[tuple[float, str]] = []
    for selector in inputs:
        data = _instant(url, f"max(timestamp({selector}))", at, deadline)
        for item in data.get("result", []) if data.get("resultType") == "vector" else []:
            try:
                found.append((float(item["value"][1]), selector))
            except (TypeError, ValueError, KeyError, IndexError) as exc:
                raise GateError(f"Prometheus answered a timestamp that is not a number: "
                                f"{item!r}") from exc
    return min(found) if found else None


def _judge(spec: PrometheusGate, round_no: int, series: str, point: Any,
           asked: float, measured: tuple[float, str] | None) -> GateSample:
    try:
        at, text = float(point[0]), str(point[1])
        value = float(text)
    except (TypeError, ValueError, IndexError) as exc:
        raise GateError(f"Prometheus answered a sample that is not [time, value]: "
                        f"{point!r}") from exc
    newest = f"the newest sample of {measured[1]}" if measured and measured[0] < at else ""
    at = min(at, measured[0]) if measured else at
    problem, miss = None, math.inf
    if not math.isfinite(value):
        problem = f"{text} is not a measurement"
    elif asked - at > spec.stale_after:
        age = f"{newest} is {asked - at:.0f}s old" if newest else \
            f"measured {asked - at:.0f}s before it was asked for"
        problem = f"stale: {age} (stale_after: {spec.stale_after:g}s)"
    elif spec.min is not None and value < spec.min:
        problem, miss = f"below {spec.min:g}", spec.min - value
    elif spec.max is not None and value > spec.max:
        problem, miss = f"above {spec.max:g}", value - spec.max
    return GateSample(query=spec.query, series=series, value=text, bound=_bounds(spec),
                      at=at, round=round_no, ok=problem is None, problem=problem,
                      miss=0.0 if problem is None else miss)


def _series(labels: dict[str, str]) -> str:
    shown = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{{{shown}}}"


def _worst(samples: list[GateSample]) -> GateSample:
    """The failed sample furthest outside its bounds (one that cannot be judged: first)."""
    return max(samples, key=lambda s: (not s.ok, s.miss, -s.round))


def _bounds(spec: PrometheusGate) -> str:
    parts = ([f"≥ {spec.min:g}"] if spec.min is not None else []) + (
        [f"≤ {spec.max:g}"] if spec.max is not None else [])
    return "must be " + " and ".join(parts) if parts else "no threshold"


# -- ci status --------------------------------------------------------------------------------


def _ci_status(spec: CiStatusGate, deadline: float) -> GateResult:
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", spec.repo):
        raise GateError(f"repo {spec.repo!r} is not OWNER/NAME")
    base = f"{spec.api_url.rstrip('/')}/repos/{spec.repo}/commits/{urllib.parse.quote(spec.ref)}"
    token = os.environ.get(spec.token_env)
    combined = _github(f"{base}/status", token, deadline)
    checks = _github(f"{base}/check-runs", token, deadline).get("check_runs", [])
    state = combined.get("state", "unknown")
    lines = [f"{'✓' if state == 'success' or not combined.get('statuses') else '✗'} "
             f"combined status of {spec.ref}: {state}"]
    ok = state == "success" or not combined.get("statuses")
    for check in checks:
        passed = check.get("status") == "completed" and check.get("conclusion") in (
            "success", "neutral", "skipped")
        ok = ok and passed
        lines.append(f"{'✓' if passed else '✗'} check {check.get('name')}: "
                     f"{check.get('conclusion') or check.get('status')}")
    if not combined.get("statuses") and not checks:
        return GateResult(False, [*lines, f"✗ no status or check reported for {spec.ref}"])
    return GateResult(ok, lines)


def _github(url: str, token: str | None, deadline: float) -> dict[str, Any]:
    headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    status, body = _get(url, headers, deadline=deadline)
    if status != 200:
        raise GateError(f"GitHub answered {status} for {url.split('/repos/')[-1]}")
    try:
        data: dict[str, Any] = json.loads(body)
    except ValueError as exc:
        raise GateError("GitHub answered with no JSON") from exc
    return data


# -- plumbing ---------------------------------------------------------------------------------


def _get(url: str, headers: dict[str, str] | None = None, *,
         deadline: float) -> tuple[int, str]:
    from tools import deadline_http  # http.client and ssl: only when a gate runs (start-up)

    try:
        return deadline_http.get(url, deadline=deadline, headers=headers)
    except deadline_http.HttpProblem as exc:
        raise GateError(str(exc)) from exc


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from exc
