"""deckhand's MCP tools on the official SDK's MCPServer, over stdio or streamable HTTP.

Each tool hands its work to the synchronous ``Desk`` on a worker thread and turns
deckhand's errors into tool errors the client can read. There is deliberately no tool
that approves, modifies, rejects or starts anything: those stay with humans. A running run
may be paused, resumed or stopped by its requester or approvers, as in Slack. ``judge_run``
(a rollout's go/no-go between batches) is a human's decision too: it acts only for a user
the HTTP bearer token verified, under the same rules as approving.

Every tool that plans or reads a service's state takes an optional ``service``; its schema
lists the organisation's services as an enum (``refresh_services``, again after a reload).
"""

from __future__ import annotations

import functools
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

import anyio
import anyio.to_thread
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import ToolAnnotations
from pydantic import AnyHttpUrl, BaseModel, Field, ValidationError

from agents.engine.control import Control
from agents.plan.model import SERVICE_PATTERN
from bot.mcp.auth import StaticTokens
from bot.mcp.desk import Desk
from bot.mcp.views import CatalogView, DeployRequest, PlanView, RunView, WhereReport
from tools.errors import DeckhandError
from tools.redact import redact_data

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

INSTRUCTIONS = (
    "deckhand plans deployments and runs them only after a human approves. Call `plan` "
    "with a request such as 'deploy v2.3.1'; if accepted, pass its plan_hash to "
    "`request_deploy`, which posts the plan for approval and returns a run id to follow "
    "with `run_status`. You cannot approve, edit or start a run yourself; if you requested "
    "it (or may approve it) you may `pause_run`, `resume_run` or `stop_run` it. When "
    "deckhand serves several services, name the one you mean with `service` (or in the "
    "request, 'deploy api v2.3.1'); a run or plan hash already knows its own.")

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                            open_world_hint=False)

STEER = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False,
                        open_world_hint=False)
"""Pause, resume and stop change a running deploy (a stop rolls hosts back)."""

PLAN_HASH, RUN_ID, CHANNEL = (r"^[0-9a-f]{64}$", r"^[A-Za-z0-9_.:-]{1,80}$",
                              r"^#?[A-Za-z0-9_.-]{1,80}$")
PlanHash = Annotated[str, Field(pattern=PLAN_HASH, description="from `plan`")]
RunId = Annotated[str, Field(pattern=RUN_ID)]
Channel = Annotated[str | None, Field(default=None, pattern=CHANNEL,
                                      description="Slack channel for the approval post")]
Request = Annotated[str, Field(min_length=1, max_length=500,
                               description="what to do, e.g. 'deploy v2.3.1 to staging'")]
Service = Annotated[str | None, Field(
    default=None, pattern=SERVICE_PATTERN,
    description="which service of the organisation (needed when it has several and the "
                "request names none)")]
RunService = Annotated[str | None, Field(
    default=None, pattern=SERVICE_PATTERN,
    description="optional: the service you expect the run (or plan) to be of; refused if "
                "it is another's")]
SERVICE_TOOLS = ("catalog", "plan", "where", "run_status", "request_deploy", "pause_run",
                 "resume_run", "stop_run", "judge_run")
"""The tools taking ``service``: their schemas list the organisation's services."""


@dataclass(frozen=True)
class HttpAuth:
    """Bearer-token check for streamable HTTP (stdio is the client's own process)."""

    tokens: StaticTokens
    issuer_url: str = "http://127.0.0.1"
    """Required by the SDK's AuthSettings; deckhand issues no OAuth tokens itself."""


