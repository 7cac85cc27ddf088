"""manifest.yml declares exactly the commands, events and interactivity the code uses."""

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import yaml

from bot.slack.blocks import ActionId, ViewId
from bot.slack.listeners import actions, schedules, views
from bot.slack.service_blocks import CHOOSE, CHOOSE_MENU

ROOT = Path(__file__).resolve().parents[2]


def _used(pattern: str) -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "bot").rglob("*.py"):
        found |= set(re.findall(pattern, path.read_text()))
    return found


class _Registry:
    """Stands in for the Bolt app while the listener modules register: records the action
    and view ids they listen to (as registered, whether by decorator or from a table)."""

    def __init__(self) -> None:
        self.actions: list[Any] = []
        self.views: list[str] = []

    def action(self, action_id: Any) -> Callable[[Any], Any]:
        self.actions.append(action_id if isinstance(action_id, re.Pattern) else str(action_id))
        return lambda listener: listener

    def view(self, view_id: str) -> Callable[[Any], Any]:
        self.views.append(str(view_id))
        return lambda listener: listener


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
    app = _Registry()
    for listeners in (actions, views, schedules):
        listeners.register(app, cast(Any, None))  # the bot is only captured, never called
    named = [a for a in app.actions if isinstance(a, str)]
    patterns = [a for a in app.actions if not isinstance(a, str)]  # the which-service choice
    assert sorted(named) == sorted(ActionId), "every action id has exactly one listener"
    assert all(p.fullmatch(f"{CHOOSE}:api") and p.fullmatch(CHOOSE_MENU)
               and not any(p.fullmatch(a) for a in ActionId) for p in patterns), patterns
    assert len(patterns) == 1
    assert sorted(app.views) == sorted(ViewId), "every modal has its submit listener"
    assert manifest["settings"]["interactivity"]["is_enabled"] == bool(app.actions + app.views)
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    assert {"commands", "chat:write", "app_mentions:read", "usergroups:read"} <= scopes


def test_dockerfile_runs_serve_as_non_root() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^USER deckhand$", text, re.M)
    assert 'CMD ["deckhand", "serve", "--http"]' in text
    assert "HEALTHCHECK" in text and "/healthz" in text
