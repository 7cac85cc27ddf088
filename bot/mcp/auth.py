"""Bearer tokens for ``deckhand mcp --http``: each names the user its requests are made as.

``DECKHAND_MCP_TOKENS`` holds ``USER=TOKEN`` pairs separated by commas (use Slack user ids
as USER so approval policy, e.g. no self-approval, applies to that person's requests).
"""

from __future__ import annotations

import hmac

from mcp.server.auth.provider import AccessToken

from tools.errors import ConfigError, Problem

MIN_TOKEN_LENGTH = 24
ENV = "DECKHAND_MCP_TOKENS"


class StaticTokens:
    """The SDK's TokenVerifier over a fixed table; compares in constant time."""

    def __init__(self, users_by_token: dict[str, str]):
        self._users = users_by_token

    async def verify_token(self, token: str) -> AccessToken | None:
        for known, user in self._users.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                return AccessToken(token=token, client_id=user, scopes=[])
        return None


def parse_tokens(value: str | None) -> dict[str, str]:
    """``USER=TOKEN,…`` as {token: user}; ConfigError saying what to set when unusable."""
    problems, users = [], {}
    for item in (value or "").split(","):
        user, _, token = item.strip().partition("=")
        if not item.strip():
            continue
        if not user or len(token) < MIN_TOKEN_LENGTH:
            problems.append(Problem(ENV, f"entry {user or '?'!r}: expected USER=TOKEN with a "
                                         f"token of at least {MIN_TOKEN_LENGTH} characters"))
        else:
            users[token] = user
    if not users and not problems:
        problems.append(Problem(ENV, "set USER=TOKEN[,USER=TOKEN…]: `deckhand mcp --http` "
                                     "refuses requests without a bearer token"))
    if problems:
        raise ConfigError(problems)
    return users
