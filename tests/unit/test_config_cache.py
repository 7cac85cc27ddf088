"""An organisation loads fast (docs/services.md section 4): a start skips the playbook
checks, and ``check`` remembers, by content, each file's parse and which services passed
them (agents/config_cache.py) — so nothing stale is ever used."""

from __future__ import annotations

import gc
import json
import textwrap
from pathlib import Path

import pytest

import agents.config
from agents.config_cache import CACHE_DIR
from agents.org import load_org
from tools.errors import ConfigError

TOOLS = """
tools:
  ship:
    description: put a version on every host of an environment
    command: "echo {version} > {host.dir}/version"
    target: environment
    params: {version: {pattern: '^v\\d+\\.\\d+\\.\\d+$'}}
"""

SERVICE = """
tools: {name}-tools.yml
vars: {{team: {name}}}
inventory:
  hosts:
    {name}-1: {{connection: local, vars: {{dir: "{{state_dir}}/{name}-1"}}}}
  environments:
    staging: {{hosts: [{name}-1]}}
playbooks:
  - name: ship
    match: ['^ship (?P<version>v\\S+)$']
    examples: ["ship v1.2.3"]
    goal: "ship {{version}}"
    steps: [{{id: ship, tool: ship, params: {{environment: staging, version: "{{version}}"}}}}]
"""


@pytest.fixture
def org(tmp_path: Path) -> Path:
    (tmp_path / "services").mkdir()
    for name in ("api", "web"):
        (tmp_path / "services" / f"{name}.yml").write_text(
            textwrap.dedent(SERVICE.format(name=name)))
        (tmp_path / "services" / f"{name}-tools.yml").write_text(textwrap.dedent(TOOLS))
    (tmp_path / "deckhand.yml").write_text(
        "state_dir: state\nservices:\n  api: services/api.yml\n  web: services/web.yml\n")
    return tmp_path / "deckhand.yml"


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The goals of the playbooks checked as plans, in order."""
    seen: list[str] = []
    real = agents.config._PlaybookCheck.problems

    def problems(self: agents.config._PlaybookCheck) -> list[tuple[tuple[str | int, ...], str]]:
        seen.append(str(self.config.name))
        return real(self)

    monkeypatch.setattr(agents.config._PlaybookCheck, "problems", problems)
    return seen


def _break_example(main: Path, name: str) -> None:
    """Only the playbook checks see this: the example's version no longer fits the tool."""
    tools = main.parent / "services" / f"{name}-tools.yml"
    tools.write_text(tools.read_text().replace("^v\\d+", "^release-\\d+"))


def test_a_start_skips_the_playbook_checks_that_check_runs(org: Path, checked: list[str]
                                                            ) -> None:
    _break_example(org, "web")
    started = load_org(org, playbooks=False)
    assert set(started.services) == {"api", "web"} and checked == []
    with pytest.raises(ConfigError) as caught:
        load_org(org)
    assert "services/web.yml" in str(caught.value) and "ship v1.2.3" in str(caught.value)
    assert checked == ["api", "web"]


def test_check_verdicts_are_keyed_by_content(org: Path, checked: list[str]) -> None:
    load_org(org, cache=True)
    assert checked == ["api", "web"]
    verdicts = org.parent / "state" / CACHE_DIR / "verdicts.json"
    first = set(json.loads(verdicts.read_text())["passed"])
    assert len(first) == 2

    load_org(org, cache=True)  # nothing changed: nothing checked again
    assert checked == ["api", "web"]
    assert set(json.loads(verdicts.read_text())["passed"]) == first

    _break_example(org, "api")  # a changed tools file re-checks its service, only it
    with pytest.raises(ConfigError) as caught:
        load_org(org, cache=True)
    assert "services/api.yml" in str(caught.value) and "ship v1.2.3" in str(caught.value)
    assert checked == ["api", "web", "api"]
    kept = set(json.loads(verdicts.read_text())["passed"])
    assert len(kept) == 1 and kept < first  # web's verdict kept, api's old one gone

    with pytest.raises(ConfigError):  # a failed verdict is never remembered
        load_org(org, cache=True)
    assert checked == ["api", "web", "api", "api"]


