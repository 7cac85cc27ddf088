"""Planner configurations to evaluate: ``PLANNER[:key=value,...]`` specs, and building them.

    playbook                          the playbooks alone (no model)
    llm:model=gpt-4o-mini             the LLM alone, on that model
    composite                         what deckhand runs: playbooks, then the LLM
    llm:model=m1,price_in=0.15,price_out=0.6     with prices per 1K tokens

Unset keys come from the command line (``--model``, ``--price-in``, ``--price-out``) and the
environment (OPENAI_MODEL). An LLM planner's openai client gets a :class:`ModelTraffic`
transport, so the same code evaluates live, records, or replays with no network.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.config import Config
from agents.errors import EvaluationError
from agents.plan.model import Plan
from agents.planning.planner import CompositePlanner
from agents.requests.phrasing import Phrasing
from agents.requests.playbooks import PlaybookPlanner
from agents.settings import Settings
from tools.redact import Redactor

if TYPE_CHECKING:
    from agents.evaluation.recording import ModelTraffic
    from agents.planning.llm import LLMPlanner

PLANNERS = ("playbook", "llm", "composite")
REPLAY_URL = "https://replay.invalid/v1"
"""Base URL of a replay without OPENAI_BASE_URL: never contacted, only names paths."""

PlanFn = Callable[[str], Plan]


@dataclass(frozen=True)
class PlannerSpec:
    """One planner configuration. A new key (a prompt file, say) is one more field here."""

    planner: str
    model: str | None = None
    price_in: float | None = None
    price_out: float | None = None

    @property
    def uses_model(self) -> bool:
        return self.planner != "playbook"

    @property
    def label(self) -> str:
        return f"{self.planner} ({self.model})" if self.uses_model else self.planner

    def cost(self, input_tokens: int, output_tokens: int) -> float | None:
        """Dollars for these tokens, or None without both prices."""
        if self.price_in is None or self.price_out is None:
            return None
        return input_tokens / 1000 * self.price_in + output_tokens / 1000 * self.price_out


def parse_spec(text: str, defaults: PlannerSpec) -> PlannerSpec:
    """``PLANNER[:key=value,...]`` over ``defaults`` (whose planner is ignored).

    Raises:
        EvaluationError: unknown planner or key, or a value of the wrong type.
    """
    name, _, rest = text.strip().partition(":")
    if name not in PLANNERS:
        raise EvaluationError(f"unknown planner {name!r} in {text!r}; use one of "
                              f"{', '.join(PLANNERS)}, e.g. llm:model=gpt-4o-mini")
    values: dict[str, Any] = {}
    keys = {f.name: f for f in fields(PlannerSpec) if f.name != "planner"}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in keys:
            raise EvaluationError(f"{item!r} in {text!r}: expected key=value with key one of "
                                  f"{', '.join(keys)}")
        values[key.strip()] = _typed(key.strip(), value.strip(), text)
    spec = replace(defaults, planner=name, **values)
    return spec if spec.uses_model else replace(spec, model=None)


def _typed(key: str, value: str, text: str) -> str | float:
    if key == "model":
        if not value:
            raise EvaluationError(f"empty model in {text!r}")
        return value
    try:
        price = float(value)
    except ValueError:
        price = -1.0
    if price < 0:
        raise EvaluationError(f"{key}={value!r} in {text!r}: a price is a number of dollars "
                              f"per 1K tokens, like 0.15")
    return price


@dataclass
class Subject:
    """A configuration ready to plan: how it plans, and its model traffic (None: no model)."""

    spec: PlannerSpec
    plan: PlanFn
    traffic: ModelTraffic | None = None

    def close(self) -> None:
        if self.traffic is not None:
            self.traffic.close()


@dataclass(frozen=True)
class ModelSetup:
    """How LLM configurations reach their model: live, recording answers to ``record``, or
    replaying them from ``replay``; and the planner's budget."""

    record: Path | None = None
    replay: Path | None = None
    llm_options: dict[str, Any] = field(default_factory=dict)
    """Passed to LLMPlanner (max_tokens, max_repairs)."""


def build_subject(spec: PlannerSpec, config: Config, settings: Settings,
                  recordings: ModelSetup) -> Subject:
    """The plan function for ``spec`` (LLMs get a ModelTraffic transport).

    Raises:
        EvaluationError: an LLM planner without OPENAI_API_KEY and without --replay.
    """
    redact = Redactor.from_env([*config.secrets, *settings.secret_values()])
    books = PlaybookPlanner(config.playbooks, redact=redact,
                            phrasing=Phrasing.of(config.inventory.environments))
    if not spec.uses_model:
        return Subject(spec, lambda request: books.plan(request, requested_by="eval"))
    llm, traffic = _llm(spec, config, settings, recordings, redact)
    planner = llm if spec.planner == "llm" else CompositePlanner(books, llm)
    return Subject(spec, lambda request: planner.plan(request, requested_by="eval"), traffic)


def _llm(spec: PlannerSpec, config: Config, settings: Settings, recordings: ModelSetup,
         redact: Redactor) -> tuple[LLMPlanner, ModelTraffic]:
    """An LLMPlanner on a real openai client whose transport is ModelTraffic."""
    import openai  # only LLM evaluations load the openai package

    from agents.evaluation.recording import Mode, ModelTraffic
    from agents.planning.llm import LLMPlanner, RetryPolicy

    replay = recordings.replay is not None
    if settings.openai_api_key is None and not replay:
        raise EvaluationError(f"the {spec.planner} planner needs OPENAI_API_KEY (the config's "
                              f"planner: or OPENAI_BASE_URL and OPENAI_MODEL pick the "
                              f"endpoint), or --replay DIR")
    endpoint = config.planner.over(settings)  # the config's planner:, then the environment
    base_url = endpoint.base_url or (REPLAY_URL if replay else "https://api.openai.com/v1")
    mode = Mode.REPLAY if replay else Mode.RECORD if recordings.record else Mode.LIVE
    model = spec.model or endpoint.model or settings.openai_model
    traffic = ModelTraffic(mode, base_url=base_url, model=model, redact=redact,
                           directory=recordings.replay or recordings.record)
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else "replay"
    client = openai.OpenAI(api_key=key, base_url=base_url, timeout=endpoint.timeout,
                           max_retries=0, http_client=openai.DefaultHttpx2Client(
                               transport=traffic, timeout=endpoint.timeout))
    # A replay never waits: a missing recording fails at once instead of being retried.
    retry = RetryPolicy(attempts=1 if replay else endpoint.retries + 1)
    options = {"max_tokens": endpoint.max_tokens, "format": endpoint.format,
               **recordings.llm_options}
    llm = LLMPlanner(config, client=client, model=model, retry=retry, redact=redact, **options)
    return llm, traffic
