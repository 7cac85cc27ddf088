"""The one redaction function every output passes through before it is stored, logged or posted.

Each sink has one door that calls it: the store (``agents.store._redis.RedactingRedis``),
Slack (``bot.slack.redacting.RedactingWebClient``), the model (``LLMPlanner._create``), MCP
answers (``bot.mcp.server``), the terminal (``bot.terminal.door.RedactingConsole``), exported
spans (``bot.telemetry_exporter.RedactingSpanExporter``) and log records (the record factory
below, installed when this module is imported).
"""

from __future__ import annotations

import html
import json
import logging
import os
import re
import traceback
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tools.visible import visible

MASK = "[REDACTED]"

# (cue, pattern, replacement): labels such as "password=" are kept, only the value is masked.
# A rule's regex runs only on a text whose folded form (``_fold``) holds one of its cues (a
# substring search, far cheaper than a regex scan): every store write and every output
# chunk passes here, and most hold nothing, so output is redacted at wire speed.
_RULES: list[tuple[tuple[str, ...], re.Pattern[str], str]] = [
    (("private key",), re.compile(
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S),
     MASK),
    (("xox",), re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{8,}"), MASK),   # Slack tokens
    (("xapp-",), re.compile(r"\bxapp-[A-Za-z0-9-]{8,}"), MASK),        # Slack app-level tokens
    (("sk-",), re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), MASK),          # OpenAI-style keys
    (("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),                            # GitHub tokens
     re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"), MASK),
    (("github_pat_",), re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"), MASK),
    (("glpat-",), re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"), MASK),    # GitLab tokens
    (("akia", "asia"), re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), MASK),  # AWS key ids
    (("aiza",), re.compile(r"\bAIza[0-9A-Za-z_-]{35}"), MASK),         # Google API keys
    (("k_live_", "k_test_"), re.compile(r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"), MASK),
    # Webhook URLs are credentials by themselves: whoever has one may post.
    (("hooks.slack", "webhook"), re.compile(
        r"(?i)\bhttps?://(?:hooks\.slack\.com|(?:[\w-]+\.)?discord(?:app)?\.com/api/webhooks|"
        r"[\w.-]+\.webhook\.office\.com|outlook\.office\.com/webhook)[^\s\"'<>`]{0,2048}"),
     MASK),
    (("bearer",), re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"), r"\1" + MASK),
    # A key starts at a token boundary and every repeat is bounded, so a long run of word
    # characters costs linear time (unbounded [\w.-]* on both sides was quadratic).
    # …except a key naming a file (SLACK_BOT_TOKEN_FILE: …, token_path=…): its value is a
    # path, and "SLACK_BOT_TOKEN_FILE: cannot read …" is an error message, not a secret.
    (("passw", "secret", "token", "api_key", "api-key", "apikey"), re.compile(
        r"(?i)((?<![\w.-])[\w.-]{0,64}?(?:password|passwd|secret|token|api[_-]?key)"
        r"[\w.-]{0,64}(?<![_.-]file)(?<![_.-]path)\s{0,8}[=:]\s{0,8})"
        r"(?:\"[^\"]{0,4096}\"|'[^']{0,4096}'|\S+)"),
     r"\1" + MASK),
    (("@",), re.compile(r"(://[^/\s:@]{1,256}:)[^@\s/]{1,256}@"), r"\1" + MASK + "@"),  # user:pw@
    # Signed URLs: the signature or key in the query string is the credential.
    # ``&amp;`` too: a Slack message is escaped before its door redacts it.
    (("sig", "key=", "access_token=", "code=", "auth="), re.compile(
        r"(?i)((?:[?&]|&amp;)(?:sig|signature|x-amz-signature|x-goog-signature|access_token|"
        r"code|key|auth)=)[^&#\s\"'<>]{1,2048}"), r"\1" + MASK),
]

# What a (?i) pattern treats as the same letter, where str.lower() does not: the cues are
# looked up in the text folded this way, so no text the rules would mask skips its rule.
_SRE_FOLD = str.maketrans({"\u017f": "s", "\u212a": "k", "\u0131": "i", "\u0130": "i"})


def _fold(text: str) -> str:
    """``text`` as the cues are looked up in: lower case, with re's IGNORECASE equivalences
    (long s, Kelvin sign, dotless and dotted i) as their ASCII letters."""
    return text.translate(_SRE_FOLD).lower()


# Environment variables whose values are secrets wherever they show up.
SECRET_ENV = ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET", "OPENAI_API_KEY",
              "REDIS_URL", "DECKHAND_SECRETS", "DECKHAND_MCP_TOKENS")
SECRET_NAME = re.compile(r"(?i)(?:TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|PRIVATE_?KEY|"
                         r"CREDENTIALS?|WEBHOOK)(?:_|$)")
"""Any other environment variable named like this holds a secret too (``DEPLOY_TOKEN``,
``AWS_SECRET_ACCESS_KEY``, ``ALERT_WEBHOOK_URL``): its value is masked wherever it shows."""


FILE_SUFFIX = "_FILE"
"""``NAME_FILE=/run/secrets/name``: NAME's value is in that file (``agents.secret_files``)."""
FILE_LIMIT = 64 * 1024


def file_secret(path: str) -> str:
    """The secret in the file ``path`` names (one trailing newline dropped), or "" when it
    cannot be read: the settings say why, once; the reason never becomes a secret."""
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return file.read(FILE_LIMIT).removesuffix("\n")
    except (OSError, ValueError):
        return ""


def url_secrets(url: str) -> list[str]:
    """What is secret in a connection URL (``REDIS_URL``): its password, as written and
    decoded, and the URL whole when it has one; nothing when it has none — a host, a port
    and a database number are no secret, and masking them hid the store's address from
    every banner and log line. A URL that does not parse is secret whole (fail closed)."""
    if not url:
        return []
    try:
        parts = urlsplit(url)
        query = parse_qs(parts.query)
    except ValueError:
        return [url]
    userinfo = parts.netloc.rpartition("@")[0]
    passwords = [userinfo.partition(":")[2]] + query.get("password", [])
    found = [p for p in passwords if p]
    if not found:
        return []
    return [url, *found, *(unquote(p) for p in found)]


class Redactor:
    """Masks known secret values and anything shaped like a credential."""

    def __init__(self, secrets: Iterable[str] = ()):
        self._secrets = frozenset(s for s in secrets if s and len(s) >= 6)
        # Also as Slack's mrkdwn escaping writes them (& < >): its door sees escaped text.
        values = self._secrets | {html.escape(s, quote=False) for s in self._secrets}
        self._values = sorted(values, key=lambda v: (-len(v), v))  # longest first; one order

    def including(self, other: Redactor) -> Redactor:
        """One redactor masking both's secrets: a config reload keeps masking the old
        secrets (a run still executing may print one) without chaining a redactor per
        reload — the set of values grows only by secrets never seen before."""
        return Redactor(self._secrets | other._secrets)

    @classmethod
    def from_env(cls, extra: Iterable[str] = ()) -> Redactor:
        """The environment's secrets: SECRET_ENV's (REDIS_URL's password, not its host),
        DECKHAND_SECRETS, any variable named like a secret — and, for ``NAME_FILE`` (the
        Docker secrets convention), the file's content, never its path: a path is no secret,
        and masking it (with the word before it) made "cannot read /run/secrets/x" unreadable
        exactly when an operator needs it."""
        values = [os.environ.get(name, "") for name in SECRET_ENV if name != "REDIS_URL"]
        values += url_secrets(os.environ.get("REDIS_URL", ""))
        values += os.environ.get("DECKHAND_SECRETS", "").split(",")
        for name, value in os.environ.items():
            base = name.removesuffix(FILE_SUFFIX)
            if base != name and (base in SECRET_ENV or SECRET_NAME.search(base)):
                found = file_secret(value)
                values += url_secrets(found) if base == "REDIS_URL" else [found]
            elif base == name and SECRET_NAME.search(name) and len(value) >= 8:
                values.append(value)
        return cls([*values, *extra])

    def __call__(self, text: str) -> str:
        for value in self._values:
            if value in text:
                text = text.replace(value, MASK)
        folded = _fold(text)
        for cues, pattern, replacement in _RULES:
            if any(cue in folded for cue in cues):  # else no match is possible here
                redacted = pattern.sub(replacement, text)
                if redacted != text:
                    text, folded = redacted, _fold(redacted)
        return text


redact = Redactor.from_env()
"""Default redactor built from the process environment."""


def redact_data(redact: Callable[[str], str], value: Any) -> Any:
    """Every string inside ``value`` (dicts, lists, JSON text inside strings) redacted; the
    same object back when nothing changed."""
    if isinstance(value, str):
        return redact_text(redact, value)
    if isinstance(value, dict):
        items = {k: redact_data(redact, v) for k, v in value.items()}
        return value if all(items[k] is value[k] for k in value) else items
    if isinstance(value, list | tuple):
        parts = [redact_data(redact, v) for v in value]
        return value if all(a is b for a, b in zip(parts, value, strict=True)) else parts
    return value


def redact_text(redact: Callable[[str], str], text: str) -> str:
    """``text`` redacted, keeping JSON text valid JSON: a secret escaped inside a JSON
    string (a quote, a newline of a PEM key) is found in the decoded string, and a mask
    never swallows a closing quote. The same object back when nothing changed."""
    view = _unescaped(text)  # every JSON string in it whole: no match there, none in them
    if "\\u" not in text and redact(text) == text and (view is text or redact(view) == view):
        return text
    if text[:1] in "{[":
        try:
            tree = json.loads(text)
        except ValueError:
            pass
        else:
            joined = "\n\x00\n".join(_strings(tree))  # one pass for the common clean case
            if redact(joined) == joined:
                return text
            clean = redact_data(redact, tree)
            return text if clean is tree else json.dumps(clean, ensure_ascii=False,
                                                         separators=(",", ":"))
    masked = redact(text)
    return text if masked == text else masked


def _unescaped(text: str) -> str:
    """``text`` with JSON's short escapes undone (C-speed replaces, no parse): each string
    of a JSON text appears in it whole, between quotes; any other text is unchanged in
    what a rule can match (escapes only turn two characters into one)."""
    if "\\" not in text:
        return text
    return (text.replace("\\\\", "\x00").replace("\\n", "\n").replace("\\t", "\t")
            .replace("\\r", "\r").replace('\\"', '"').replace("\\/", "/")
            .replace("\x00", "\\"))


def _strings(value: Any) -> Iterator[str]:
    """Every string (keys too) inside a decoded JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


class _Active:
    """The redactor of this process's borders that are set up before the config is read
    (log records, the terminal, exported spans): the environment's secrets at first, the
    config's too once ``activate`` is called (``build_services`` does)."""

    redactor: Callable[[str], str] = redact


def activate(redactor: Callable[[str], str]) -> None:
    """Make ``redactor`` (the config's secrets + the environment's) the process's own."""
    _Active.redactor = redactor


def active(text: str) -> str:
    """``text`` through the process's redactor (see ``activate``)."""
    return _Active.redactor(text)


def _redacted_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
    """The log door: every record is made with its message (and traceback) redacted, and
    control characters and bidi overrides written out (``tools.visible``: a log line on a
    terminal is the terminal's border too), so no handler, formatter or test capture ever
    sees the raw text."""
    record = _BASE_FACTORY(*args, **kwargs)
    try:
        message = record.getMessage()
    except (TypeError, ValueError):  # a malformed call: logging reports it when formatting
        return record
    clean = visible(active(message))
    if clean == message and _args_kept(record):
        pass  # as given: the same clean text whenever a handler formats it
    elif (redone := _redacted_args(record)) is not None:
        record.args = redone
    else:
        record.msg, record.args = clean, None
    if record.exc_info and record.exc_text is None:
        text = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        record.exc_text = visible(active(text))
    return record


def _args_kept(record: logging.LogRecord) -> bool:
    """Whether a clean record may keep its ``msg`` and ``args`` as given: formatters that
    read the arguments themselves (uvicorn's access log unpacks its five) need them, and
    ``getMessage()`` gives the same clean text again — unless an argument is a mutable
    object whose text could change between now and when a handler formats it."""
    values = record.args.values() if isinstance(record.args, dict) else record.args or ()
    return all(isinstance(v, str | int | float | bool | type(None)) for v in values)


def _redacted_args(record: logging.LogRecord) -> tuple[Any, ...] | None:
    """Each argument of a %-style record redacted, if the text they make is then clean: a
    formatter that unpacks the arguments still finds them all (one with a secret in a
    request path stays a line, not a "Logging error"). None when that is not enough."""
    if not isinstance(record.args, tuple) or not record.args or not _args_kept(record):
        return None
    args = tuple(visible(active(v)) if isinstance(v, str) else v for v in record.args)
    try:
        text = str(record.msg) % args
    except (TypeError, ValueError):
        return None
    return args if visible(active(text)) == text else None


_BASE_FACTORY = logging.getLogRecordFactory()
logging.setLogRecordFactory(_redacted_record)
