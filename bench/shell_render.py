"""What delivering values as variables costs per command, against the shlex-quoted
concatenation it replaced (the peer, measured in the same run), plus the one-time parse.

    python -m bench.shell_render
"""

from __future__ import annotations

import shlex
import string
import time
from collections.abc import Callable

from tools.shell import parse

TEMPLATE = ("set -e\ncd {host.dir}\n./bin/deploy.sh --version={version} --artifact {artifact}\n"
            "cat > {host.dir}/NOTE <<EOF\ndeployed {version} by {user}\nEOF")
VALUES = {"host.dir": "/srv/app", "version": "v2.3.1", "artifact": "build/app-v2.3.1.tar.gz",
          "user": "alice"}
ROUNDS = 20_000


def shlex_peer() -> str:
    return "".join(lit + (shlex.quote(VALUES[f]) if f is not None else "")
                   for lit, f, _, _ in string.Formatter().parse(TEMPLATE))


def variables() -> str:
    return parse(TEMPLATE).fill(VALUES).source


def per_call(fn: Callable[[], str]) -> float:
    started = time.perf_counter()
    for _ in range(ROUNDS):
        fn()
    return (time.perf_counter() - started) / ROUNDS


def main() -> None:
    started = time.perf_counter()
    parse.__wrapped__(TEMPLATE)  # type: ignore[attr-defined]  # uncached: the load cost
    first = time.perf_counter() - started
    peer, ours = per_call(shlex_peer), per_call(variables)
    print(f"parse once (at config load): {first * 1e6:.0f} µs")
    print(f"render per command: shlex peer {peer * 1e6:.1f} µs, variables {ours * 1e6:.1f} µs "
          f"({ours / peer:.2f}x the peer)")


if __name__ == "__main__":
    main()
