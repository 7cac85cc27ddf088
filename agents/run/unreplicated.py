"""What a run record says about writes no Redis replica confirmed (``meta.unreplicated``),
in one line every face shows: a failover could have lost those writes; and the start that
waits for a replica now (``Run.replica_wait``), in one line too."""

from __future__ import annotations

import time

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


def replica_wait_line(run: Run) -> str | None:
    """"waiting for a Redis replica to confirm …" while a start waits for one (None when
    none does): the live status of every face."""
    wait = run.replica_wait
    if wait is None:
        return None

    def hms(at: float) -> str:
        return time.strftime("%H:%M:%S", time.gmtime(at))

    return (f"waiting for a Redis replica to confirm {wait.what} (since {hms(wait.since)}, "
            f"until {hms(wait.until)} UTC at most)")
