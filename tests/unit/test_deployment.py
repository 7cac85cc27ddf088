"""deploy/compose.yml stays in step with the CLI, the settings and the durability rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from agents.settings import Settings
from agents.store.connect import parse_sentinel_url
from bot.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]


def _services() -> dict[str, Any]:
    compose: dict[str, Any] = yaml.safe_load((ROOT / "deploy" / "compose.yml").read_text())
    return dict(compose["services"])


def test_every_deckhand_command_parses() -> None:
    commands = [s["command"] for s in _services().values() if s["command"][0] == "deckhand"]
    assert {c[1] for c in commands} == {"serve", "worker"}
    for command in commands:
        build_parser().parse_args(command[1:])  # SystemExit on an unknown option


def test_settings_are_real_and_redis_keeps_records() -> None:
    known = {field.alias for field in Settings.model_fields.values() if field.alias}
    for service in _services().values():
        for name in service.get("environment", {}):
            assert name in known, f"{name} is not a deckhand setting"
        url = service.get("environment", {}).get("REDIS_URL")
        if url:
            assert parse_sentinel_url(url).service == "deckhand"
    for name in ("redis-primary", "redis-replica"):
        command = " ".join(_services()[name]["command"])
        assert "--maxmemory-policy noeviction" in command and "--appendonly yes" in command
    assert "deckhand" in _services()["sentinel-1"]["command"][-1]
    assert _services()["worker"]["stop_grace_period"]  # SIGTERM drains: give it time
