"""``deckhand check`` on gates, beyond what loading the config checks: each gate's URL once
its ``{vars.x}`` are filled, and each PromQL query asked of the configured Prometheus.

Loading already refuses what can be judged locally (``tools.gates``: the PromQL syntax
check, thresholds, URLs that are written out). Here the query goes to the server the gate
will use — ``/api/v1/query`` at ``time=0``, which parses it exactly as a run would (the
``parse_query`` endpoint is newer than many servers) — when that server is reachable in a
few seconds; an unreachable one is a note, not a problem (``check`` runs on laptops too).
"""

from __future__ import annotations

import json
import time
import urllib.parse
from pathlib import Path

from agents.config import Config
from tools import deadline_http
from tools.catalog import Tool
from tools.gates import PrometheusGate, template_free
from tools.yamlsrc import Located, load_yaml_file

ASK_TIMEOUT = 3.0


Asked = dict[tuple[str, str], tuple[str | None, str | None]]
"""What one Prometheus said of one query: an organisation's services share both, and are
asked once per ``check`` (docs/services.md section 4)."""


def gate_findings(config: Config, *, timeout: float = ASK_TIMEOUT, asked: Asked | None = None
                  ) -> tuple[list[str], list[str]]:
    """(problems, notes): one line each, problems as ``file:line path: what``; ``asked``
    remembers answers across the services of one check."""
    asked = {} if asked is None else asked
    where = _Where(config.path)
    problems, notes = [], []
    for name, tool in config.catalog.tools.items():
        if tool.gate is None:
            continue
        url = _filled(str(getattr(tool.gate, "url", None) or getattr(tool.gate, "api_url", "")),
                      config)
        if url is not None and not url.startswith(("http://", "https://")):
            problems.append(f"{where(name, 'url')}: not an http(s) URL once vars are filled: "
                            f"{url!r}")
            continue
        if isinstance(tool.gate, PrometheusGate) and url is not None:
            assert isinstance(tool.gate, PrometheusGate)  # noqa: S101 - just checked
            said = (url, tool.gate.query)
            if said not in asked:
                asked[said] = _ask(url, tool, timeout)
            else:  # said once; a second service's note would only repeat it
                asked[said] = (asked[said][0], None)
            problem, note = asked[said]
            problems += [f"{where(name, 'query')}: {problem}"] if problem else []
            notes += [note] if note else []
    return problems, notes


def _filled(template: str, config: Config) -> str | None:
    """The URL with its vars filled (None if it needs a plan's parameter)."""
    try:
        return template.format(vars=_Vars(config.vars))
    except (KeyError, IndexError, ValueError, AttributeError):
        return None


class _Vars:
    def __init__(self, values: dict[str, object]):
        self.__dict__.update({k: str(v) for k, v in values.items()})


def _ask(url: str, tool: Tool, timeout: float) -> tuple[str | None, str | None]:
    """(why Prometheus refuses the query, or a note that it could not be asked)."""
    assert isinstance(tool.gate, PrometheusGate)  # noqa: S101 - checked by the caller
    query = template_free(tool.gate.query)
    ask = f"{url.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode(
        {"query": query, "time": "0"})
    try:
        status, body = deadline_http.get(ask, deadline=time.monotonic() + timeout)
    except deadline_http.HttpProblem as exc:
        return None, f"gate {tool.name}: Prometheus at {url} not asked to parse it ({exc})"
    try:
        reply = json.loads(body)
    except ValueError:
        return None, f"gate {tool.name}: {url} answered {status} with no JSON (not Prometheus?)"
    if reply.get("status") == "success":
        return None, None
    if reply.get("errorType") == "bad_data":
        return f"Prometheus at {url} refuses the query: {reply.get('error')}", None
    return None, f"gate {tool.name}: Prometheus could not check it: {reply.get('error')}"


class _Where:
    """``file:line tools.NAME.gate.FIELD`` from the config (or its tools file)."""

    def __init__(self, path: Path):
        self.path = path
        self.doc: Located | None = None  # read only for a problem: 200 services are clean

    def __call__(self, tool: str, field: str) -> str:
        if self.doc is None:
            self.doc = load_yaml_file(self.path)
            tools = self.doc.data.get("tools") if isinstance(self.doc.data, dict) else None
            if isinstance(tools, str):
                self.doc = load_yaml_file(self.path.parent / tools)
        return self.doc.where(("tools", tool, "gate", field))
