"""The ``deckhand`` entry point answers --version without loading deckhand."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_version_loads_nothing_of_deckhand_and_other_commands_reach_the_cli() -> None:
    probe = ("import sys; from bot.launch import main; code = main(['--version']); "
             "print(code, sorted(m for m in sys.modules if m.split('.')[0] in "
             "('bot', 'agents', 'tools', 'rich', 'redis', 'pydantic', 'paramiko')))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out[0].startswith("deckhand ")
    assert out[1] == "0 ['bot', 'bot.launch']"
    shown = subprocess.run([sys.executable, "-m", "bot.launch", "help"], cwd=ROOT,
                           capture_output=True, text=True)
    assert "deckhand" in shown.stdout + shown.stderr and "Traceback" not in shown.stderr


HEAVY_OFF_THE_RUN_PATH = (
    "openai", "apscheduler", "http.client", "mcp", "slack_sdk", "slack_bolt", "waitress",
    "prometheus_client", "matplotlib", "bot.cli.eval", "bot.cli.schedules", "bot.mcp",
    "bot.slack", "bot.scheduler", "opentelemetry.sdk.trace",
    "paramiko",  # issue 43.7: imported with the first SSH runner, not at start
    # optional extras our dependencies would load for features deckhand never uses
    # (tools.lean_imports), and pydantic-settings' asyncio/dotenv/cloud providers
    "numpy", "jsonpath_ng", "invoke", "opentelemetry.sdk.metrics", "pydantic_settings")
"""Modules a terminal `run`/`plan` needs none of (no model, gate, cron, Slack, or OTLP
endpoint): each costs start-up, and the first SSH connection waits for all (issue 31)."""


def test_planning_a_playbook_loads_no_model_client_scheduler_or_other_face(
        tmp_path: Path) -> None:
    config = tmp_path / "deckhand.yml"
    config.write_text(
        "tools:\n  fan: {description: one step, command: 'true', target: environment,"
        " mutates: true, timeout: 60}\n"
        "inventory:\n  hosts:\n    h1: {connection: ssh, address: 127.0.0.1, port: 1}\n"
        "  environments: {fleet: {hosts: [h1]}}\n"
        "policy: {require_rollback: false}\n"
        "playbooks:\n- {name: fan, match: ['^fan$'], goal: fan out,\n"
        "   steps: [{id: only, tool: fan, params: {environment: fleet}}]}\n")
    probe = ("import sys; from bot.launch import main; "
             f"code = main(['plan', 'fan', '--config', {str(config)!r}]); "
             f"print('LOADED', code, [m for m in {HEAVY_OFF_THE_RUN_PATH!r} "
             "if m in sys.modules])")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "OTEL_", "DECKHAND_", "REDIS_"))}
    env["DECKHAND_EMBEDDED_STORE"] = "memory"  # as the suite's other tests (conftest)
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    loaded = [line for line in done.stdout.splitlines() if line.startswith("LOADED")]
    assert loaded == ["LOADED 0 []"], done.stdout[-2000:] + done.stderr[-2000:]


def test_the_extras_left_out_of_start_up_still_import_afterwards() -> None:
    """Hiding an extra lasts only while our dependencies import: the charts still get
    numpy, and a store opened later is the same fakeredis either way."""
    probe = ("import sys\n"
             "from tools.lean_imports import UNUSED_EXTRAS, without_unused_extras\n"
             "with without_unused_extras():\n"
             "    import fakeredis, paramiko, redis\n"
             "    try:\n"
             "        import numpy\n"
             "        print('numpy during: imported')\n"
             "    except ImportError:\n"
             "        print('numpy during: hidden')\n"
             "print('left hidden:', [n for n in UNUSED_EXTRAS if n in sys.modules"
             " and sys.modules[n] is None])\n"
             "import numpy\n"
             "print('numpy after:', numpy.__name__)\n"
             "client = fakeredis.FakeRedis(); client.set('k', 'v'); print(client.get('k'))\n")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.splitlines() == ["numpy during: hidden", "left hidden: []",
                                       "numpy after: numpy", "b'v'"], out.stderr[-2000:]
