"""Process settings from the environment, validated once at the edge.

Only what differs between deployments lives here (endpoints, credentials, the config path).
What the team decides (tools, hosts, policy, playbooks) lives in the config file.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Environment settings. Secrets are SecretStr so they never print by accident."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True)

    config_path: str | None = Field(default=None, alias="DECKHAND_CONFIG")
    redis_url: SecretStr | None = Field(default=None, alias="REDIS_URL")
    worker_name: str | None = Field(default=None, alias="DECKHAND_WORKER")
    schedule_tz: str = Field(default="UTC", alias="DECKHAND_TZ")
    schedule_grace: float = Field(default=1800.0, gt=0, alias="DECKHAND_SCHEDULE_GRACE",
                                  description="seconds a missed occurrence may still fire")

    openai_api_key: SecretStr | None = Field(default=None, alias="OPENAI_API_KEY")
    openai_base_url: str | None = Field(default=None, alias="OPENAI_BASE_URL")
    openai_model: str = Field(default="gpt-4o-mini", alias="OPENAI_MODEL")
    openai_timeout: float = Field(default=60.0, alias="OPENAI_TIMEOUT")
    openai_seed: int | None = Field(default=None, alias="OPENAI_SEED",
                                    description="sent with every LLM request when set")

    slack_bot_token: SecretStr | None = Field(default=None, alias="SLACK_BOT_TOKEN")
    slack_app_token: SecretStr | None = Field(default=None, alias="SLACK_APP_TOKEN")
    slack_signing_secret: SecretStr | None = Field(default=None, alias="SLACK_SIGNING_SECRET")
    slack_api_url: str = Field(default="https://slack.com/api/", alias="SLACK_API_URL")
    http_port: int = Field(default=3000, alias="PORT")
    log_format: Literal["text", "json"] = Field(default="text", alias="DECKHAND_LOG_FORMAT")
    mcp_tokens: SecretStr | None = Field(default=None, alias="DECKHAND_MCP_TOKENS",
                                         description="USER=TOKEN,… for `deckhand mcp --http`")

    def secret_values(self) -> list[str]:
        """Every secret value, for the redactor."""
        fields = (self.redis_url, self.openai_api_key, self.slack_bot_token,
                  self.slack_app_token, self.slack_signing_secret, self.mcp_tokens)
        return [f.get_secret_value() for f in fields if f is not None]
