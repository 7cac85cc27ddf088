"""What a run record says about writes no Redis replica confirmed (``meta.unreplicated``),
in one line every face shows: a failover could have lost those writes."""

from __future__ import annotations

from agents.run.record import Run


def unreplicated_writes(run: Run) -> list[str]:
    """The writes of this run no replica confirmed in time (approval, end, …), in order."""
    found = run.meta.get("unreplicated")
    return [str(w) for w in found] if isinstance(found, list) else []


def unreplicated_note(run: Run) -> str | None:
    """One plain line for faces, or None when every write was confirmed."""
    writes = unreplicated_writes(run)
    if not writes:
        return None
    return (f"not confirmed by a Redis replica: {', '.join(writes)} — a failover could "
            f"have lost {'it' if len(writes) == 1 else 'them'}; check this run's record "
            f"and INFO replication")
