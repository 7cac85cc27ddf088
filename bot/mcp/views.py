"""What the MCP tools return. The SDK derives each tool's output schema from these models."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agents.history.deploys import Where
from agents.plan.model import Plan
from agents.run.record import Pause


class Hints(BaseModel):
    """MCP tool-annotation hints for one catalog tool, derived from tools.yml."""

    read_only: bool = Field(description="never changes a host (mutates: false)")
    destructive: bool = Field(description="changes hosts (mutates: true)")
    idempotent: bool = Field(description="safe to repeat (idempotent: true)")


class ParamView(BaseModel):
    name: str
    type: str
    description: str = ""
    required: bool
    default: str | int | bool | None = None
    enum: list[str | int] | None = None
    pattern: str | None = None


class ToolView(BaseModel):
    name: str
    description: str
    target: str = Field(description="local, environment, or group:NAME")
    mutates: bool
    rollback: str | None = None
    params: list[ParamView]
    hints: Hints


class EnvironmentView(BaseModel):
    name: str
    hosts: list[str]


class CatalogView(BaseModel):
    """The tools a plan may use and where they can run, of one service."""

    service: str = Field(description="the service these are of")
    tools: list[ToolView]
    environments: list[EnvironmentView]
    groups: dict[str, list[str]]


class PlanView(BaseModel):
    """A validated plan (``accepted``) or the refusal, with every problem listed."""

    accepted: bool
    problems: list[str] = Field(default_factory=list)
    plan_hash: str | None = Field(default=None, description="pass to request_deploy")
    plan: Plan | None = None
    environments: list[str] = Field(default_factory=list)
    hosts: list[str] = Field(default_factory=list, description="hosts the steps may touch")
    requested_by: str
    expires_in: float | None = Field(default=None,
                                     description="seconds request_deploy accepts this hash")


class StepView(BaseModel):
    id: str
    status: str
    error: str | None = None


class RunView(BaseModel):
    """Where a run stands; approvals happen only in Slack or with `deckhand approve`."""

    run_id: str
    service: str = Field(description="the service the run deploys")
    status: str
    goal: str
    plan_hash: str
    environments: list[str]
    requested_by: str
    approved_by: list[str]
    approvals_needed: int
    approvers: str = Field(description="who may approve it")
    approval_rules: list[str] = Field(
        default_factory=list, description="each rule that governs it (environment, host, "
        "freeze, break-glass), where it is configured, and what is still needed")
    break_glass_grant: str | None = Field(
        default=None, description="who gave the break-glass grant, if any")
    steps: list[StepView]
    rollback: list[StepView]
    changed_hosts: list[str]
    reason: str | None = None
    paused: Pause | None = Field(
        default=None, description="the pause holding it: who, since when, when it rolls "
        "back unless resumed")
    go_no_go: str | None = Field(
        default=None, description="the go/no-go between rollout batches it waits at (decide "
        "with judge_run), and since when")


class DeployRequest(BaseModel):
    """A stored plan waiting for a human: where to approve it, and the run to watch."""

    run_id: str
    status: str
    plan_hash: str
    already_requested: bool = Field(description="this hash was requested before; same run")
    awaiting: str = Field(description="where a human approves it")
    slack_channel: str | None = None
    slack_ts: str | None = None


class RunRef(BaseModel):
    run_id: str
    status: str
    goal: str
    requested_by: str
    at: float | None = Field(default=None, description="finished (last success) or created")


class LockView(BaseModel):
    run_id: str
    worker: str
    since: float


class WhereView(BaseModel):
    """One environment: what it serves (from deploy history), who holds its lock, what is
    in flight, and the last run that succeeded there."""

    environment: str
    hosts: list[str]
    deployed: Where = Field(description="the version live there and on each host, by whom")
    lock: LockView | None = None
    active: list[RunRef] = Field(default_factory=list)
    last_success: RunRef | None = None


class WhereReport(BaseModel):
    service: str = Field(description="the service these environments are of")
    environments: list[WhereView]