class DeskTools:
    """The MCP tools; their docstrings are what the client's model reads."""

    def __init__(self, desk: Desk):
        self.desk = desk
        self.stdio_connection = secrets.token_hex(16)

    async def catalog(self, service: Service = None) -> CatalogView:
        """The tools a plan may use (parameters, where they run, whether they change hosts),
        the environments with their hosts, and host groups, of one service."""
        return await self._answer(self.desk.catalog, service)

    async def plan(self, ctx: Context, request: Request, service: Service = None) -> PlanView:
        """Plan a request and validate it. Returns the plan with its hash and the
        environments and hosts it touches, or the refusal listing every problem."""
        return await self._answer(self.desk.plan, request, requester=requester_of(ctx),
                                  connection=connection_of(ctx, self.stdio_connection),
                                  service=service)

    async def run_status(self, run_id: RunId, service: RunService = None) -> RunView:
        """Where a run stands: status, approvals still needed and who may give them, steps."""
        return await self._answer(self.desk.run_status, run_id, service)

    async def judge_run(self, ctx: Context, run_id: RunId,
                        decision: Literal["continue", "rollback"],
                        service: RunService = None) -> RunView:
        """Decide the go/no-go a run's rollout waits at between batches (see `run_status`'s
        go_no_go): continue starts the next batch, rollback undoes the hosts changed so far.
        Only for a user the bearer token verified, who may approve the run."""
        return await self._answer(self.desk.judge_run, run_id, decision,
                                  user=requester_of(ctx), verified=http_user(ctx) is not None,
                                  service=service)

    async def where(self, service: Service = None) -> WhereReport:
        """Per environment of a service: its hosts, who holds its lock, runs in flight, the
        last success."""
        return await self._answer(self.desk.where, service)

    async def request_deploy(self, ctx: Context, plan_hash: PlanHash,
                             channel: Channel = None,
                             service: RunService = None) -> DeployRequest:
        """Ask humans to approve the plan `plan` returned with this hash: it is stored and
        posted for approval (in Slack when configured, else for `deckhand approve`). Returns
        the run id. Only plans you made with `plan` in the last minutes are accepted."""
        return await self._answer(self.desk.request_deploy, plan_hash, channel,
                                  requester=requester_of(ctx), client=client_name(ctx),
                                  connection=connection_of(ctx, self.stdio_connection),
                                  service=service)

    async def pause_run(self, ctx: Context, run_id: RunId,
                        service: RunService = None) -> RunView:
        """Hold a running run before its next step or rollout batch: running commands
        finish, nothing new starts until `resume_run`; it rolls back if left paused past the
        policy's timeout. Only the run's requester or approvers may."""
        return await self._steer(ctx, Control.PAUSE, run_id, service)

    async def resume_run(self, ctx: Context, run_id: RunId,
                         service: RunService = None) -> RunView:
        """Let a paused run carry on. Only the run's requester or approvers may."""
        return await self._steer(ctx, Control.RESUME, run_id, service)

    async def stop_run(self, ctx: Context, run_id: RunId,
                       service: RunService = None) -> RunView:
        """Stop a run: running commands are killed and every host it changed is rolled
        back. Only the run's requester or approvers may."""
        return await self._steer(ctx, Control.STOP, run_id, service)

    async def _steer(self, ctx: Context, control: Control, run_id: str,
                     service: str | None) -> RunView:
        return await self._answer(self.desk.steer, control, run_id, requester=requester_of(ctx),
                                  service=service)

    async def _answer(self, fn: Callable[..., M], *args: Any, **kwargs: Any) -> M:
        """The MCP answers' door: every result and error passes the config's redactor."""
        redact = self.desk.services.redact
        try:
            answer = await _off_loop(fn, *args, **kwargs)
        except ToolError as exc:
            raise ToolError(redact(str(exc))) from exc
        dumped = answer.model_dump(mode="json")
        clean = redact_data(redact, dumped)
        return answer if clean is dumped else type(answer).model_validate(clean)


async def _off_loop(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run deckhand's synchronous code on a worker thread; its errors become tool errors."""
    try:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))
    except DeckhandError as exc:
        raise ToolError(str(exc)) from exc


