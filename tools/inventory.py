"""Where tools run: hosts, the environments and groups they belong to, rollout policy."""

from __future__ import annotations

import math
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

HOST_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"

LOCAL_HOST_NAME = "local"


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
    def label(self) -> str:
        if self.connection == "local":
            return self.name
        return f"{self.name} ({self.user + '@' if self.user else ''}{self.address}:{self.port})"


class Rollout(BaseModel):
    """How a step fans out over an environment's hosts."""

    model_config = ConfigDict(extra="forbid")

    batch_size: int | str = Field(default="100%", description="hosts per batch, or a percentage")
    max_parallel: int = Field(default=10, ge=1, le=256)
    stop_on_failure: bool = True
    after_each_batch: list[str] = Field(
        default_factory=list, description="gates that must pass between batches")

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


class Environment(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hosts: list[str] = Field(min_length=1)
    rollout: Rollout = Field(default_factory=Rollout)


class Inventory(BaseModel):
    """Hosts by name, environments and groups that list them, and the known_hosts file."""

    model_config = ConfigDict(extra="forbid")

    known_hosts: str | None = None
    hosts: dict[str, Host] = Field(default_factory=dict)
    environments: dict[str, Environment] = Field(default_factory=dict)
    groups: dict[str, list[str]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _names_resolve(self) -> Inventory:
        problems: list[str] = []
        for name, host in self.hosts.items():
            host.name = host.name or name
        for kind, members in [*(("environment " + k, v.hosts) for k, v in
                                self.environments.items()),
                              *(("group " + k, v) for k, v in self.groups.items())]:
            problems += [f"{kind} lists unknown host {h!r}" for h in members
                         if h not in self.hosts]
        for host in self.hosts.values():
            if host.jump and host.jump not in self.hosts:
                problems.append(f"host {host.name}: jump host {host.jump!r} is not defined")
        if problems:
            raise ValueError("; ".join(problems))
        return self

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


LOCAL_HOST = Host(name=LOCAL_HOST_NAME, connection="local")
