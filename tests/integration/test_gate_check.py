"""``deckhand check`` refuses gates that cannot judge, one line per problem at its file:line,
with no knock-on "unknown tool" lines; queries are also asked of the configured (real)
Prometheus, which refuses what only it knows to be wrong."""

from __future__ import annotations

import textwrap
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.cli import main
from tests.fixtures.prometheus import Prometheus

GATES = """\
    vars:
      prometheus: {url}
    tools:
      unclosed:
        description: a
        gate: {{kind: prometheus, url: "{{vars.prometheus}}", query: "max(app_error_ratio", max: 0.1}}
      garbage:
        description: b
        gate: {{kind: prometheus, url: "{{vars.prometheus}}", query: "garbage garbage", max: 0.1}}
      no_threshold:
        description: c
        gate: {{kind: prometheus, url: "{{vars.prometheus}}", query: "up"}}
      inverted:
        description: d
        gate: {{kind: prometheus, url: "{{vars.prometheus}}", query: "up", min: 2, max: 1}}
      never_fails:
        description: e
        gate: {{kind: prometheus, url: "{{vars.prometheus}}", query: "up", max: 1, count: 2, failure_limit: 2}}
      local_file:
        description: f
        gate: {{kind: http, url: "file:///etc/passwd"}}
      bad_kind:
        description: g
        gate: {{kind: promethus, url: "http://x", query: "up", max: 1}}
      bad_regex:
        description: h
        gate: {{kind: http, url: "http://x", body_pattern: "(unclosed"}}
      nan_bound:
        description: i
        gate: {{kind: prometheus, url: "{{vars.prometheus}}", query: "up", max: .nan}}
      type_error:
        description: j
        gate: {{kind: prometheus, url: "{{vars.prometheus}}", query: "rate(up)", max: 1}}
      too_slow:
        description: k
        timeout: 30
        gate: {{kind: prometheus, url: "{{vars.prometheus}}", query: "up", max: 1, count: 5, interval: 10}}
    inventory:
      hosts: {{p1: {{address: 127.0.0.1}}}}
      environments:
        production: {{hosts: [p1], rollout: {{after_each_batch: [unclosed, bad_kind, bad_regex]}}}}
"""


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    server = Prometheus(tmp_path_factory.mktemp("prom"), {})
    yield server
    server.stop()


def _check(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = main(["check", str(path)])
    out = capsys.readouterr().out
    assert "Traceback" not in out
    return code, [line.strip() for line in out.splitlines() if line.strip()]


def _line(path: Path, text: str) -> str:
    number = next(n for n, line in enumerate(path.read_text().splitlines(), start=1)
                  if line.strip().startswith(text))
    return f"{path}:{number}"


def test_every_gate_that_cannot_judge_is_refused_at_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "deckhand.yml"
    path.write_text(textwrap.dedent(GATES.format(url="http://127.0.0.1:1")))
    code, lines = _check(path, capsys)
    problems = [line for line in lines if line.startswith("- ")]
    assert code == 2 and len(problems) == 11, lines
    expected = {"unclosed": "unclosed left parenthesis", "garbage": "not valid PromQL",
                "nan_bound": "max nan is not a number a value can be judged against",
                "type_error": "expected type matrix in call to function 'rate'",
                "no_threshold": "needs min or max", "inverted": "min 2 is above max 1",
                "never_fails": "failure_limit 2 ≥ count 2", "local_file": "not an http(s) URL",
                "bad_kind": "does not match any of the expected tags",
                "bad_regex": "not a valid regular expression"}
    for tool, why in expected.items():
        hits = [p for p in problems if f" tools.{tool}." in p + "." and why in p]
        assert len(hits) == 1, (tool, problems)
        gate_line = _gate_line(path, tool)
        assert hits[0].startswith(f"- {gate_line} "), hits[0]
    assert not any("unknown tool" in line for line in lines)
    slow = [p for p in problems if " tools.too_slow" in p]
    assert len(slow) == 1 and "count 5 samples 10s apart take 40s, not within the gate's " \
        "timeout 30s" in slow[0], problems


def _gate_line(path: Path, tool: str) -> str:
    lines = path.read_text().splitlines()
    start = next(n for n, line in enumerate(lines) if line.strip() == f"{tool}:")
    number = next(n for n in range(start, len(lines)) if lines[n].strip().startswith("gate:"))
    return f"{path}:{number + 1}"


def test_the_configured_prometheus_is_asked_to_parse_each_query(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], prometheus: Prometheus) -> None:
    """The local parser is a newer Prometheus' and passes ``sort_by_label`` (Prometheus 3);
    the configured server (2.42) refuses it, at the query's line."""
    path = tmp_path / "deckhand.yml"
    path.write_text(textwrap.dedent(f"""\
        vars:
          prometheus: {prometheus.url}
        tools:
          odd:
            description: parses locally (Prometheus 3 has it), refused by this Prometheus
            gate:
              kind: prometheus
              url: "{{vars.prometheus}}"
              query: 'max(sort_by_label(up{{{{job="{{environment}}"}}}}, "job"))'
              max: 1
            params: {{environment: {{type: string}}}}
          fine:
            description: a good one
            gate: {{kind: prometheus, url: "{{vars.prometheus}}", query: "max(up)", max: 1}}
        inventory:
          hosts: {{p1: {{address: 127.0.0.1}}}}
          environments: {{production: {{hosts: [p1]}}}}
        """))
    code, lines = _check(path, capsys)
    refused = [line for line in lines if "refuses the query" in line]
    assert code == 1 and len(refused) == 1, lines
    assert refused[0].startswith(f"{_line(path, 'query:')} tools.odd.gate.query: Prometheus")
    assert not any("fine" in line for line in refused)