def test_a_verdict_file_that_is_not_ours_is_no_memory(org: Path, checked: list[str]) -> None:
    load_org(org, cache=True)
    verdicts = org.parent / "state" / CACHE_DIR / "verdicts.json"
    for body in ("{not json", json.dumps({"format": 99, "passed": []}), "[]"):
        verdicts.write_text(body)
        load_org(org, cache=True)
    assert checked == ["api", "web"] * 4
    assert len(json.loads(verdicts.read_text())["passed"]) == 2


def _parses(main: Path) -> set[str]:
    body = json.loads((main.parent / "state" / CACHE_DIR / "parses.json").read_text())
    return set(body["entries"])


def test_the_parse_cache_never_serves_an_edited_file(org: Path) -> None:
    assert load_org(org, cache=True).services["api"].vars["team"] == "api"
    entries = _parses(org)
    assert len(entries) == 4  # both services' files and tools files

    service = org.parent / "services" / "api.yml"
    service.write_text(service.read_text().replace("team: api", "team: payments"))
    tools = org.parent / "services" / "api-tools.yml"
    tools.write_text(tools.read_text().replace("every host", "each host"))
    loaded = load_org(org, cache=True)
    assert loaded.services["api"].vars["team"] == "payments"
    assert loaded.services["api"].catalog.get("ship").description.startswith("put a version "
                                                                              "on each host")
    now = _parses(org)
    assert len(now) == 4 and len(now & entries) == 2  # the edited two replaced


def test_a_damaged_parse_is_parsed_again_and_problems_keep_their_lines(org: Path) -> None:
    load_org(org, cache=True)
    parses = org.parent / "state" / CACHE_DIR / "parses.json"
    damaged = {key: '{"format": 1, "source": "elsewhere", "data": {}}' if i % 2 else "{not"
               for i, key in enumerate(_parses(org))}
    parses.write_text(json.dumps({"format": 1, "entries": damaged}))
    assert load_org(org, cache=True).services["web"].vars["team"] == "web"
    assert _parses(org) == set(damaged)  # parsed again, and kept again
    parses.write_text("[1, 2")
    assert load_org(org, cache=True).services["api"].vars["team"] == "api"
    assert _parses(org) == set(damaged)

    service = org.parent / "services" / "web.yml"  # a problem from a cached parse
    service.write_text(service.read_text().replace("staging: {hosts: [web-1]}",
                                                   "staging: {hosts: [web-9]}"))
    for _ in range(2):  # parsed, then from the cache: the same file:line
        with pytest.raises(ConfigError) as caught:
            load_org(org, cache=True)
        assert ("services/web.yml:8 inventory.environments.staging.hosts.0: environment "
                "staging lists unknown host 'web-9'") in str(caught.value)


def test_a_parse_json_cannot_hold_is_not_kept(org: Path) -> None:
    service = org.parent / "services" / "web.yml"
    service.write_text(service.read_text().replace("vars: {team: web}",
                                                   "vars: {team: web, since: 2024-01-02}"))
    for _ in range(2):
        loaded = load_org(org, cache=True)
        assert str(loaded.services["web"].vars["since"]) == "2024-01-02"
    assert len(_parses(org)) == 3  # not web.yml: a date would come back a string


def test_a_load_leaves_the_collector_as_it_found_it(org: Path) -> None:
    assert gc.isenabled()
    load_org(org, cache=True)
    assert gc.isenabled()
    _break_example(org, "api")
    with pytest.raises(ConfigError):
        load_org(org)
    assert gc.isenabled()  # back on after a refused load too
    gc.disable()
    try:
        load_org(org, playbooks=False)
        assert not gc.isenabled()  # never turned on for a caller who had it off
    finally:
        gc.enable()
