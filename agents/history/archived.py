"""Runs retention has trimmed from Redis: where they went, and reading one back from the
export file (``deckhand runs show RUN --archive FILE``)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from agents.errors import NotFound
from agents.ids import ALPHABET, TIME_CHARS, normalize
from agents.plan.model import Plan
from agents.run.record import Run


@dataclass(frozen=True)
class ArchiveNote:
    """The latest retention pass that trimmed runs: runs created before ``cutoff`` may be
    in ``export`` and no longer in Redis."""

    cutoff: float
    export: str


def created_at(run_id: str) -> float | None:
    """When a run id was made (its first characters are the millisecond), if readable."""
    body = run_id.partition("-")[2][:TIME_CHARS]
    if len(body) < TIME_CHARS or any(c not in ALPHABET for c in body):
        return None
    millis = 0
    for char in body:
        millis = millis * 32 + ALPHABET.index(char)
    return millis / 1000


def missing_run_text(typed: str, note: ArchiveNote | None) -> str | None:
    """What to say about a run Redis does not have, when retention has archived runs: that
    it was archived, and where (said plainly when its id dates it before the cutoff)."""
    if note is None:
        return None
    shown = typed.strip()
    made = created_at(normalize("run", shown))
    when = time.strftime("%Y-%m-%d", time.gmtime(note.cutoff))
    see = f"see it with: deckhand runs show {shown} --archive {note.export}"
    if made is not None and made < note.cutoff:
        return f"run {shown} was archived by retention to {note.export} and trimmed from " \
               f"Redis; {see}"
    return (f"no run {shown} in Redis; if it was created before {when}, retention archived "
            f"it to {note.export} — {see}")


def read_archived(path: Path, typed: str) -> tuple[Run, Plan]:
    """The run (whole id or unique prefix) and its plan version, from an export file."""
    wanted = normalize("run", typed)
    found: list[dict[str, object]] = []
    try:
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                if f'"{wanted}' not in line:  # cheap: most lines are other runs
                    continue
                item = json.loads(line)
                if item.get("kind") == "run" and str(item.get("id", "")).startswith(wanted):
                    found.append(item)
    except OSError as exc:
        raise NotFound(f"cannot read the archive {path} ({exc.strerror or exc}); pass the "
                       f"retention export file (retention.export in the config)") from exc
    ids = sorted({str(f["id"]) for f in found})
    if len(ids) != 1:
        raise NotFound(f"no run {typed.strip()} in {path}" if not ids else
                       f"{typed.strip()} could be any of {', '.join(ids[:5])}; type more")
    item = found[-1]
    run = Run.model_validate(item["run"])
    plans = [Plan.model_validate(p) for p in item.get("plans") or []]  # type: ignore[attr-defined]
    plan = next((p for p in plans if p.version == run.plan_version), None)
    if plan is None:
        raise NotFound(f"{path} has run {run.id} but not its plan v{run.plan_version}")
    return run, plan
