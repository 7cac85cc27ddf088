"""What delivery figures (DORA) need of a deploy, kept small: one short member per deploy in
a second time-scored index beside the history, so ``stats`` over a month of a busy team's
deploys reads tens of bytes per deploy instead of parsing each whole record."""

from __future__ import annotations

import json
from dataclasses import dataclass

from agents.history.deploys import Deploy
from agents.run.record import RunStatus

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
    """The index member of ``deploy`` (scored by ``finished_at``, which it also carries: a
    read then needs no scores, half the reply's elements)."""
    return SEP.join([repr(deploy.finished_at), deploy.run_id, deploy.outcome.value,
                     "1" if deploy.rollback_of_version else "0", json.dumps(deploy.version)])


def read_facts(members: list[bytes], environment: str) -> list[DeployFact]:
    """The facts of index members, in their order."""
    out = []
    for member in members:
        at, run_id, outcome, rollback, version = member.decode().split(SEP, 4)
        out.append(DeployFact(run_id, environment, _version(version), outcome, float(at),
                              rollback == "1"))
    return out


def _version(encoded: str) -> str | None:
    if encoded[:1] == '"' and "\\" not in encoded:
        return encoded[1:-1]  # the common case, without a JSON parse
    value = json.loads(encoded)
    return None if value is None else str(value)
