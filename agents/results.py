"""What a finished read-only step printed, as one bounded text every face can show.

A status request is asked for its output: ``✓ SUCCEEDED`` alone answers nothing. The
tails are already redacted by the executor; this only joins them per host and bounds them.
"""

from __future__ import annotations

from agents.runs import Run

MAX_CHARS = 3000
"""Enough for a status of a few dozen hosts; longer output keeps its end."""


def step_output(run: Run, *, max_chars: int = MAX_CHARS) -> str:
    """Every step's output, host by host (``[host]`` headers when several), bounded."""
    parts: list[str] = []
    for state in run.steps.values():
        hosts = sorted(state.hosts.values(), key=lambda h: h.host)
        for host in hosts:
            text = host.tail.strip()
            if not text:
                continue
            parts.append(f"[{host.host}]\n{text}" if len(hosts) > 1 else text)
    return bound("\n".join(parts), max_chars)


def bound(text: str, max_chars: int) -> str:
    """``text`` cut to its last ``max_chars`` characters, saying that it was cut."""
    if len(text) <= max_chars:
        return text
    note = "…(earlier output cut)\n"
    return note + text[-(max_chars - len(note)):]
