"""deploy/compose.yml and the Dockerfile stay in step with the CLI, the settings and the
practices they promise: digest-pinned base, dependencies before code, non-root, a health
check per role, secrets from files, resource limits, a read-only root."""

from __future__ import annotations

import json
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


def test_each_role_checks_health_where_it_serves_it_whatever_the_port() -> None:
    """Issue 39.8: HEALTHCHECKs with 3000 and 9100 written in went unhealthy once PORT or
    --metrics-port changed. The check names no port: the process writes its /healthz URL
    to DECKHAND_HEALTH_FILE (a setting; under the /tmp tmpfs, per container), the probe
    reads it (tests/integration/test_image_env.py runs the checks on other ports)."""
    _, stages = _dockerfile()
    env = _runtime_env(stages)
    health_file = env["DECKHAND_HEALTH_FILE"]
    assert health_file.startswith("/tmp/") and "DECKHAND_HEALTH_FILE" in _aliases()
    for name, service in _deckhand_services().items():
        role = service["command"][1]
        assert service["healthcheck"]["test"] == ["CMD", *HEALTHCHECK], name
        assert any(t.startswith("/tmp") for t in service["tmpfs"]), name
        assert "DECKHAND_HEALTH_FILE" not in service["environment"], "the image's, per container"
        assert service["build"]["target"] == role
        assert _serves_health(service["command"]), name
    for role in ("serve", "worker"):
        stage = stages[role]
        check = stage.last("HEALTHCHECK") or ""
        assert check.startswith("--interval") and check.endswith(
            "CMD " + json.dumps(HEALTHCHECK)), role
        assert shlex.split(stage.last("CMD") or "")[0].startswith("[")  # exec form
        assert _serves_health(yaml.safe_load(stage.last("CMD") or "[]")), role


HEALTHCHECK = ["python", "-m", "bot.healthcheck"]


def _serves_health(command: list[str]) -> bool:
    """A /healthz to check: serve over HTTP, a worker with its metrics port."""
    if command[1] == "worker":
        return "--metrics-port" in command
    return command[1] == "serve" and "--http" in command


def _runtime_env(stages: dict[str, Stage]) -> dict[str, str]:
    found: dict[str, str] = {}
    for instruction, rest in stages["runtime"].lines:
        if instruction == "ENV":
            found.update(word.split("=", 1) for word in shlex.split(rest) if "=" in word)
    return found


def _aliases() -> set[str]:
    return {field.alias for field in Settings.model_fields.values() if field.alias}


def test_each_role_builds_an_image_of_its_own() -> None:
    """Issue 39.8: serve and worker shared `image: deckhand:latest` with different build
    targets, so `docker compose build` tagged one role's image for both."""
    images: dict[str, set[str]] = {}
    for name, service in _deckhand_services().items():
        assert service.get("image"), f"{name}: no image of its own"
        images.setdefault(service["build"]["target"], set()).add(service["image"])
    assert all(len(names) == 1 for names in images.values()), images  # replicas share one
    assert len({next(iter(n)) for n in images.values()}) == len(images), images
    dockerfile = (ROOT / "Dockerfile").read_text()  # its build lines tag them the same
    for target, (image,) in images.items():
        repository = image.partition(":")[0]
        build = (f"docker build -t {repository} ." if target == "serve"
                 else f"docker build --target {target} -t {repository} .")
        assert build in dockerfile, build


def test_deckhand_can_read_its_secret_files_as_compose_mounts_them() -> None:
    """Issue 39.8: at mode 0600, as the compose file said, the secrets were unreadable by
    the image's uid and every deckhand container restarted in a loop. Compose mounts a
    file secret as the host file is (uid/gid/mode apply only to swarm and to `environment:`
    secrets, which a read-only service cannot take): the file must be the image's uid's."""
    _, stages = _dockerfile()
    uid = re.search(r"--uid (\d+)", str(stages["runtime"].lines))
    assert uid is not None
    text = (ROOT / "deploy" / "compose.yml").read_text()
    secrets = _compose()["secrets"]
    deckhand = {secret for service in _deckhand_services().values()
                for secret in service["secrets"]}
    for secret in deckhand:
        assert isinstance(secret, str), "long syntax: compose ignores uid/gid/mode for files"
        assert set(secrets[secret]) == {"file"}
    chown = re.search(rf"chown {uid.group(1)}:{uid.group(1)} ([\w ]+)\n", text)
    chmod = re.search(r"chmod 0400 ([\w ]+?)( &&|\n)", text)
    assert chown and chmod, "the compose file says how to make them the image's"
    assert set(chown.group(1).split()) == set(chmod.group(1).split()) == deckhand
    assert "mode 0600" not in text


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
