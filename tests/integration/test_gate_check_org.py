"""``deckhand check`` of an organisation asks its Prometheus each (URL, query) once, not once
per service (docs/services.md section 4), and still says every service's refused gate at
that service's own file:line."""

from __future__ import annotations

import json
import textwrap
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agents.org import load_org
from bot.cli.check_gates import Asked, gate_findings

SERVICE = """\
    tools:
      errors:
        description: the error ratio stays low
        gate: {{kind: prometheus, url: "{url}", query: "app_error_ratio > 1", max: 0.1}}
      broken:
        description: refused by the server
        gate: {{kind: prometheus, url: "{url}", query: "sum(app_up)", max: 1}}
    inventory:
      hosts: {{{name}-1: {{address: {name}.example.internal}}}}
      environments: {{production: {{hosts: [{name}-1]}}}}
"""


class Answers(BaseHTTPRequestHandler):
    """Prometheus's /api/v1/query as it answers: bad_data for sum(app_up), else success."""

    asked: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)["query"][0]
        Answers.asked.append(query)
        body = ({"status": "error", "errorType": "bad_data", "error": "no such function"}
                if query == "sum(app_up)" else {"status": "success", "data": {}})
        raw = json.dumps(body).encode()
        self.send_response(400 if body["status"] == "error" else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def prometheus() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    Answers.asked = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_each_query_is_asked_once_and_refused_for_every_service(tmp_path: Path,
                                                                  prometheus: str) -> None:
    names = ("api", "web", "docs")
    for name in names:
        (tmp_path / f"{name}.yml").write_text(textwrap.dedent(SERVICE.format(url=prometheus,
                                                                             name=name)))
    (tmp_path / "deckhand.yml").write_text(
        "state_dir: state\nservices:\n" + "".join(f"  {n}: {n}.yml\n" for n in names))
    org = load_org(tmp_path / "deckhand.yml")
    asked: Asked = {}
    problems = [line for config in org.services.values()
                for line in gate_findings(config, asked=asked)[0]]
    assert sorted(Answers.asked) == ["app_error_ratio > 1", "sum(app_up)"]
    assert problems == [f"{tmp_path / name}.yml:7 tools.broken.gate.query: Prometheus at "
                        f"{prometheus} refuses the query: no such function" for name in names]
