"""Redaction and line splitting stay linear: time per MB for growing line lengths.

    python -m bench.output_redaction

Prints, for one long line of N KB (a single word, the worst case for the old pattern),
the time to redact it and the ratio to the 16 KB case; linear means the ratio tracks N/16.
"""

from __future__ import annotations

import time

from tools.redact import Redactor
from tools.runners.base import OutputCollector


def _time(call: object, *args: object, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        call(*args)  # type: ignore[operator]
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    redact = Redactor(["some-configured-secret"])
    base = _time(redact, "a" * 16 * 1024)
    for kb in (16, 64, 256, 1024):
        took = _time(redact, "a" * kb * 1024)
        print(f"redact one {kb:>5} KB line: {took * 1000:8.2f} ms  "
              f"ratio to 16 KB {took / base:6.1f} (linear: {kb / 16:.0f})")
    collector = OutputCollector(lambda line: None)
    chunk = b"x" * 32768
    started = time.perf_counter()
    for _ in range(3200):  # 100 MB without a newline
        collector.feed(chunk)
    took = time.perf_counter() - started
    print(f"split 100 MB with no newline: {took:.2f} s ({100 / took:.0f} MB/s)")


if __name__ == "__main__":
    main()
