"""manifest.yml declares exactly the commands, events and interactivity the code uses."""

import re
from pathlib import Path

import yaml

from bot.slack.blocks import ActionId, ViewId

ROOT = Path(__file__).resolve().parents[2]


def _used(pattern: str) -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "bot").rglob("*.py"):
        found |= set(re.findall(pattern, path.read_text()))
    return found


def test_manifest_matches_the_listeners() -> None:
    manifest = yaml.safe_load((ROOT / "manifest.yml").read_text())
    commands = {c["command"] for c in manifest["features"]["slash_commands"]}
    events = set(manifest["settings"]["event_subscriptions"]["bot_events"])
    assert commands == _used(r'@app\.command\("([^"]+)"\)')
    functions = _used(r'FUNCTION = "([^"]+)"')
    assert events == _used(r'@app\.event\("([^"]+)"\)') | ({"function_executed"} & events)
    assert set(manifest.get("functions", {})) == functions
    assert ("function_executed" in events) == bool(functions)
    assert manifest["settings"]["org_deploy_enabled"] is bool(functions)
    actions = _used(r'@app\.action\(bk\.ActionId\.(\w+)\)')
    views = _used(r'@app\.view\(bk\.ViewId\.(\w+)\)')
    assert actions == {a.name for a in ActionId}, "every action id has exactly one listener"
    assert views == {v.name for v in ViewId}, "every modal has its submit listener"
    assert manifest["settings"]["interactivity"]["is_enabled"] == bool(actions | views)
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    assert {"commands", "chat:write", "app_mentions:read", "usergroups:read"} <= scopes


def test_dockerfile_runs_serve_as_non_root() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^USER deckhand$", text, re.M)
    assert 'CMD ["deckhand", "serve", "--http"]' in text
    assert "HEALTHCHECK" in text and "/healthz" in text
