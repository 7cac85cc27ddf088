"""From ``REDIS_URL`` to a client: plain, TLS, unix socket, or through Sentinel.

Sentinel URLs name every sentinel and the monitored service::

    redis+sentinel://[[user]:password@]host:port[,host:port…]/SERVICE[/DB]
    rediss+sentinel://…          (TLS to the sentinels and to the primary)

The password (and user) authenticate to the Redis servers; sentinels that require their own
password take ``DECKHAND_SENTINEL_PASSWORD``. Connection errors, a primary that was demoted
(``READONLY``) and "no primary yet" during a failover are retried with bounded backoff, so a
failover is an outage deckhand rides through, not an error it reports. Refused credentials
and an untrusted certificate are not retried: waiting cannot fix them.

TLS (``rediss://``) always verifies the server's certificate and name. A private CA is
given in the URL, for plain and Sentinel URLs alike: ``?ssl_ca_certs=/etc/deckhand/ca.pem``
(and ``ssl_certfile`` / ``ssl_keyfile`` for a client certificate). Asking to turn
verification off (``ssl_cert_reqs=none``, ``ssl_check_hostname=false``) is refused.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry
from redis.sentinel import (
    MasterNotFoundError,
    Sentinel,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)

from agents.errors import StoreError

PLAIN_SCHEMES = ("redis", "rediss", "unix")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
RETRY_ON = [redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError]
EXAMPLE = "redis://host:6379/0 or redis+sentinel://s1:26379,s2:26379/mymaster/0"
TLS_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
VERIFY_ON = {"ssl_cert_reqs": ("required",), "ssl_check_hostname": ("true", "1", "yes")}
"""TLS options a URL may carry only with these values: verification is never turned off."""
T = TypeVar("T")


@dataclass(frozen=True)
class SentinelTarget:
    """A parsed Sentinel URL."""

    sentinels: list[tuple[str, int]]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: bool = False
    tls_files: dict[str, str] = field(default_factory=dict)


FAILOVER_SECONDS = 10.0
"""How long one command may wait for a primary through Sentinel before it fails: long
enough to ride through a failover, short enough that a CLI command with every sentinel
down ends within 15 s, start-up included."""


MAX_CONNECTIONS = 10_000
"""Connections one client may open. redis-py 7+ caps a pool at 100 and fails the 101st
("Too many connections"): a fan-out holds one per host thread at once, so 500 hosts lost
hosts to it. The server's own ``maxclients`` (10,000 by default) is the limit instead."""


def connect_client(url: str, *, failover_seconds: float = FAILOVER_SECONDS) -> redis.Redis:
    """A client for ``url`` that rides out a restart or a failover (StoreError if malformed)."""
    scheme = urlsplit(url).scheme
    sentinel = scheme in SENTINEL_SCHEMES  # a failover takes seconds; a restart, less
    retries = _retries(failover_seconds) if sentinel else 6
    retry = TransientRetry(ExponentialBackoff(cap=0.5, base=0.05), retries=retries,
                           budget=failover_seconds if sentinel else None)
    options = {"retry": retry, "socket_timeout": 5, "socket_connect_timeout": 5,
               "retry_on_error": RETRY_ON, "max_connections": MAX_CONNECTIONS}
    if sentinel:
        target = parse_sentinel_url(url)
        # redis-py's sentinel module is untyped; master_for returns a redis.Redis
        sentinels = Sentinel(target.sentinels,  # type: ignore[no-untyped-call]
                             sentinel_kwargs=_sentinel_auth(target), socket_timeout=2,
                             socket_connect_timeout=2, ssl=target.tls, **target.tls_files)
        connection = ClosingSentinelSSLConnection if target.tls else ClosingSentinelConnection
        client: redis.Redis = sentinels.master_for(  # type: ignore[no-untyped-call]
            target.service, db=target.db, username=target.username,
            password=target.password, **target.tls_files, connection_class=connection,
            **options)
        return client
    if scheme not in PLAIN_SCHEMES:
        raise StoreError(f"REDIS_URL: unknown scheme {scheme or '(none)'!r}; use {EXAMPLE}")
    tls_files(url)
    try:
        return redis.Redis.from_url(url, **options)
    except ValueError as exc:
        raise StoreError(f"REDIS_URL is malformed ({exc}); use {EXAMPLE}") from exc


