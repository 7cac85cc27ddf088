"""``deckhand check`` on the LLM planner: whether its largest prompt fits the endpoint's
context (``planner.context_tokens``), and — with OPENAI_API_KEY — whether the endpoint
answers and serves the model, asked once (its model list, else a one-token call).

A wrong model name or a prompt that cannot fit is a problem (exit 1); an endpoint that does
not answer is a warning, as an unreachable Prometheus is for gates (``check`` runs on laptops
too).
"""

from __future__ import annotations

from agents.config import Config
from agents.errors import ModelNotServed, ModelRejected, PlannerError
from agents.settings import Settings

PROBE_TIMEOUT = 10.0
"""Seconds the endpoint gets to answer ``check`` (a loaded local server answers /models fast
even while it generates)."""


def planner_findings(configs: list[Config], settings: Settings
                     ) -> tuple[list[str], list[str]]:
    """(problems, notes), a line each."""
    from agents.planning.prompt import TOOLS_IN_FULL, estimate_tokens, largest_plan_prompt

    endpoint = configs[0].planner.over(settings)  # organisation-wide: one endpoint
    problems, notes = [], []
    for config in configs:
        of = f"{config.name}: " if len(configs) > 1 else ""
        prompt = largest_plan_prompt(config)
        tokens, budget = estimate_tokens(prompt), endpoint.max_tokens
        size = (f"{of}planner prompt: up to {len(prompt):,} characters, about {tokens:,} "
                f"tokens, plus {budget:,} for the answer (planner.max_tokens)")
        if len(config.catalog.tools) > TOOLS_IN_FULL:
            size += (f" (all {len(config.catalog.tools)} tools, sent only when a request "
                     f"names none; otherwise at most {TOOLS_IN_FULL} it names)")
        if endpoint.context_tokens is None:
            notes.append(f"{size}; set planner.context_tokens to have it checked against the "
                         f"model's context")
        elif tokens + budget > endpoint.context_tokens:
            problems.append(f"{size}: more than planner.context_tokens "
                            f"{endpoint.context_tokens:,}. The model would see a cut prompt "
                            f"or refuse it: lower planner.max_tokens, split the tools into "
                            f"services, or use a model with a longer context")
        else:
            notes.append(f"{size}: fits planner.context_tokens {endpoint.context_tokens:,}")
    return _probe(configs[0], settings, problems, notes)


def _probe(config: Config, settings: Settings, problems: list[str], notes: list[str]
           ) -> tuple[list[str], list[str]]:
    if settings.openai_api_key is None:
        notes.append("planner: playbooks only (no OPENAI_API_KEY); no model endpoint asked")
        return problems, notes
    from agents.planning.llm import LLMPlanner

    planner = LLMPlanner.from_settings(config, settings)
    planner.client = planner.client.with_options(
        timeout=min(PROBE_TIMEOUT, config.planner.over(settings).timeout or PROBE_TIMEOUT))
    try:
        notes.append(f"planner: {planner.probe()}")
    except (ModelNotServed, ModelRejected) as exc:
        problems.append(f"planner: {exc}")
    except PlannerError as exc:
        notes.append(f"warning: planner: {exc}")
    return problems, notes