class DeskServer(MCPServer[Any]):
    """The SDK's server, with one border every tool call crosses: a call refused before
    deckhand's code runs (unknown tool, arguments failing their schema) is audited too."""

    def __init__(self, desk: Desk, **options: Any):
        super().__init__("deckhand", **options)
        self.desk = desk
        self.tools = DeskTools(desk)
        self.request_hint: ToolAnnotations | None = None

    def add_request_tool(self) -> None:
        """``request_deploy``, its destructive hint from the config in force: called again
        after a config reload (SIGHUP), so a tools.yml that gained a mutating tool makes the
        client's host ask its user again (a stale "not destructive" would fail open)."""
        hint = request_annotations(self.desk)
        if hint == self.request_hint:
            return
        if self.request_hint is not None:
            self.remove_tool("request_deploy")
        self.add_tool(self.tools.request_deploy, annotations=hint)
        self.request_hint = hint

    def refresh_services(self) -> None:
        """List the organisation's services as the enum of every ``service`` argument (the
        names in force: called again after a config reload). The desk checks the name too,
        against the same names, so a stale listing can only be refused, never guessed."""
        names = sorted(self.desk.services.names.names)
        for name in SERVICE_TOOLS:
            tool = self._tool_manager.get_tool(name)
            if tool is not None:
                tool.parameters = with_service_enum(tool.parameters, names)

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context[Any, Any] | None = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError) and not isinstance(exc, UnexpectedToolError):
                # the SDK's, for the arguments (an Unexpected one is a result's, a bug)
                exc = ToolError(f"{name}: " + argument_problems(cause, arguments))
                exc.__cause__ = cause
            if not _raised_by_deckhand(exc):  # deckhand's own refusals are audited there
                await anyio.to_thread.run_sync(functools.partial(
                    self._audit_refusal, name, arguments, context, exc))
            raise exc from cause

    def _audit_refusal(self, name: str, arguments: dict[str, Any],
                       context: Context[Any, Any] | None, exc: ToolError) -> None:
        cause = exc.__cause__
        fields = sorted({".".join(str(p) for p in err["loc"]) for err in cause.errors()}) \
            if isinstance(cause, ValidationError) else []  # the SDK's, for the arguments
        actor = requester_of(context) if context is not None else "mcp:unknown"
        self.desk.services.store.audit.refused(
            name[:80], actor=actor, face="mcp", rule=str(exc)[:300], action="mcp_call_refused",
            fields=fields, arguments=_shapes(arguments))


def with_service_enum(schema: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """``schema`` with its ``service`` property's text branch listing ``names``."""
    prop = schema.get("properties", {}).get("service")
    if prop is None:
        return schema
    branches = [{**b, "enum": names} if b.get("type") == "string" else b
                for b in prop.get("anyOf", [prop])]
    fresh = {**prop, "anyOf": branches} if "anyOf" in prop else branches[0]
    return {**schema, "properties": {**schema["properties"], "service": fresh}}


EXPECTED = {
    PLAN_HASH: "the 64-character plan_hash that `plan` returned",
    RUN_ID: "a run id, like run-01j9z3k7w2abcd (`run_status`, `deckhand runs`)",
    CHANNEL: "a Slack channel name, like #deploys",
    SERVICE_PATTERN: "a service's name, like api (see the tool's schema for this "
                     "organisation's)",
}
"""What a pattern-checked argument takes, in words (the regex alone says little)."""


def argument_problems(exc: ValidationError, arguments: dict[str, Any]) -> str:
    """One line per bad argument: which one, what it takes, what it got (its type and size,
    never its value) — instead of pydantic's text and its errors.pydantic.dev link."""
    lines = []
    for err in exc.errors(include_url=False):
        name = ".".join(str(part) for part in err["loc"]) or "arguments"
        given = arguments.get(str(err["loc"][0])) if err["loc"] else None
        got = f" (got {_shape(given)})" if err["type"] != "missing" else ""
        lines.append(f"argument `{name}` {_expected(err)}{got}")
    return "; ".join(lines)


def _expected(err: Any) -> str:
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not an argument of this tool"
    if kind == "string_pattern_mismatch":
        return "must be " + EXPECTED.get(str(ctx.get("pattern")), f"text matching "
                                         f"{ctx.get('pattern')}")
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters"
    if kind == "string_too_short":
        return f"must be at least {ctx.get('min_length')} character(s)"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}"
    return f"is not valid: {err['msg']}"


