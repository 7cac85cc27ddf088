"""The container health check: ``python -m bot.healthcheck [PORT]`` (stdlib only, so a
probe every 30 s costs milliseconds, not a CLI start).

GETs ``/healthz`` where the process says it answers: ``deckhand serve --http`` on its HTTP
port, ``deckhand worker`` on its ``--metrics-port`` (503 with the reason when its loop is
stuck). Each writes that URL, once it listens, to ``$DECKHAND_HEALTH_FILE`` (the image sets
it), so the check follows ``PORT``, ``--port`` and ``--metrics-port`` wherever the operator
changed them — a port written into the check went unhealthy while ``/healthz`` answered 200
on the port actually configured. Without the file: the PORT argument, else ``$PORT``, else
3000. Exit 0 when healthy; else 1 with the reason on stderr, which ``docker inspect`` shows.
"""

from __future__ import annotations

import contextlib
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping

HEALTH_FILE = "DECKHAND_HEALTH_FILE"


def check(url: str, *, timeout: float = 4.0) -> str | None:
    """None when ``url`` answers 200; else why not."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return None if response.status == 200 else f"{url}: HTTP {response.status}"
    except urllib.error.HTTPError as exc:
        return f"{url}: HTTP {exc.code} {exc.read(500).decode(errors='replace')}"
    except OSError as exc:
        return f"{url}: {exc}"


def probe_url(host: str, port: int) -> str:
    """Where a probe on the same machine reaches a server bound to ``host``:``port``."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/healthz"


def advertise(host: str, port: int, path: str | None) -> str | None:
    """Write the /healthz URL of a server now listening on ``host``:``port`` to ``path``
    (``$DECKHAND_HEALTH_FILE``; nothing when unset). Returns why it could not be written,
    for the caller to log (the check then says the file is missing)."""
    if not path:
        return None
    fresh = f"{path}.{os.getpid()}"
    try:
        with open(fresh, "w", encoding="utf-8") as out:
            out.write(probe_url(host, port) + "\n")
        os.replace(fresh, path)  # a probe never reads half a URL
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(fresh)
        return (f"cannot write {HEALTH_FILE}={path} ({exc.strerror or exc}): the "
                f"container's health check will not find /healthz")
    return None


def withdraw(path: str | None) -> None:
    """Remove the health file at exit (a later probe then says so, not "refused")."""
    if path:
        with contextlib.suppress(OSError):
            os.unlink(path)


def target(argv: list[str], env: Mapping[str, str]) -> tuple[str | None, str]:
    """(the URL to probe, or None) and, without one, why."""
    if argv:
        return probe_url("127.0.0.1", int(argv[0])), ""
    path = env.get(HEALTH_FILE)
    if not path:
        return probe_url("127.0.0.1", int(env.get("PORT", "3000"))), ""
    try:
        with open(path, encoding="utf-8") as file:
            url = file.readline().strip()
    except OSError as exc:
        return None, (f"{HEALTH_FILE}={path}: {exc.strerror or exc} (deckhand writes it once "
                      f"/healthz listens: `serve --http`, `worker --metrics-port`)")
    return (url, "") if url.startswith("http") else (None, f"{path}: no URL in it")


def main(argv: list[str]) -> int:
    url, why = target(argv, os.environ)
    problem = check(url) if url is not None else why
    if problem is not None:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
