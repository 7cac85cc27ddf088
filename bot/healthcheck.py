"""The container health check: ``python -m bot.healthcheck [PORT]`` (stdlib only, so a
probe every 30 s costs milliseconds, not a CLI start).

GETs ``http://127.0.0.1:PORT/healthz`` (PORT: the argument, else ``$PORT``, else 3000):
``deckhand serve --http`` answers on its HTTP port, ``deckhand worker`` on its
``--metrics-port`` (503 with the reason when its loop is stuck). Exit 0 when healthy; else
1 with the reason on stderr, which ``docker inspect`` shows.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request


def check(port: int, *, timeout: float = 4.0) -> str | None:
    """None when /healthz answers 200; else why not."""
    url = f"http://127.0.0.1:{port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return None if response.status == 200 else f"{url}: HTTP {response.status}"
    except urllib.error.HTTPError as exc:
        return f"{url}: HTTP {exc.code} {exc.read(500).decode(errors='replace')}"
    except OSError as exc:
        return f"{url}: {exc}"


def main(argv: list[str]) -> int:
    port = int(argv[0]) if argv else int(os.environ.get("PORT", "3000"))
    problem = check(port)
    if problem is not None:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
