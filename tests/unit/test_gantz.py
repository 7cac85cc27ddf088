"""gantz-style tool files: {{param}} placeholders become validated parameters, delivered as variables."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from agents.config import load_config
from tests.fixtures.builders import BASE
from tools.catalog import Catalog
from tools.errors import ConfigError, ParamError
from tools.gantz import convert, convert_one
from tools.runners.local import LocalRunner

GANTZ = """
tools:
  - name: announce
    description: print a message and the first word of a file
    parameters:
      - {name: message, type: string, description: what to say}
      - {name: path, type: string}
    script:
      shell: echo {{ message }} && awk '{print $1}' {{path}}
  - name: status
    description: show uptime
    mutates: false
    idempotent: true
    script: {shell: uptime}
"""


def test_placeholders_become_parameters_and_literal_braces_survive() -> None:
    tools, problems = convert(_entries(GANTZ))
    assert problems == []
    announce = tools["announce"]
    assert announce.command == "echo {message} && awk '{{print $1}}' {path}"
    assert announce.mutates and not tools["status"].mutates and tools["status"].idempotent
    assert set(announce.params) == {"message", "path"}


def test_an_injection_attempt_stays_inert(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    words = tmp_path / "words"
    words.write_text("first second\n")
    catalog = Catalog(convert(_entries(GANTZ))[0])
    for attack in (f"hi; touch {marker}", f"$(touch {marker})", f"`touch {marker}`",
                   f"' && touch {marker} '"):
        command = catalog.render(catalog.get("announce"), {"message": attack,
                                                           "path": str(words)},
                                 host_vars={}, config_vars={})
        result = LocalRunner().run(command, timeout=10)
        assert result.ok and result.tail.splitlines() == [attack, "first"]
    assert not marker.exists()
    with pytest.raises(ParamError, match="control characters"):
        catalog.render(catalog.get("announce"), {"message": f"x\ntouch {marker}", "path": "p"},
                       host_vars={}, config_vars={})


@pytest.mark.parametrize(("entry", "why"), [
    ({"name": "a", "description": "d", "script": {"shell": "echo '{{x}}'"},
      "parameters": [{"name": "x"}]}, "single quotes"),
    ({"name": "a", "description": "d", "script": {"shell": "cat <<'E'\n{{x}}\nE"},
      "parameters": [{"name": "x"}]}, "line 2 of the command stands in a quoted heredoc"),
    ({"name": "a", "description": "d", "script": {"shell": "sh -c \"echo {{x}}\""},
      "parameters": [{"name": "x"}]}, "sh -c"),
    ({"name": "a", "description": "d", "script": {"shell": "echo {{y}}"}}, "not a declared"),
    ({"name": "a", "description": "d", "script": {"python": "print(1)"}}, "script: {shell"),
    ({"name": "a", "description": "d", "script": {"shell": "echo {{n}}"},
      "parameters": [{"name": "n", "type": "number"}]}, "not supported"),
    ({"name": "Bad Name", "description": "d", "script": {"shell": "true"}}, "name"),
])
def test_what_cannot_be_converted_says_why(entry: dict, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        convert_one(entry)


def test_a_config_may_point_at_a_gantz_file(tmp_path: Path) -> None:
    (tmp_path / "gantz.yaml").write_text(textwrap.dedent(GANTZ))
    path = tmp_path / "deckhand.yml"
    path.write_text(textwrap.dedent(BASE) + "tools: gantz.yaml\n")
    assert load_config(path).catalog.get("announce").mutates

    broken = GANTZ + "  - {name: shady, description: d, script: {shell: \"rm '{{x}}'\"}, parameters: [{name: x}]}\n"
    (tmp_path / "gantz.yaml").write_text(textwrap.dedent(broken))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "gantz.yaml:15 tools.2.script.shell" in str(err.value)
    assert "single quotes" in str(err.value)


def _entries(text: str) -> list:
    import yaml

    return yaml.safe_load(textwrap.dedent(text))["tools"]