def _shape(value: Any) -> str:
    if isinstance(value, str):
        return f"text of {len(value)} characters"
    return "nothing" if value is None else f"a {type(value).__name__}"


def _raised_by_deckhand(exc: BaseException) -> bool:
    """Whether a DeckhandError is in ``exc``'s cause chain (the SDK wraps a tool's error)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, DeckhandError):
            return True
        seen = seen.__cause__
    return False


def _shapes(arguments: dict[str, Any]) -> dict[str, str]:
    """What each argument was (type and size), not its value: that is the caller's data,
    possibly a megabyte of it."""
    out = {}
    for key, value in list(arguments.items())[:20]:
        size = f", {len(value)} chars" if isinstance(value, str) else ""
        out[str(key)[:80]] = f"{type(value).__name__}{size}"
    return out


def build_server(desk: Desk, *, auth: HttpAuth | None = None) -> DeskServer:
    """The MCP server for ``desk``; with ``auth``, HTTP requests need a bearer token."""
    settings = None if auth is None else AuthSettings(issuer_url=AnyHttpUrl(auth.issuer_url),
                                                      resource_server_url=None)
    server = DeskServer(desk, instructions=INSTRUCTIONS, auth=settings,
                        token_verifier=None if auth is None else auth.tokens)
    tools = server.tools
    server.add_tool(tools.catalog, annotations=READ_ONLY)
    server.add_tool(tools.plan, annotations=READ_ONLY)
    server.add_tool(tools.run_status, annotations=READ_ONLY)
    server.add_tool(tools.where, annotations=READ_ONLY)
    server.add_request_tool()
    for steer in (tools.pause_run, tools.resume_run, tools.stop_run):
        server.add_tool(steer, annotations=STEER)
    server.add_tool(tools.judge_run, annotations=ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=False,
        open_world_hint=False))
    server.refresh_services()
    return server


def serve(server: MCPServer[Any], *, http: tuple[str, int] | None = None) -> None:
    """Serve until the client hangs up (stdio) or the process is stopped (``http``)."""
    if http is None:
        anyio.run(server.run_stdio_async)
    else:
        host, port = http
        anyio.run(functools.partial(server.run_streamable_http_async, host=host, port=port))


def request_annotations(desk: Desk) -> ToolAnnotations:
    """request_deploy changes deckhand's state, not hosts — but what it asks for may, once a
    human approves, so it is destructive exactly when any service's tools.yml has mutating
    tools."""
    mutating = any(t.mutates for config in desk.services.org.services.values()
                   for t in config.catalog.tools.values())
    return ToolAnnotations(read_only_hint=False, destructive_hint=mutating,
                           idempotent_hint=True, open_world_hint=desk.poster is not None)


def requester_of(ctx: Context) -> str:
    """The authenticated user over HTTP, else ``mcp:<client name>``."""
    return http_user(ctx) or f"mcp:{client_name(ctx)}"


def http_user(ctx: Context) -> str | None:
    token = get_access_token()
    if token is not None:
        return token.client_id
    request = ctx.request_context.request
    user = getattr(request, "scope", {}).get("user")
    return user.access_token.client_id if isinstance(user, AuthenticatedUser) else None


def connection_of(ctx: Context, stdio_connection: str) -> str:
    """What a plan made on this connection is bound to, besides its requester: over HTTP
    the bearer token's user is verified (""), on stdio the client's name is only what it
    calls itself, so the plan is bound to the connection — ``stdio_connection``, a random id
    the server made (a stdio server serves exactly one connection, for its life)."""
    return "" if http_user(ctx) is not None else stdio_connection


def client_name(ctx: Context) -> str:
    """The name the client gave at initialize, reduced to safe characters (it is unverified)."""
    params = ctx.session.client_params
    name = params.client_info.name if params is not None else ""
    return re.sub(r"[^A-Za-z0-9._-]", "", name)[:64] or "unknown"
