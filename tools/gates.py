"""Delivery gates: read-only checks with explicit success criteria, evaluated by deckhand.

A gate is a tool with ``gate:`` instead of ``command:``. Kinds:

``http``        one request; expected status codes, a body regex, JSON path comparisons
``prometheus``  a PromQL query through the HTTP API, sampled ``count`` times ``interval``
                seconds apart; a sample fails when its value is outside ``min``/``max``;
                more than ``failure_limit`` failures fail the gate (Argo Rollouts' analysis)
``ci_status``   the combined status and check runs of a git ref through the GitHub REST API

Every result line names the measured value against its threshold. Whatever cannot be
evaluated — a server down, a bad query, an empty result, a 5xx — fails the gate with that
reason: a gate never passes by default. Template values (``{version}``) come from plans,
so they are restricted to a safe character set before they reach a URL or a query.
"""

from __future__ import annotations

import json
import operator
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

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


class HttpGate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["http"]
    url: str
    status: list[int] = Field(default_factory=lambda: [200])
    body_pattern: str | None = None
    json_checks: list[JsonCheck] = Field(default_factory=list, alias="json")

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


class CiStatusGate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["ci_status"]
    repo: str = Field(description="OWNER/NAME")
    ref: str
    api_url: str = "https://api.github.com"
    token_env: str = "GITHUB_TOKEN"


GateSpec = Annotated[HttpGate | PrometheusGate | CiStatusGate, Field(discriminator="kind")]


@dataclass
class GateResult:
    ok: bool
    lines: list[str] = field(default_factory=list)


class GateError(Exception):
    """The gate could not be evaluated; it fails with this reason."""


Wait = Callable[[float], bool]
"""Sleeps up to the given seconds; True if the run was cancelled meanwhile."""


def evaluate(spec: HttpGate | PrometheusGate | CiStatusGate, wait: Wait) -> GateResult:
    """Judge one gate; every failure to evaluate is a failed gate, with its reason."""
    try:
        if isinstance(spec, HttpGate):
            return _http(spec)
        if isinstance(spec, PrometheusGate):
            return _prometheus(spec, wait)
        return _ci_status(spec)
    except GateError as exc:
        return GateResult(False, [f"✗ cannot evaluate: {exc}"])


# -- http -------------------------------------------------------------------------------------


def _http(spec: HttpGate) -> GateResult:
    status, body = _get(spec.url)
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


def _prometheus(spec: PrometheusGate, wait: Wait) -> GateResult:
    lines, failures = [], 0
    for sample in range(1, spec.count + 1):
        value = _prom_value(spec)
        passed = (spec.min is None or value >= spec.min) and (spec.max is None or value <= spec.max)
        failures += 0 if passed else 1
        lines.append(f"{'✓' if passed else '✗'} sample {sample}/{spec.count}: {value:g} "
                     f"({_bounds(spec)})")
        if failures > spec.failure_limit:
            lines.append(f"✗ {failures} failed sample(s), limit {spec.failure_limit}")
            return GateResult(False, lines)
        if sample < spec.count and wait(spec.interval):
            raise GateError("stopped while sampling (the step's deadline, or a cancel)")
    return GateResult(True, lines)


def _prom_value(spec: PrometheusGate) -> float:
    url = f"{spec.url.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": spec.query})
    status, body = _get(url)
    try:
        reply = json.loads(body)
    except ValueError as exc:
        raise GateError(f"Prometheus answered {status} with no JSON") from exc
    if status != 200 or reply.get("status") != "success":
        raise GateError(f"Prometheus refused the query: {reply.get('error', status)}")
    result = reply["data"]["result"]
    if reply["data"]["resultType"] == "scalar":
        return float(result[1])
    if not result:
        raise GateError(f"the query returned no data: {spec.query}")
    return max(float(item["value"][1]) for item in result)


def _bounds(spec: PrometheusGate) -> str:
    parts = ([f"≥ {spec.min:g}"] if spec.min is not None else []) + (
        [f"≤ {spec.max:g}"] if spec.max is not None else [])
    return "must be " + " and ".join(parts) if parts else "no threshold"


# -- ci status --------------------------------------------------------------------------------


def _ci_status(spec: CiStatusGate) -> GateResult:
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", spec.repo):
        raise GateError(f"repo {spec.repo!r} is not OWNER/NAME")
    base = f"{spec.api_url.rstrip('/')}/repos/{spec.repo}/commits/{urllib.parse.quote(spec.ref)}"
    token = os.environ.get(spec.token_env)
    combined = _github(f"{base}/status", token)
    checks = _github(f"{base}/check-runs", token).get("check_runs", [])
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


def _github(url: str, token: str | None) -> dict[str, Any]:
    headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    status, body = _get(url, headers)
    if status != 200:
        raise GateError(f"GitHub answered {status} for {url.split('/repos/')[-1]}")
    try:
        data: dict[str, Any] = json.loads(body)
    except ValueError as exc:
        raise GateError("GitHub answered with no JSON") from exc
    return data


# -- plumbing ---------------------------------------------------------------------------------


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    if not url.startswith(("http://", "https://")):
        raise GateError(f"not an http(s) URL: {url}")
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as reply:  # noqa: S310
            return reply.status, reply.read(1_000_000).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(1_000_000).decode("utf-8", "replace")
    except (OSError, ValueError) as exc:
        raise GateError(f"cannot reach {urllib.parse.urlsplit(url).netloc}: {exc}") from exc


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from exc
