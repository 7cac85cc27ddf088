"""Where tools run: hosts, the environments and groups they belong to, rollout policy."""

from __future__ import annotations

import math
import re
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

HOST_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"

LOCAL_HOST_NAME = "local"

_ALIAS = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,62}")


class Host(BaseModel):
    """One machine. ``connection: local`` runs commands on the deckhand host itself."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="", pattern=r"^$|" + HOST_NAME)
    connection: Literal["ssh", "local"] = "ssh"
    address: str = "127.0.0.1"
    port: int = Field(default=22, ge=1, le=65535)
    user: str | None = None
    key_file: str | None = None
    jump: str | None = None
    vars: dict[str, str | int | bool] = Field(default_factory=dict)

    @property
    def lock_id(self) -> str:
        """What a host lock is keyed by: the machine, whatever an inventory calls it
        (``ADDRESS:PORT``; ``local:NAME`` for a local host)."""
        return f"local:{self.name}" if self.connection == "local" else \
            f"{self.address}:{self.port}"

    @property
    def label(self) -> str:
        if self.connection == "local":
            return self.name
        return f"{self.name} ({self.user + '@' if self.user else ''}{self.address}:{self.port})"


DURATION = re.compile(r"(\d+(?:\.\d+)?)(s|m|h)?")
_UNIT = {"s": 1, "m": 60, "h": 3600}


def parse_duration(value: object) -> float:
    """Seconds from ``90``, ``90s``, ``30m`` or ``2h`` (ValueError names the forms)."""
    found = DURATION.fullmatch(str(value).strip()) if isinstance(value, (int, float, str)) \
        and not isinstance(value, bool) else None
    seconds = float(found.group(1)) * _UNIT[found.group(2) or "s"] if found else 0.0
    if seconds <= 0 or seconds > 7 * 86400:
        raise ValueError(f"{value!r} is not a duration: write seconds, or 90s, 30m, 2h "
                         f"(more than 0, at most a week)")
    return seconds


class Judgment(BaseModel):
    """A go/no-go hold after some rollout batches (Spinnaker's manual judgment): nothing
    new starts until someone allowed decides Continue or Roll back, or ``timeout`` passes."""

    model_config = ConfigDict(extra="forbid")

    after_batches: list[int] = Field(min_length=1, description=(
        "batch numbers (1 = the first) after which the rollout waits for a decision"))
    approvers: list[str] = Field(default_factory=list, description=(
        "only these users or groups may decide (on top of who may approve: narrows only)"))
    timeout: float = Field(default=1800.0, description="how long to wait: 90s, 30m, 2h")
    on_timeout: Literal["rollback", "continue"] = Field(
        default="rollback", description="what happens when nobody decided in time")
    recheck: float = Field(default=30.0, ge=0, description=(
        "while holding, the batch's gates are judged again this long after each judgment "
        "ends (0: only on Continue); the hold shows the newest figures"))
    on_gate_failure: Literal["rollback", "decide"] = Field(
        default="rollback", description=(
            "a gate that fails while holding: rollback ends the hold with a rollback; "
            "decide leaves it to the people deciding, showing the failure (Continue "
            "re-judges and stops the rollout if a gate still fails)"))

    @field_validator("after_batches")
    @classmethod
    def _batch_numbers(cls, value: list[int]) -> list[int]:
        if any(n < 1 for n in value):
            raise ValueError("batch numbers start at 1 (the first batch)")
        if len(set(value)) != len(value):
            raise ValueError("a batch number is listed twice")
        return sorted(value)

    @field_validator("timeout", mode="before")
    @classmethod
    def _duration(cls, value: object) -> float:
        return parse_duration(value)

    @field_validator("recheck", mode="before")
    @classmethod
    def _recheck(cls, value: object) -> float:
        return 0.0 if value in (0, "0", 0.0) else parse_duration(value)


class Rollout(BaseModel):
    """How a step fans out over an environment's hosts."""

    model_config = ConfigDict(extra="forbid")

    batch_size: int | str = Field(default="100%", description="hosts per batch, or a percentage")
    max_parallel: int = Field(default=10, ge=1, le=1024,
                              description="hosts at once in a batch (a thread each)")
    stop_on_failure: bool = True
    after_each_batch: list[str] = Field(
        default_factory=list, description=(
            "gates that must pass after every batch, the last (and a single) one included: "
            "a step is not done until its last batch's gates passed"))
    judgment: Judgment | None = Field(default=None, description=(
        "hold for a go/no-go decision after these batches (after their gates passed)"))

    @field_validator("batch_size")
    @classmethod
    def _batch_form(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value >= 1:
            return value
        if isinstance(value, str) and re.fullmatch(r"([1-9]\d?|100)%", value):
            return value
        raise ValueError("batch_size must be a positive integer or a percentage like '25%'")

    def batches(self, hosts: list[Host]) -> list[list[Host]]:
        """Split ``hosts`` into the batches a rolling deploy goes through, in order."""
        if isinstance(self.batch_size, int):
            size = self.batch_size
        else:
            size = math.ceil(len(hosts) * int(self.batch_size[:-1]) / 100)
        size = max(1, size)
        return [hosts[i:i + size] for i in range(0, len(hosts), size)]


class SSHSettings(BaseModel):
    """How connections to SSH hosts are opened and kept (``inventory.ssh``).

    sshd drops connections that have not logged in yet past its MaxStartups (10:30:100 by
    default: from 10 on, 30 % of new ones), so setups are paced and the dropped ones retried.
    """

    model_config = ConfigDict(extra="forbid")

    max_handshakes: int = Field(default=16, ge=1, le=256, description=(
        "connection setups (handshake and login) at once, in all"))
    max_handshakes_per_server: int = Field(default=8, ge=1, le=256, description=(
        "setups at once to one sshd (address and port): below its MaxStartups start"))
    connect_attempts: int = Field(default=4, ge=1, le=10, description=(
        "tries for a setup the server dropped before login; nothing else is retried"))
    retry_backoff: float = Field(default=0.5, gt=0, le=30, description=(
        "seconds before the first retry, doubling after each, with jitter"))
    connect_timeout: float = Field(default=10.0, gt=0, le=300, description=(
        "seconds for the TCP connect, and again for the SSH handshake"))
    idle_close: float = Field(default=300.0, ge=0, le=86400, description=(
        "seconds an unused connection stays open; 0 keeps it until deckhand stops"))


class Environment(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hosts: list[str] = Field(min_length=1)
    rollout: Rollout = Field(default_factory=Rollout)
    aliases: list[str] = Field(default_factory=list)
    """Other names people use for it ("prod", "live"); requests resolve them to this one."""


class Inventory(BaseModel):
    """Hosts by name, environments and groups that list them, and the known_hosts file."""

    model_config = ConfigDict(extra="forbid")

    known_hosts: str | None = None
    ssh: SSHSettings = Field(default_factory=SSHSettings)
    hosts: dict[str, Host] = Field(default_factory=dict)
    environments: dict[str, Environment] = Field(default_factory=dict)
    groups: dict[str, list[str]] = Field(default_factory=dict)
    _shared: dict[str, tuple[str, ...]] = PrivateAttr(default_factory=dict)

    @property
    def shared(self) -> dict[str, tuple[str, ...]]:
        """Host name -> the scopes of other inventories that list the same machine
        (``web/production``): their rules govern a change to it too. Never written in a
        file; set by whoever loads several inventories together (``agents.org``)."""
        return self._shared

    def share(self, shared: dict[str, tuple[str, ...]]) -> None:
        self._shared = {host: tuple(scopes) for host, scopes in shared.items() if scopes}

    @model_validator(mode="after")
    def _names_resolve(self, info: ValidationInfo) -> Inventory:
        for name, host in self.hosts.items():
            host.name = host.name or name
        problems = self.reference_problems()
        if problems and not (info.context or {}).get("defer_references"):
            raise ValueError("; ".join(message for _, message in problems))
        return self

    def reference_problems(self) -> list[tuple[tuple[str | int, ...], str]]:
        """Every host name that resolves to nothing, with the path of the node naming it
        (the config loader asks for these so each one points at its own line)."""
        problems: list[tuple[tuple[str | int, ...], str]] = []
        members: list[tuple[tuple[str, ...], str, list[str]]] = [
            (("environments", k, "hosts"), f"environment {k}", v.hosts)
            for k, v in self.environments.items()]
        members += [(("groups", k), f"group {k}", v) for k, v in self.groups.items()]
        for path, kind, names in members:
            problems += [((*path, i), f"{kind} lists unknown host {h!r}")
                         for i, h in enumerate(names) if h not in self.hosts]
        problems += [(("hosts", key, "jump"), f"host {host.name}: jump host {host.jump!r} is "
                      f"not defined") for key, host in self.hosts.items()
                     if host.jump and host.jump not in self.hosts]
        return problems

    def alias_problems(self) -> list[tuple[tuple[str | int, ...], str]]:
        """Aliases that are not single words, or that could name two things (another
        environment or its alias): an ambiguous name must never pick a policy by chance."""
        problems: list[tuple[tuple[str | int, ...], str]] = []
        taken = {name.lower(): f"environment {name}" for name in self.environments}
        for name, env in self.environments.items():
            for index, alias in enumerate(env.aliases):
                path = ("environments", name, "aliases", index)
                owner = taken.get(alias.lower())
                if not _ALIAS.fullmatch(alias):
                    problems.append((path, f"alias {alias!r} must be one word (letters, "
                                           f"digits, - or _), starting with a letter"))
                elif owner is not None:
                    problems.append((path, f"alias {alias!r} of {name} is already "
                                           f"{owner}; each name may mean one environment"))
                else:
                    taken[alias.lower()] = f"an alias of {name}"
        return problems

    def judgment_problems(self) -> list[tuple[tuple[str | int, ...], str]]:
        """Go/no-go holds after a batch the rollout never reaches, or after its last batch
        (nothing would be left to hold back): each one is a typo or a stale config."""
        problems: list[tuple[tuple[str | int, ...], str]] = []
        for name, env in self.environments.items():
            judgment = env.rollout.judgment
            if judgment is None:
                continue
            count = len(env.rollout.batches([Host(name=h) for h in env.hosts]))
            problems += [(("environments", name, "rollout", "judgment", "after_batches", i),
                          f"batch {n}: {name} rolls out in {count} batch(es) of "
                          f"{env.rollout.batch_size} over {len(env.hosts)} host(s), so a "
                          f"go/no-go can follow {_batches_upto(count - 1)} only"
                          if count > 1 else f"batch {n}: {name} rolls out in one batch, so "
                          f"there is nothing to hold back; lower batch_size or drop judgment")
                         for i, n in enumerate(judgment.after_batches) if n >= count]
        return problems

    def hosts_of(self, target: str, environment: str | None) -> list[Host]:
        """The hosts a tool with ``target`` runs on (empty list means: run locally)."""
        if target == "environment" and environment is not None:
            return [self.hosts[h] for h in self.environments[environment].hosts]
        if target.startswith("group:"):
            return [self.hosts[h] for h in self.groups.get(target[6:], [])]
        return []

    def rollout_of(self, environment: str | None) -> Rollout:
        env = self.environments.get(environment or "")
        return env.rollout if env else Rollout()


def _batches_upto(last: int) -> str:
    return "batch 1" if last == 1 else f"batches 1 to {last}"


LOCAL_HOST = Host(name=LOCAL_HOST_NAME, connection="local")
