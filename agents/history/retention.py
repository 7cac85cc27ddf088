"""How long finished runs, audit entries and deploy history are kept: the ``retention``
section of the config and the ages people type (``90d``). The job that trims is
``agents.engine.retention``."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from agents.errors import RetentionError
from agents.history.deploys import DAY

AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([dhw]?)\s*$")
UNITS = {"": DAY, "d": DAY, "h": 3600.0, "w": 7 * DAY}


class RetentionSettings(BaseModel):
    """The ``retention`` section of the config."""

    model_config = ConfigDict(extra="forbid")

    days: float = Field(ge=1, description="finished runs and audit entries older than this "
                                          "are exported, then trimmed")
    export: str = Field(min_length=1, description="the JSONL file they are appended to first "
                                                  "(relative: to the config file)")
    every_hours: float = Field(default=24.0, ge=0, description="how often a worker runs it "
                                                                "(0: only `deckhand retention`)")


def parse_age(text: str) -> float:
    """Seconds in ``90d``, ``36h``, ``2w`` or ``90`` (days); RetentionError otherwise."""
    found = AGE.match(text)
    if not found or float(found[1]) <= 0:
        raise RetentionError(f"--older-than {text!r}: give an age like 90d, 36h or 2w")
    return float(found[1]) * UNITS[found[2]]
