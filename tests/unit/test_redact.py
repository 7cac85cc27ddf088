"""The redactor's shapes, the env secrets it learns by name, and JSON kept valid."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tools.redact import MASK, Redactor, redact_text, url_secrets

SHAPES = [
    "xoxb-1111111111-2222222222-AbCdEfGh", "ghp_" + "a1" * 18, "github_pat_" + "B2" * 20,
    "glpat-" + "c3" * 10, "AKIAQWERTYUIOPASDFGH", "AIza" + "d" * 35, "sk_live_" + "e" * 20,
    "https://hooks.slack.com/services/T0/B0/abcdefghijkl",
    "https://discord.com/api/webhooks/123/abcdef", "Bearer abcdefgh12345678",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIabc\n-----END RSA PRIVATE KEY-----",
]


@pytest.mark.parametrize("secret", SHAPES)
def test_credential_shapes_are_masked(secret: str) -> None:
    masked = Redactor()(f"before {secret} after")
    assert secret.split()[-1] not in masked and MASK in masked and masked.startswith("before")


def test_url_credentials_and_signatures_keep_the_url_readable() -> None:
    masked = Redactor()("clone https://ci:pa55w0rd-x@git.example.com/a.git and "
                        "https://s3.example.com/o?X-Amz-Signature=abc123&ok=1")
    assert masked == (f"clone https://ci:{MASK}@git.example.com/a.git and "
                      f"https://s3.example.com/o?X-Amz-Signature={MASK}&ok=1")


def test_secrets_are_found_as_slack_escaped_them() -> None:
    """Slack's door sees mrkdwn text, escaped (& < >) before it is redacted."""
    redact = Redactor(["p&ss<w0rd>"])
    assert redact("a p&amp;ss&lt;w0rd&gt; b") == f"a {MASK} b"
    assert redact("a p&ss<w0rd> b") == f"a {MASK} b"
    assert redact("https://x/o?a=1&amp;sig=abc123&amp;ok=1") == \
        f"https://x/o?a=1&amp;sig={MASK}&amp;ok=1"


def test_env_variables_named_like_secrets_are_learned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEPLOY_TOKEN", "tok-value-123456")
    monkeypatch.setenv("ALERT_WEBHOOK_URL", "https://alerts.example/x/y")
    monkeypatch.setenv("HOME_DIRECTORY", "/home/not-a-secret")
    masked = Redactor.from_env()("tok-value-123456 https://alerts.example/x/y /home/not-a-secret")
    assert masked == f"{MASK} {MASK} /home/not-a-secret"


@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_json_stays_json_and_escaped_secrets_are_found(ensure_ascii: bool) -> None:
    redact = Redactor(['qu"oted-secret', "caf\u00e9-secret"])
    doc = {"a": 'x qu"oted-secret y', "b": "caf\u00e9-secret", "c": "Bearer\nabcdefgh1234",
           "d": "-----BEGIN EC PRIVATE KEY-----\nabc", "e": "fine\n\"text\"", "n": 1}
    out = json.loads(redact_text(redact, json.dumps(doc, ensure_ascii=ensure_ascii)))
    assert out == {"a": f"x {MASK} y", "b": MASK, "c": f"Bearer\n{MASK}", "d": MASK,
                   "e": "fine\n\"text\"", "n": 1}


def test_a_clean_text_comes_back_as_the_same_object() -> None:
    text = json.dumps({"tail": "line\nline", "status": "ok"})
    assert redact_text(Redactor(["elsewhere-secret"]), text) is text


