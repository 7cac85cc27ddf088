"""What delivery figures (DORA) need of a deploy, kept small: one short member per deploy in
a second time-scored index beside the history, so ``stats`` over a month of a busy team's
deploys reads tens of bytes per deploy instead of parsing each whole record."""

from __future__ import annotations

import json
from dataclasses import dataclass

from agents.history import Deploy
from agents.runs import RunStatus

SEP = "\x1f"
"""ASCII unit separator between a fact's fields; the version is JSON (it may be anything)."""


@dataclass(frozen=True, slots=True)
class DeployFact:
    """The fields of a Deploy that ``agents.history.stats`` reads."""

    run_id: str
    environment: str
    version: str | None
    outcome: str
    finished_at: float
    rollback_of_version: bool

    @property
    def failed(self) -> bool:
        return self.outcome != RunStatus.SUCCEEDED.value

    @property
    def took_effect(self) -> bool:
        return self.outcome == RunStatus.SUCCEEDED.value


def fact_member(deploy: Deploy) -> str:
    """The index member of ``deploy`` (its score is ``finished_at``)."""
    return SEP.join([deploy.run_id, deploy.outcome.value, "1" if deploy.rollback_of_version
                     else "0", json.dumps(deploy.version)])


def read_fact(member: bytes | str, environment: str, finished_at: float) -> DeployFact:
    text = member.decode() if isinstance(member, bytes) else member
    run_id, outcome, rollback, version = text.split(SEP, 3)
    return DeployFact(run_id, environment, _version(version), outcome, finished_at,
                      rollback == "1")


def _version(encoded: str) -> str | None:
    if encoded.startswith('"') and "\\" not in encoded:
        return encoded[1:-1]  # the common case, without a JSON parse
    value = json.loads(encoded)
    return None if value is None else str(value)
