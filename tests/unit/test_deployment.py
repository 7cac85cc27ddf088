"""deploy/compose.yml and the Dockerfile stay in step with the CLI, the settings and the
practices they promise: digest-pinned base, dependencies before code, non-root, a health
check per role, secrets from files, resource limits, a read-only root."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agents.settings import SECRETS, Settings
from agents.store.connect import parse_sentinel_url
from bot.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DIGEST = re.compile(r"^[\w./-]+:[\w.-]+@sha256:[0-9a-f]{64}$")
CODE = ("agents", "tools", "bot")


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "deploy" / "compose.yml").read_text())
    return data


def _services() -> dict[str, Any]:
    return dict(_compose()["services"])


def _deckhand_services() -> dict[str, Any]:
    return {n: s for n, s in _services().items() if s.get("command", [""])[0] == "deckhand"}


@dataclass
class Stage:
    name: str
    base: str
    lines: list[tuple[str, str]] = field(default_factory=list)

    def first(self, instruction: str, pattern: str = "") -> int:
        return next(i for i, (ins, arg) in enumerate(self.lines)
                    if ins == instruction and re.search(pattern, arg))

    def last(self, instruction: str) -> str | None:
        found = [arg for ins, arg in self.lines if ins == instruction]
        return found[-1] if found else None


def _dockerfile() -> tuple[dict[str, str], dict[str, Stage]]:
    """ARG defaults before the first FROM, and the stages with their instructions."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text())
    args: dict[str, str] = {}
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        instruction, _, rest = line.strip().partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            base, _, name = rest.partition(" AS ")
            current = stages[name.strip()] = Stage(name.strip(), base.strip())
        elif current is None and instruction == "ARG":
            key, _, value = rest.partition("=")
            args[key] = value
        elif current is not None:
            current.lines.append((instruction, rest.strip()))
    return args, stages


def _user(stages: dict[str, Stage], name: str) -> str | None:
    stage = stages[name]
    return stage.last("USER") or (_user(stages, stage.base) if stage.base in stages else None)


def test_every_deckhand_command_parses() -> None:
    commands = [s["command"] for s in _deckhand_services().values()]
    assert {c[1] for c in commands} == {"serve", "worker"}
    for command in commands:
        build_parser().parse_args(command[1:])  # SystemExit on an unknown option


def test_settings_are_real_and_secrets_come_from_declared_files() -> None:
    known = {field.alias for field in Settings.model_fields.values() if field.alias}
    files = {f"{name}_FILE" for name in SECRETS}
    declared = set(_compose()["secrets"])
    for name, service in _deckhand_services().items():
        environment = service["environment"]
        for variable, value in environment.items():
            assert variable in known | files, f"{variable} is not a deckhand setting"
            if variable in files:
                secret = str(value).removeprefix("/run/secrets/")
                assert secret in declared and secret in service["secrets"], (name, variable)
        assert not {"SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "REDIS_URL"} & set(environment)
    url = re.search(r"redis\+sentinel://\S+", (ROOT / "deploy" / "compose.yml").read_text())
    assert url and parse_sentinel_url(url.group(0)).service == "deckhand"


def test_redis_runs_the_scripts_the_topology_test_runs_with_a_password() -> None:
    scripts = {"redis.sh": "redis-primary", "sentinel.sh": "sentinel-1"}
    for script, example in scripts.items():
        text = (ROOT / "deploy" / "redis" / script).read_text()
        service = _services()[example]
        assert service["entrypoint"] == ["sh", f"/deckhand-redis/{script}"]
        assert "./redis:/deckhand-redis:ro" in service["volumes"]
        for variable in service["environment"]:
            assert variable in text, f"{script} never reads {variable}"
        assert "redis_password" in service["secrets"]
    redis_sh = (ROOT / "deploy" / "redis" / "redis.sh").read_text()
    assert "maxmemory-policy noeviction" in redis_sh and "appendonly yes" in redis_sh
    sentinel_sh = (ROOT / "deploy" / "redis" / "sentinel.sh").read_text()
    assert "resolve-hostnames yes" in sentinel_sh and "announce-hostnames yes" in sentinel_sh
    for name in ("redis-primary", "redis-replica", "sentinel-1", "sentinel-2", "sentinel-3"):
        assert any(v.endswith(":/data") for v in _services()[name]["volumes"]), name
        assert "--replicaof" not in str(_services()[name]), "the role is asked, not fixed"


def test_compose_limits_resources_and_keeps_the_root_read_only() -> None:
    for name, service in _services().items():
        assert service["deploy"]["resources"]["limits"]["memory"], name
    for service in _deckhand_services().values():
        assert service["read_only"] is True and any(t.startswith("/tmp") for t in service["tmpfs"])
        state = service["environment"]["DECKHAND_STATE_DIR"]
        assert any(v.endswith(f":{state}") for v in service["volumes"]), "state on a volume"
        assert any(v.endswith(":ro") and ":/config" in v for v in service["volumes"])
    assert _deckhand_services()["worker"]["stop_grace_period"]  # SIGTERM drains: give it time


def test_each_role_checks_the_port_it_serves_health_on() -> None:
    _, stages = _dockerfile()
    for name, service in _deckhand_services().items():
        role = service["command"][1]
        port = _health_port(service["command"])
        assert service["healthcheck"]["test"][-1] == str(port), name
        assert service["build"]["target"] == role
        stage = stages[role]
        assert shlex.split(stage.last("CMD") or "")[0].startswith("[")  # exec form
        assert stage.last("HEALTHCHECK").endswith(f'"bot.healthcheck", "{port}"]'), role
        assert _health_port(yaml.safe_load(stage.last("CMD") or "[]")) == port


def _health_port(command: list[str]) -> int:
    if command[1] == "worker":
        return int(command[command.index("--metrics-port") + 1])
    return 3000  # serve --http: $PORT, 3000 in the image


def test_dockerfile_pins_its_base_installs_dependencies_before_code_and_runs_as_non_root(
        ) -> None:
    args, stages = _dockerfile()
    for stage in stages.values():
        base = stage.base.replace("${PYTHON_IMAGE}", args.get("PYTHON_IMAGE", "?"))
        assert base in stages or DIGEST.match(base), f"{stage.name}: {base} is not pinned"
    wheels = stages["wheels"]
    assert wheels.first("RUN", r"pip wheel .*-r requirements/base\.txt") < wheels.first(
        "COPY", r"^agents ")
    runtime = stages["runtime"]
    assert runtime.first("RUN", r"pip install .*-r /tmp/requirements/base\.txt") < \
        runtime.first("COPY", r"/wheels/app")
    assert not any(ins == "COPY" and arg.split()[0] in CODE for ins, arg in runtime.lines)
    assert runtime.last("ENTRYPOINT") == '["/usr/bin/tini", "--"]'
    for role in ("serve", "worker"):
        assert _user(stages, role) == "deckhand" and "--uid 10001" in str(runtime.lines)
        assert "DECKHAND_STATE_DIR=/var/lib/deckhand" in str(runtime.lines)
    assert list(stages)[-1] == "serve"  # `docker build .` gives the bot
    for name in ("base.txt", "charts.txt"):
        pins = (ROOT / "deploy" / "requirements" / name).read_text().splitlines()
        assert all(re.match(r"^[\w.-]+==[\w.+-]+$", p) for p in pins
                   if p and not p.startswith(("#", "-c ")))
