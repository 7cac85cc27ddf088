"""The planner deckhand runs: playbooks first (deterministic, no LLM), then the LLM.

The LLM half lives in ``agents.planning.llm`` and is imported only when ``OPENAI_API_KEY``
is set: the openai package is large, and workers and the demo never need it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from agents.config import Config
from agents.errors import NoPlanFound, PlannerError
from agents.plan.model import Plan
from agents.requests.phrasing import Phrasing
from agents.requests.playbooks import PlaybookPlanner
from agents.run.record import Run
from agents.settings import Settings
from tools.catalog import Catalog
from tools.redact import Redactor

if TYPE_CHECKING:
    from agents.planning.llm import LLMPlanner

log = logging.getLogger("deckhand.planner")

NO_LLM_HINT = ("Only the playbook planner is running. Set OPENAI_API_KEY (any value for a "
               "local server; OPENAI_BASE_URL and OPENAI_MODEL pick the endpoint) to plan "
               "free-form requests.")


def __getattr__(name: str) -> Any:
    """``from agents.planning.planner import LLMPlanner`` works, loading openai on first use."""
    if name in ("LLMPlanner", "RetryPolicy"):
        from agents.planning import llm

        return getattr(llm, name)
    raise AttributeError(name)


# -- after a replan -----------------------------------------------------------------------


def changes_mutating_steps(old: Plan, new: Plan, catalog: Catalog) -> bool:
    """Whether ``new`` adds, drops or changes a step that needs approval (then re-approve).

    That is every step but those of tools opted out in tools.yml (``approval: none``): a
    notification has side effects too. Unknown tools count: when unsure, ask a person.
    """
    return _mutating(old, catalog) != _mutating(new, catalog)


def _mutating(plan: Plan, catalog: Catalog) -> set[str]:
    out = set()
    for step in plan.all_steps:
        tool = catalog.tools.get(step.tool)
        if tool is None or tool.mutates or tool.approval != "none":
            body = step.model_dump(include={"id", "tool", "params", "depends_on"})
            out.add(json.dumps(body, sort_keys=True))
    return out


def explicit_choice(playbooks: PlaybookPlanner, request: str,
                    params: Mapping[str, str]) -> object | None:
    """Whether a playbook takes ``request`` once ``params`` are set (its errors say why not)."""
    from agents.requests.explicit import choose

    try:
        return choose(playbooks.playbooks, request, params, playbooks.phrasing)
    except NoPlanFound:
        return True  # a playbook fits but the params are wrong: let it say so


# -- what deckhand runs -------------------------------------------------------------------


class CompositePlanner:
    """Playbooks first (deterministic, free), then the LLM for everything else."""

    def __init__(self, playbooks: PlaybookPlanner, llm: LLMPlanner | None = None):
        self.playbooks, self.llm = playbooks, llm

    def observe_retries(self, observer: Callable[[str, str], None]) -> None:
        """Tell ``observer`` (model, reason) of every retried model call (no LLM: none)."""
        if self.llm is not None:
            self.llm.observe_retries(observer)

    def plan_with(self, request: str, *, requested_by: str, params: Mapping[str, str]) -> Plan:
        """``request`` with parameters set explicitly (``-e``): the playbook that takes them,
        else the LLM told to use exactly them (without an LLM, the playbooks say why not)."""
        if explicit_choice(self.playbooks, request, params) is not None or self.llm is None:
            return self.playbooks.plan(request, requested_by=requested_by, params=params)
        told = ", ".join(f"{k}={v}" for k, v in params.items())
        return self.plan(f"{request} (use exactly these parameters: {told})",
                         requested_by=requested_by)

    def plan(self, request: str, *, requested_by: str) -> Plan:
        """The playbook plan if one matches, else the LLM's.

        Raises:
            NoPlanFound: no playbook matches and there is no LLM (the message says how to
                enable it), or the LLM declined.
            PlannerError: the LLM failed; the message also lists what playbooks can do.
        """
        if self.playbooks.match(request) is not None:
            return self.playbooks.plan(request, requested_by=requested_by)
        help_text = self.playbooks.help_text(request)
        if self.llm is None:
            raise NoPlanFound(f"{help_text}\n{NO_LLM_HINT}")
        try:
            return self.llm.plan(request, requested_by=requested_by)
        except NoPlanFound as exc:
            raise NoPlanFound(f"{exc}\n{help_text}") from exc
        except PlannerError as exc:  # its class says what failed: kept for the audit, eval
            raise exc.with_note(help_text) from exc

    def modify(self, plan: Plan, instruction: str, *, requested_by: str) -> Plan:
        """A new version of ``plan``; needs the LLM (playbooks say so otherwise)."""
        if self.llm is None:
            return self.playbooks.modify(plan, instruction, requested_by=requested_by)
        return self.llm.modify(plan, instruction, requested_by=requested_by)

    def replan(self, plan: Plan, run: Run, *, requested_by: str) -> Plan | None:
        """Revised remaining steps after a failure, or None to roll back (always, without LLM)."""
        if self.llm is None:
            return None
        return self.llm.replan(plan, run, requested_by=requested_by)


def build_planner(config: Config, settings: Settings) -> CompositePlanner:
    """The planner for this deployment: playbooks, plus the LLM when OPENAI_API_KEY is set."""
    redact = Redactor.from_env([*config.secrets, *settings.secret_values()])
    playbooks = PlaybookPlanner(config.playbooks, redact=redact,
                                phrasing=Phrasing.of(config.inventory.environments))
    if settings.openai_api_key is None:
        log.info("OPENAI_API_KEY is not set; planning with playbooks only")
        return CompositePlanner(playbooks)
    from agents.planning.llm import LLMPlanner

    llm = LLMPlanner.from_settings(config, settings)
    log.info("planning with playbooks, then %s at %s", llm.model, llm.endpoint)
    return CompositePlanner(playbooks, llm)