def test_log_records_are_made_redacted(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    logging.getLogger("deckhand.unit").info("token %s", "xoxb-1111111111-22222222")
    assert caplog.records[-1].getMessage() == f"token {MASK}"


def test_a_reload_widens_one_redactor_instead_of_chaining_one_per_reload() -> None:
    """SlackRuntime.adopt: the old config's secrets stay masked (a run still executing may
    print one) and the new ones join, yet a hundred reloads of the same file leave the
    same redactor: it grows only by secrets it has not seen."""
    first = Redactor(["old-secret-value"])
    widened = first
    for _ in range(100):
        widened = widened.including(Redactor(["new-secret-value", "new&secret<value"]))
    assert widened("old-secret-value new-secret-value") == f"{MASK} {MASK}"
    assert widened("new&amp;secret&lt;value") == MASK  # escaped as Slack writes it, too
    assert widened._values == first.including(
        Redactor(["new-secret-value", "new&secret<value"]))._values


def test_log_records_keep_their_arguments_for_formatters_that_read_them(
        caplog: pytest.LogCaptureFixture) -> None:
    """uvicorn's access formatter unpacks a record's five arguments: a record the door
    emptied of them was a "--- Logging error ---" traceback instead of the line."""
    caplog.set_level(logging.INFO)
    access = '%s - "%s %s HTTP/%s" %d'
    log = logging.getLogger("deckhand.unit")
    log.info(access, "127.0.0.1:5", "POST", "/mcp", "1.1", 200)
    log.info(access, "127.0.0.1:5", "GET", "/x?token=xoxb-1111111111-22222222", "1.1", 200)
    clean, secret = caplog.records[-2:]
    assert clean.args == ("127.0.0.1:5", "POST", "/mcp", "1.1", 200)
    assert isinstance(secret.args, tuple) and len(secret.args) == 5
    assert secret.getMessage() == f'127.0.0.1:5 - "GET /x?token={MASK} HTTP/1.1" 200'
    log.info("a %s", ["mutable", "xoxb-1111111111-22222222"])  # its text could change: none
    assert caplog.records[-1].args is None and MASK in caplog.records[-1].getMessage()


def test_an_unreadable_secret_file_never_makes_common_words_secret(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Issue 39.8: "SLACK_BOT_TOKEN_FILE: cannot read /run/secrets/slack_bot_token
    (Permission denied)" was logged as "SLACK_BOT_TOKEN_FILE: [REDACTED] read [REDACTED]":
    the variable's value (a path) was learned as a secret for its name, and the
    ``…TOKEN…: value`` rule took "cannot" for a token. A *_FILE variable's secret is what
    the file holds; its path and the words after its name are not."""
    readable = tmp_path / "deploy_token"
    readable.write_text("file-held-secret-123\n")
    monkeypatch.setenv("SLACK_BOT_TOKEN_FILE", "/run/secrets/slack_bot_token")  # unreadable
    monkeypatch.setenv("DEPLOY_TOKEN_FILE", str(readable))
    monkeypatch.setenv("REDIS_URL_FILE", str(tmp_path / "missing"))
    redact = Redactor.from_env()
    said = ("bad environment setting(s):\n  SLACK_BOT_TOKEN_FILE: cannot read "
            "/run/secrets/slack_bot_token (Permission denied): it is owned by uid 0\n"
            f"  DEPLOY_TOKEN_FILE={readable} token_path: /etc/x REDIS_URL_FILE: cannot read")
    assert redact(said) == said
    assert redact("deploy with file-held-secret-123") == f"deploy with {MASK}"
    assert redact("token: abc123 DEPLOY_TOKEN=abc123") == f"token: {MASK} DEPLOY_TOKEN={MASK}"


def test_a_redis_url_is_secret_for_its_password_not_its_address(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's address (``where``) was "[REDACTED]" in every banner whenever REDIS_URL
    had no password: the whole URL was the secret, though nothing in it was."""
    monkeypatch.setenv("REDIS_URL", "redis+sentinel://s1:26379,s2:26379/deckhand/0")
    assert Redactor.from_env()("store: redis+sentinel://s1:26379,s2:26379/deckhand/0") == \
        "store: redis+sentinel://s1:26379,s2:26379/deckhand/0"
    monkeypatch.setenv("REDIS_URL", "redis://:pa%2Fss-w0rd@redis:6379/0")
    redact = Redactor.from_env()
    assert redact("redis://redis:6379/0 pa/ss-w0rd pa%2Fss-w0rd") == \
        f"redis://redis:6379/0 {MASK} {MASK}"
    assert url_secrets("unix:///run/redis.sock?db=0&password=s3cret-pw") == \
        ["unix:///run/redis.sock?db=0&password=s3cret-pw", "s3cret-pw", "s3cret-pw"]