def tls_files(url: str) -> dict[str, str]:
    """The TLS files a URL names (each must be a readable file); StoreError for a TLS
    option on a URL without TLS, or one that would turn verification off."""
    parts = urlsplit(url)
    query = {name: values[-1] for name, values in parse_qs(parts.query).items()}
    for name, allowed in VERIFY_ON.items():
        if name in query and query[name].lower() not in allowed:
            raise StoreError(f"REDIS_URL: {name}={query[name]} would turn off certificate "
                             f"verification, which deckhand always does; give the CA that "
                             f"signed the server's certificate with ssl_ca_certs=/path/ca.pem")
    files = {name: query[name] for name in TLS_FILES if name in query}
    tls = parts.scheme.startswith("rediss")
    if (files or any(name in query for name in VERIFY_ON)) and not tls:
        raise StoreError(f"REDIS_URL: TLS options need a TLS URL: use rediss:// (got "
                         f"{safe_url(url)})")
    for name, path in files.items():
        if not os.access(path, os.R_OK) or not Path(path).is_file():
            raise StoreError(f"REDIS_URL: {name}={path} is not a readable file")
    return files


def untrusted_certificate(exc: BaseException) -> bool:
    """Whether connecting failed because the server's certificate was not trusted."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError) \
                or "CERTIFICATE_VERIFY_FAILED" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


_DEADLINE = threading.local()


class TransientRetry(Retry):
    """redis-py's retry, except for failures waiting cannot fix: refused credentials and
    an untrusted certificate are raised at once. With a ``budget``, no attempt starts that
    could not end within that many seconds of the first (attempts against dead sentinels
    take seconds each: a count alone let one command wait minutes)."""

    def __init__(self, backoff: ExponentialBackoff, *, retries: int,
                 budget: float | None = None):
        super().__init__(backoff, retries)
        self.budget = budget

    def call_with_retry(self, do: Callable[[], T], fail: Callable[..., Any],
                        is_retryable: Callable[[Exception], bool] | None = None,
                        with_failure_count: bool = False) -> T:
        # redis-py nests retries (a command's retry around a connect's): one deadline,
        # set by the outermost call on this thread, bounds them all
        outer = getattr(_DEADLINE, "at", None)
        if outer is None and self.budget is not None:
            _DEADLINE.at = time.monotonic() + self.budget
        last = time.monotonic()
        refused: list[Exception] = []

        def retryable(error: Exception) -> bool:
            nonlocal last
            now = time.monotonic()
            took, last = now - last, now
            deadline = getattr(_DEADLINE, "at", None)
            if isinstance(error, redis.AuthenticationError) or untrusted_certificate(error) \
                    or (deadline is not None and now + took + 0.5 > deadline):
                refused.append(error)  # ours to refuse: the connection is closed below
                return False
            return is_retryable is None or is_retryable(error)

        try:
            return super().call_with_retry(do, fail, retryable, with_failure_count)
        except Exception as error:
            if error in refused:
                _close(fail, error, with_failure_count)
            raise
        finally:
            if outer is None:
                _DEADLINE.at = None


def _close(fail: Callable[..., Any], error: Exception, with_failure_count: bool) -> None:
    """What redis-py's retry does on a failure it will retry: close the connection (its
    ``fail`` handler). redis-py skips it when the retry is refused, and a connection whose
    reply was never read then goes back to the pool: the next command on it reads the old
    reply (a GET answered with an XREAD's list). The handler's own error is not ours to
    raise; the original one is."""
    with contextlib.suppress(Exception):
        fail(error, 1) if with_failure_count else fail(error)


class _ClosedOnReadErrors:
    """redis-py's Sentinel connections, closed when a reply cannot be read (a timeout, a
    dropped link) as every other redis-py connection is: upstream leaves them open
    (``disconnect_on_error=False``, redis/redis-py#4292), so the unread reply answers the
    next command sent on it."""

    def read_response(self, *args: Any, disconnect_on_error: bool = True,
                      **kwargs: Any) -> Any:
        return super().read_response(  # type: ignore[misc]
            *args, disconnect_on_error=disconnect_on_error, **kwargs)


class ClosingSentinelConnection(  # type: ignore[misc]  # a wider signature
        _ClosedOnReadErrors, SentinelManagedConnection):
    pass


class ClosingSentinelSSLConnection(  # type: ignore[misc]
        _ClosedOnReadErrors, SentinelManagedSSLConnection):
    pass


def promotable_replicas(client: redis.Redis) -> int:
    """Replicas Sentinel could promote if the primary died now (0 for a client not through
    Sentinel): up as Sentinel sees them, with a promotable priority, and not cut off from
    the primary too long for Sentinel to choose them. One cut off from it a moment ago is
    counted — the primary no longer does, yet Sentinel would promote it without what was
    written since. If no sentinel answers, one is assumed (fail closed: wait for it)."""
    pool = client.connection_pool
    manager, service = getattr(pool, "sentinel_manager", None), getattr(pool, "service_name", "")
    if manager is None:
        return 0
    for sentinel in manager.sentinels:
        try:
            replicas = sentinel.sentinel_slaves(service)
        except redis.RedisError:
            continue
        return sum(1 for replica in replicas if _promotable(replica))
    return 1


def _promotable(replica: dict[str, Any]) -> bool:
    """Sentinel's own choice (sentinelSelectSlave), less what depends on the failover's
    timing: a link to the primary down ten times down-after is never chosen."""
    if replica.get("is_sdown") or replica.get("is_odown") or replica.get("is_disconnected"):
        return False
    if replica.get("slave-priority") == 0:
        return False
    link_down = int(replica.get("master-link-down-time") or 0)
    return link_down <= 10 * int(replica.get("down-after-milliseconds") or 0)


def parse_sentinel_url(url: str) -> SentinelTarget:
    """The sentinels, service and credentials of a ``redis+sentinel://`` URL."""
    parts = urlsplit(url)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    path = [p for p in parts.path.split("/") if p]
    if not hosts or not path or len(path) > 2:
        raise StoreError(f"REDIS_URL: a Sentinel URL names the sentinels and the service, like "
                         f"redis+sentinel://s1:26379,s2:26379/mymaster/0 (got {safe_url(url)})")
    return SentinelTarget(sentinels=[_host_port(h, url) for h in hosts.split(",")],
                          service=path[0], db=_db(path[1] if len(path) > 1 else "0", url),
                          username=unquote(user) or None, password=unquote(password) or None,
                          tls=parts.scheme.startswith("rediss"), tls_files=tls_files(url))


def _host_port(text: str, url: str) -> tuple[str, int]:
    host, _, port = text.strip().rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise StoreError(f"REDIS_URL: {text!r} is not host:port (in {safe_url(url)})")
    return host.strip("[]"), int(port)


def _db(text: str, url: str) -> int:
    if not text.isdigit():
        raise StoreError(f"REDIS_URL: database {text!r} is not a number (in {safe_url(url)})")
    return int(text)


def _sentinel_auth(target: SentinelTarget) -> dict[str, object]:
    password = os.environ.get("DECKHAND_SENTINEL_PASSWORD")
    # each sentinel is asked once per attempt: the client's retry (above) paces attempts
    auth: dict[str, object] = {"socket_timeout": 2, "socket_connect_timeout": 2,
                               "retry": Retry(NoBackoff(), 0), "ssl": target.tls,
                               **target.tls_files}
    if password:
        auth["password"] = password
    return auth


def _retries(seconds: float) -> int:
    """Backoff steps (0.05 s doubling, capped at 0.5 s) that add up to about ``seconds``."""
    return max(6, int(seconds / 0.5) + 3)


def sentinel_failure(exc: BaseException, url: str) -> str | None:
    """One line for "no sentinel named a primary", naming the sentinels tried (redis-py's
    own message lists each sentinel's exception), else None."""
    if not isinstance(exc, MasterNotFoundError) or urlsplit(url).scheme not in SENTINEL_SCHEMES:
        return None
    target = parse_sentinel_url(url)
    tried = ", ".join(f"{h}:{p}" for h, p in target.sentinels)
    return (f"no Redis Sentinel named a primary for service {target.service!r} in time "
            f"(tried {tried}: unreachable, or none monitors that service); "
            f"nothing was changed — check REDIS_URL and that the sentinels are running")


def safe_url(url: str) -> str:
    """``url`` without its credentials, for messages."""
    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{hosts}{parts.path}"