def test_an_unreachable_prometheus_is_a_note_not_a_problem(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "deckhand.yml"
    path.write_text(textwrap.dedent("""\
        vars: {prometheus: "http://127.0.0.1:1"}
        tools:
          fine:
            description: a good one
            gate: {kind: prometheus, url: "{vars.prometheus}", query: "max(up)", max: 1}
        """))
    code, lines = _check(path, capsys)
    assert code == 0 and any("not asked to parse it" in line for line in lines), lines


VALID = ['sum by (job) (rate(http_requests_total{code=~"5.."}[5m])) / ignoring(code) '
         'group_left sum by (job) (rate(http_requests_total[5m]))',
         'absent(up{job="x"} == 1)', 'count_values("version", build_version)',
         'label_replace(up, "foo", "$1", "job", "(.*)")', 'vector(1) and on() hour() > 9',
         '-x', 'x > bool 1', 'x unless y', 'rate(x[5m] offset 1h)', 'x @ start()', '1e3',
         '0x1F', 'Inf', 'NaN', 'x{a="b",}', '{__name__=~"job:.*"}', 'sum without(instance)(x)',
         'topk by (a) (3, x)', 'max_over_time(deriv(rate(x[1m])[5m:1m])[1h:])',
         'x offset -5m', 'up == on(job) group_right count(up) by (job)', 'x[1h30m]',
         'histogram_quantile(0.99, sum(rate(h_bucket[5m])) by (le))', 'x ^ 2 % 3',
         'time() - process_start_time_seconds', 'sort_desc(sum(x) by (a))', 'job:rate5m:sum']
INVALID = ['max(app_error_ratio', 'garbage garbage', 'rate(x[5m]', 'x{a=b}', 'foo(x)',
           'sum(x) +', '{}', 'x[5m', ')', 'x{a="1"', 'x =~ y', 'x[5x]', 'sum by job (x)',
           'x{a~"1"}', 'this is not promql!', '(x))', 'rate(x[5m]) offset', '1 +* 2']


@pytest.mark.parametrize("query", VALID + INVALID)
def test_the_local_check_agrees_with_prometheus(query: str, prometheus: Prometheus) -> None:
    """Never refuses what Prometheus parses (a false refusal would stop every command), and
    refuses the malformed ones without a server."""
    from tools.promql import PromQLError, check

    try:
        check(query)
        local = True
    except PromQLError:
        local = False
    try:
        prometheus.query(query)
        remote = True
    except urllib.error.HTTPError as exc:
        assert exc.code in (400, 422), exc
        remote = False
    assert (local, remote) == ((True, True) if query in VALID else (False, False))
