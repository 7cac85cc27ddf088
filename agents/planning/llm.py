"""The LLM planner over any OpenAI-compatible endpoint (imported only when one is configured).

The model writes; validation decides. One request goes:

    request ─▶ prompt (stable prefix: rules, catalog, inventory, policy, examples; request last)
            ─▶ chat.completions (strict json_schema, temperature 0; json_object if refused,
               then JSON asked in the prompt alone: ``planner.format`` picks where to start)
            ─▶ parse ─▶ Plan ─▶ validate_plan ──ok──▶ plan, with model/tokens/latency/repairs
                  └────── problems ─▶ back to the model, at most ``max_repairs`` times
                                        └─▶ PlannerError naming the last problems

HTTP failures (429 honoring Retry-After, 5xx, refused connections) are retried a bounded
number of times here, with the client built ``max_retries=0`` so this is the one layer. A
timeout is not retried: the server is still generating the abandoned answer, and a second
request would queue behind it. An endpoint failure is a ModelError (no answer), never a
refusal; a 400 is read for what it says (a wrong model name is asked of ``/models``), and only
one that names the answer format moves to the next format.

Why not the openai client's own retries: it ignores a Retry-After over 60 s and
backs off instead (deckhand gives up at once and says "try later"), its sleep cannot be
injected (tests must not sleep), and it reports no retry to metrics or spans. Here each
retry is a ``retry`` event on the call's ``chat`` span and goes to the observer a face
installs (``observe_retries``: ``deckhand_llm_retries_total{model, reason}``).

The ``chat`` spans are written here too, not by ``opentelemetry-instrumentation-openai-v2``:
that package patches the client process-wide, sends message content as log events (a
pipeline the redacting span exporter never sees: a secret a model echoed would reach the
backend), is a beta pinned to the openai 1.x API, and cannot put the prompt name and
version on the span it makes.

``agents.planning.planner.build_planner`` wires what deckhand runs: playbooks first, then this.
"""

from __future__ import annotations

import email.utils
import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam
from openai.types.chat.completion_create_params import ResponseFormat
from opentelemetry.trace import SpanKind
from pydantic import BaseModel, ValidationError

from agents import tracing
from agents.config import Config
from agents.errors import (
    ModelError,
    ModelNotServed,
    ModelOverloaded,
    ModelRejected,
    ModelTimeout,
    ModelUnreachable,
    NoPlanFound,
    PlanInvalid,
    PlannerError,
)
from agents.plan.model import ANSWER_LIMIT, Plan, PlannerInfo, Step
from agents.plan.validation import validate_plan
from agents.planning import prompt
from agents.planning.prompt import WirePlan, WireReplan
from agents.requests.phrasing import Phrasing, canonical_environments
from agents.run.record import Run, StepStatus
from agents.settings import PlannerFormat, Settings
from tools.redact import Redactor, redact_data

log = logging.getLogger("deckhand.planner")

T = TypeVar("T")
W = TypeVar("W", bound=BaseModel)
Message = dict[str, str]
RetryObserver = Callable[[str, str], None]
"""Told (model, reason) of each retried call: rate_limited, server_error, timeout, connection."""
TEMPERATURE = 0.0
FORMATS: tuple[PlannerFormat, ...] = ("json_schema", "json_object", "prompt")
"""The answer formats, strictest first: a server that refuses one is asked in the next."""
FORMAT_WORDS = re.compile(r"response_format|json_schema|json_object|json schema|structured|"
                          r"guided|grammar|schema", re.IGNORECASE)
"""Words of a 400 that refuses the answer format (not the model, the key or the body)."""


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries for transient endpoint failures.

    Attributes:
        attempts: HTTP calls per completion, the first included.
        base_delay: seconds before the first retry; doubles each time.
        max_delay: longest wait; a longer Retry-After means giving up at once.
        sleep: how to wait (injected by tests, which must not sleep).
    """

    attempts: int = 4
    base_delay: float = 1.0
    max_delay: float = 30.0
    sleep: Callable[[float], None] = time.sleep

    def backoff(self, attempt: int) -> float:
        return float(min(self.max_delay, self.base_delay * 2 ** attempt))


@dataclass
class _Usage:
    """What one conversation cost, summed over its calls, and which answer was kept."""

    prompt: str
    prompt_version: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    repairs: int = 0
    tools_note: str = ""
    """Which tools of a large catalog were left out of the prompt ('' when none were)."""
    response_model: str | None = None
    answer: str = ""
    started: float = field(default_factory=time.perf_counter)

    def add(self, completion: ChatCompletion) -> None:
        self.response_model = completion.model or self.response_model
        if completion.usage is not None:
            self.prompt_tokens += completion.usage.prompt_tokens or 0
            self.completion_tokens += completion.usage.completion_tokens or 0

    @property
    def latency_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000


class _Refused(Exception):
    """The answer cannot be used; ``problems`` go back to the model."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


class LLMPlanner:
    """Plans, changes and re-plans with a model behind an OpenAI-compatible endpoint."""

    def __init__(self, config: Config, *, client: openai.OpenAI, model: str,
                 retry: RetryPolicy | None = None, max_repairs: int = 2,
                 max_tokens: int = 2048, seed: int | None = None,
                 redact: Callable[[str], str] | None = None, capture_content: bool = False,
                 format: PlannerFormat = "json_schema"):  # noqa: A002 - the config's key
        """
        Args:
            config: the live config (catalog, inventory, policy, playbooks).
            client: an ``openai.OpenAI`` client, best built with ``max_retries=0``
                (retries are done here).
            model: model name sent with every request.
            retry: retry policy for transient HTTP failures.
            max_repairs: how many times a refused answer goes back to the model.
            max_tokens: completion budget per call; a cut-off answer is repaired.
            seed: sent with every request when set (servers that honour it answer alike).
            redact: masks secrets in anything sent to the model or put in an error.
            capture_content: put the (redacted, bounded) messages and answer on each model
                call's span — only when the operator opts in.
            format: the answer format to ask for first (``planner.format``).
        """
        self.config, self.client, self.model = config, client, model
        self.retry = retry or RetryPolicy()
        self.max_repairs, self.max_tokens, self.seed = max_repairs, max_tokens, seed
        self.redact = redact or Redactor.from_env(config.secrets)
        self.format: PlannerFormat = format  # moves on when the endpoint refuses it
        self.capture_content = capture_content
        self._retried: RetryObserver = _unobserved

    def observe_retries(self, observer: RetryObserver) -> None:
        """Tell ``observer`` (model, reason) of every retried call: a face's metrics hook,
        so agents never imports the metrics module."""
        self._retried = observer

    @property
    def json_schema(self) -> bool:
        """Whether the strict schema is still asked for (the endpoint took it)."""
        return self.format == "json_schema"

    @classmethod
    def from_settings(cls, config: Config, settings: Settings, **options: Any) -> LLMPlanner:
        """A planner for the config's ``planner:`` endpoint, what it leaves out from
        ``settings`` (OPENAI_BASE_URL/_MODEL/_TIMEOUT); the key is OPENAI_API_KEY."""
        if settings.openai_api_key is None:
            raise PlannerError("the LLM planner needs OPENAI_API_KEY")
        endpoint = config.planner.over(settings)
        client = openai.OpenAI(api_key=settings.openai_api_key.get_secret_value(),
                               base_url=endpoint.base_url, timeout=endpoint.timeout,
                               max_retries=0)
        redact = Redactor.from_env([*config.secrets, *settings.secret_values()])
        options = {"retry": RetryPolicy(attempts=endpoint.retries + 1),
                   "max_tokens": endpoint.max_tokens, "format": endpoint.format,
                   "seed": settings.openai_seed, "redact": redact,
                   "capture_content": settings.genai_capture_content, **options}
        return cls(config, client=client, model=endpoint.model or settings.openai_model,
                   **options)

    @property
    def endpoint(self) -> str:
        return self.redact(str(self.client.base_url))

    def prompt_versions(self) -> dict[str, str]:
        """The version of each prompt this planner sends (plan, modify, replan): what new
        plans record as ``planner.prompt_version``."""
        return self.config.prompts.versions()

    # -- the three operations ---------------------------------------------------------------

    def plan(self, request: str, *, requested_by: str) -> Plan:
        """A validated plan for ``request``.

        Raises:
            NoPlanFound: the model says the tools and rules cannot do this.
            PlannerError: the endpoint failed, or no valid plan came back after repairs.
        """
        user = prompt.plan_request(self.config.prompts, self.redact(request))

        def build(wire: WirePlan) -> Plan:
            _declined(wire)
            return self._checked(lambda: Plan.model_validate({**_wire_body(wire),
                                                              "requested_by": requested_by}))

        tools = prompt.tools_for(self.config, request)
        plan, usage = self._converse("plan", WirePlan, user, build, tools)
        return plan.model_copy(update={"planner": self._info(usage)})

    def modify(self, plan: Plan, instruction: str, *, requested_by: str) -> Plan:
        """A new version of ``plan`` (same id, version + 1) following ``instruction``.

        Raises:
            NoPlanFound: the model says the change cannot be made with these tools and rules.
            PlannerError: the endpoint failed, or no valid plan came back after repairs.
        """
        user = prompt.modify_request(self.config.prompts, plan, self.redact(instruction))

        def build(wire: WirePlan) -> Plan:
            _declined(wire)
            return self._checked(lambda: plan.revised(**_wire_body(wire),
                                                      requested_by=requested_by))

        tools = prompt.tools_for(self.config, f"{instruction} {_tool_names(plan)}")
        revised, usage = self._converse("modify", WirePlan, user, build, tools)
        note = f"modified: {prompt.clean_text(instruction, 200)}"
        return revised.model_copy(update={"planner": self._info(usage, note)})

    def replan(self, plan: Plan, run: Run, *, requested_by: str) -> Plan | None:
        """After a failed step: a new version with revised remaining steps, or None to roll back.

        Steps that succeeded are kept exactly as they ran. Returns None without asking the
        model once the run has used up ``policy.max_replans``. Whether the new version must
        be approved again: see :func:`changes_mutating_steps`.

        Raises:
            PlannerError: the endpoint failed or no valid revision came back; roll back.
        """
        if run.replans >= self.config.policy.max_replans:
            log.info("run %s: no replan left (max_replans=%d), rolling back", run.id,
                     self.config.policy.max_replans)
            return None
        done = [s for s in plan.steps
                if (state := run.steps.get(s.id)) and state.status is StepStatus.SUCCEEDED]
        user = prompt.replan_request(self.config.prompts, plan, run, self.redact)

        def build(wire: WireReplan) -> Plan | None:
            if wire.action == "rollback":
                log.info("run %s: the planner chose rollback: %s", run.id, wire.reason)
                return None
            return self._checked(lambda: plan.revised(**_replan_body(wire, done),
                                                      requested_by=requested_by))

        tools = prompt.tools_for(self.config, _tool_names(plan))
        revised, usage = self._converse("replan", WireReplan, user, build, tools)
        if revised is None:
            return None
        note = f"replanned after run {run.id}"
        return revised.model_copy(update={"planner": self._info(usage, note)})

    def _info(self, usage: _Usage, note: str = "") -> PlannerInfo:
        """The plan's provenance; the answer and the note are redacted, the answer bounded
        (redacted first: a cut could leave half a secret no pattern recognises)."""
        return PlannerInfo(
            name="llm", model=self.model, response_model=_redacted(self.redact,
                                                                   usage.response_model),
            prompt=usage.prompt, prompt_version=usage.prompt_version, temperature=TEMPERATURE,
            seed=self.seed, prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens, latency_ms=usage.latency_ms,
            repairs=usage.repairs,
            note=self.redact("; ".join(filter(None, (note, usage.tools_note)))),
            answer=prompt.excerpt(self.redact(usage.answer), ANSWER_LIMIT))

    # -- the conversation -------------------------------------------------------------------

    def _converse(self, operation: str, answer: type[W], user: str,
                  build: Callable[[W], T], tools: prompt.ToolChoice) -> tuple[T, _Usage]:
        """Ask, check, and send problems back until an answer builds or repairs run out."""
        prompts = self.config.prompts
        # The user message is redacted whole: a plan to change may hold what a model wrote.
        system = prompt.system_prompt(self.config, answer, self.redact, tools)
        asked: list[Message] = [{"role": "system", "content": system},
                                {"role": "user", "content": self.redact(user)}]
        messages, problems = list(asked), []
        usage = _Usage(operation, prompts.version(operation), tools_note=tools.note())
        if usage.tools_note:
            log.info("%s: %s", operation, usage.tools_note)
        for attempt in range(self.max_repairs + 1):
            try:
                completion = self._call(messages, answer, usage, attempt, tools.sent)
            except ModelError as exc:  # no answer now; the repairs made still happened
                exc.repairs = usage.repairs
                raise
            content = _content(completion)
            try:
                built = build(_answer(completion, content, answer))
                usage.answer = content
                return built, usage
            except _Refused as refused:
                problems = refused.problems
            log.info("planner answer refused (attempt %d): %s", attempt + 1, problems)
            if attempt < self.max_repairs:
                usage.repairs += 1
                # Only the last refused answer, as a bounded excerpt: requests stay bounded.
                messages = [*asked,
                            {"role": "assistant",
                             "content": prompt.excerpt(self.redact(content))},
                            {"role": "user", "content": prompt.repair_message(prompts, problems)}]
        listed = "\n".join(f"  - {p}" for p in problems[:10])
        raise PlannerError(f"the model {self.model} gave no valid plan after "
                           f"{self.max_repairs} repair(s); the last answer had:\n{listed}",
                           repairs=usage.repairs)

    def _call(self, messages: list[Message], answer: type[BaseModel], usage: _Usage,
              attempt: int, tools: list[str]) -> ChatCompletion:
        """One model call, as an OpenTelemetry GenAI span: names and counts; the text only
        when the operator opted in, redacted and bounded."""
        with tracing.span(f"chat {self.model}", {
                "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                "gen_ai.request.model": self.model, "gen_ai.request.temperature": TEMPERATURE,
                "gen_ai.request.max_tokens": self.max_tokens, "gen_ai.request.seed": self.seed,
                "deckhand.prompt.name": usage.prompt,
                "deckhand.prompt.version": usage.prompt_version,
                "deckhand.planner.attempt": attempt,
                "deckhand.prompt.tools": len(tools),
                "deckhand.prompt.tools_left_out": len(self.config.catalog.tools) - len(tools)},
                kind=SpanKind.CLIENT) as span:  # semconv: a call to a remote model
            try:
                completion = self._complete(messages, answer, tools)
            except ModelError as exc:  # semconv's error.type: which failure, never a refusal
                span.set_attribute("error.type", type(exc).__name__)
                raise
            span.set_attribute("deckhand.planner.format", self.format)
            usage.add(completion)
            tracing.finish(span, ok=True, **_completion_attributes(completion, self.redact))
            if self.capture_content:
                span.set_attributes(_content_attributes(messages, completion, self.redact))
        return completion

    def _checked(self, make: Callable[[], Plan]) -> Plan:
        """Build the plan and validate it; every problem becomes a repair request."""
        try:
            plan = make()
            # "prod" from the model is production before validation and policy read it
            canonical_environments(plan.all_steps, Phrasing.of(self.config.inventory.environments))
            validate_plan(plan, self.config.catalog, self.config.inventory, self.config.policy)
        except PlanInvalid as exc:
            raise _Refused(exc.problems) from exc
        except ValidationError as exc:
            raise _Refused(_pydantic_problems(exc)) from exc
        return plan

    # -- HTTP -------------------------------------------------------------------------------

    def _complete(self, messages: list[Message], answer: type[BaseModel],
                  tools: list[str]) -> ChatCompletion:
        """One completion in the current format; a 400 or 422 that refuses the format moves
        to the next one (and stays there: no more sending what is refused)."""
        while True:
            try:
                with self._openai_errors():
                    return self._create(messages, self._response_format(answer, tools))
            except _FormatRefused as refused:
                following = FORMATS[FORMATS.index(self.format) + 1]
                log.warning("%s refused response_format %s (%s); asking for %s", self.endpoint,
                            self.format, refused.said or "no message", following)
                self.format = following

    def _response_format(self, answer: type[BaseModel], tools: list[str]
                         ) -> dict[str, Any] | None:
        """What ``response_format`` says in the current format (None: the prompt alone)."""
        if self.format == "json_schema":
            schema = prompt.strict_schema(answer, tools=tools)
            return {"type": "json_schema",
                    "json_schema": {"name": answer.__name__.lower(), "strict": True,
                                    "schema": schema}}
        return {"type": "json_object"} if self.format == "json_object" else None

    def _create(self, messages: list[Message], fmt: dict[str, Any] | None) -> ChatCompletion:
        """POST /chat/completions with bounded retries on transient failures (not timeouts)."""
        attempt = 0
        while True:
            try:
                # the model's door: the one call of the client, every message redacted here
                sent = redact_data(self.redact, messages)
                return self._checked_completion(self.client.chat.completions.create(
                    model=self.model, messages=cast(list[ChatCompletionMessageParam], sent),
                    temperature=TEMPERATURE, max_tokens=self.max_tokens,
                    extra_body=None if self.seed is None else {"seed": self.seed},
                    response_format=(openai.omit if fmt is None
                                     else cast(ResponseFormat, fmt))))
            except ValueError as exc:  # a 200 whose body is not JSON (an HTML error page)
                raise ModelRejected(f"the LLM endpoint {self.endpoint} answered with a body "
                                    f"that is not JSON ({type(exc).__name__}); is "
                                    f"planner.base_url (OPENAI_BASE_URL) an OpenAI-compatible "
                                    f"API?") from exc
            except openai.APITimeoutError as exc:  # the server works on: never ask again
                raise ModelTimeout(self._gave_up(exc, attempt + 1)) from exc
            except (openai.APIConnectionError, openai.RateLimitError,
                    openai.InternalServerError) as exc:
                wait = self._retry_wait(exc, attempt)
                attempt += 1
                if wait is None:
                    error = ModelUnreachable if isinstance(exc, openai.APIConnectionError) \
                        else ModelOverloaded
                    raise error(self._gave_up(exc, attempt)) from exc
                log.warning("LLM endpoint %s: %s; retry %d of %d in %.1f s", self.endpoint,
                            _kind(exc), attempt, self.retry.attempts - 1, wait)
                self._retried(self.model, _reason(exc))
                tracing.event("retry", {"deckhand.retry.reason": _reason(exc),
                                        "deckhand.retry.number": attempt,
                                        "deckhand.retry.wait_s": wait})
                self.retry.sleep(wait)

    def _checked_completion(self, completion: object) -> ChatCompletion:
        """The completion, or ModelRejected when the 200 answer is not one (text/html, a
        message of null...): model output is data, never a traceback."""
        if not isinstance(completion, ChatCompletion):
            raise ModelRejected(f"the LLM endpoint {self.endpoint} did not answer with a chat "
                                f"completion (got {type(completion).__name__}); is "
                                f"planner.base_url (OPENAI_BASE_URL) an OpenAI-compatible "
                                f"API?")
        if any(c.message is None for c in completion.choices or []):
            raise ModelRejected(f"the LLM endpoint {self.endpoint} answered a choice without "
                                f"a message")
        return completion

    def _retry_wait(self, exc: openai.APIError, attempt: int) -> float | None:
        """Seconds to wait before the next try, or None to give up."""
        if attempt + 1 >= self.retry.attempts:
            return None
        after = _retry_after(exc)
        if after is None:
            return self.retry.backoff(attempt)
        return after if after <= self.retry.max_delay else None

    def _gave_up(self, exc: openai.APIError, attempts: int) -> str:
        where, tries = f"the LLM endpoint {self.endpoint}", f"{attempts} attempt(s)"
        after = _retry_after(exc)
        if isinstance(exc, openai.RateLimitError) and after and after > self.retry.max_delay:
            return (f"{where} is rate limiting (HTTP 429) and asks to wait {after:.0f} s, "
                    f"longer than deckhand waits ({self.retry.max_delay:.0f} s); try later")
        if isinstance(exc, openai.RateLimitError):
            return f"{where} is still rate limiting (HTTP 429) after {tries}; try again later"
        if isinstance(exc, openai.InternalServerError):
            return (f"{where} failed with HTTP {exc.status_code} {tries} in a row; it may be "
                    f"down or overloaded")
        if isinstance(exc, openai.APITimeoutError):
            return (f"{where} did not answer model {self.model!r} within "
                    f"{_timeout_of(self.client)}; not asked again, since the server may still "
                    f"be working on it. Raise planner.timeout (OPENAI_TIMEOUT), lower "
                    f"planner.max_tokens, or use a faster model")
        return (f"cannot reach {where} ({tries}: connection refused or unreachable); check "
                f"planner.base_url (OPENAI_BASE_URL) and that the server is running")

    @contextmanager
    def _openai_errors(self) -> Iterator[None]:
        """Translate what is left of openai's exceptions: a refused format is _FormatRefused
        (while a next format remains), the rest a ModelError that says the server's words."""
        try:
            yield
        except openai.APIStatusError as exc:
            said = self.redact(server_message(exc))[:300]
            if self._format_refused(exc, said):
                raise _FormatRefused(said) from exc
            raise self._status_error(exc, said) from exc
        except openai.OpenAIError as exc:
            raise ModelRejected(f"the LLM endpoint {self.endpoint} failed: "
                                f"{self.redact(str(exc))[:300]}") from exc

    def _format_refused(self, exc: openai.APIStatusError, said: str) -> bool:
        """A 400/422 about the answer format, with a format left to try. A message that
        names none is one only when the model is served (no message, and the name checks
        out): a wrong model name must never read as a format refusal."""
        if exc.status_code not in (400, 422) or self.format == FORMATS[-1]:
            return False
        if said:
            return FORMAT_WORDS.search(said) is not None
        return self.model in (self.served_models() or [self.model])

    def _status_error(self, exc: openai.APIStatusError, said: str) -> ModelError:
        where, code = f"the LLM endpoint {self.endpoint}", exc.status_code
        if code == 401:
            return ModelRejected(f"{where} refused the API key (HTTP 401); check "
                                 f"OPENAI_API_KEY")
        if code == 403:
            return ModelRejected(f"{where} denied access (HTTP 403); check the key's "
                                 f"permissions")
        # Asked only when the words could be about the model: a server that lists another
        # name may still answer to any (llama.cpp), and then a 400 is about something else.
        about_model = not said or "model" in said.lower()
        served = self.served_models() if code in (400, 404, 422) and about_model else None
        if served is not None and self.model not in served:
            return self._not_served(served)
        words = f": {said}" if said else " and said nothing more"
        if "context" in said.lower():
            words += ("; the prompt may not fit the model's context: set "
                      "planner.context_tokens and run `deckhand check`")
        if code == 404:
            return ModelRejected(f"{where} has no chat completions API or no model "
                                 f"{self.model!r} (HTTP 404){words}; check planner.base_url "
                                 f"and planner.model")
        return ModelRejected(f"{where} refused the request (HTTP {code}){words}")

    def probe(self) -> str:
        """Ask the endpoint whether it answers and serves the model: its model list, and
        where that does not name it, a one-token call. What to tell, or a ModelError saying
        why not (no retry: ``deckhand check`` asks, it does not insist)."""
        where = f"the LLM endpoint {self.endpoint}"
        try:
            served: list[str] | None = [m.id for m in self.client.models.list()]
        except openai.APIStatusError:
            served = None  # no /models here: a one-token call says as much
        except openai.APIConnectionError as exc:
            raise self._unanswered(exc) from exc
        if served is not None and self.model in served:
            return f"{where} answers and serves {self.model}"
        # Not listed, or no list: one token says whether the name is served (llama.cpp's
        # server lists its own alias, yet answers to any name).
        try:
            self.client.chat.completions.create(
                model=self.model, max_tokens=1, temperature=TEMPERATURE,
                messages=[{"role": "user", "content": "Answer OK."}])
        except openai.APIStatusError as exc:
            if served is not None and exc.status_code in (400, 404, 422):
                raise self._not_served(served) from exc
            raise self._status_error(exc, self.redact(server_message(exc))[:300]) from exc
        except openai.APIConnectionError as exc:
            raise self._unanswered(exc) from exc
        if served is None:
            return f"{where} answered a one-token call to {self.model} (it lists no models)"
        return (f"{where} answered a one-token call to {self.model}, though it lists only "
                f"{', '.join(served[:20]) or 'nothing'} (it does not check the name)")

    def _unanswered(self, exc: openai.APIConnectionError) -> ModelError:
        if isinstance(exc, openai.APITimeoutError):
            return ModelTimeout(self._gave_up(exc, 1))
        return ModelUnreachable(self._gave_up(exc, 1))

    def _not_served(self, served: list[str]) -> ModelNotServed:
        listed = ", ".join(served[:20]) or "nothing"
        return ModelNotServed(f"the LLM endpoint {self.endpoint} has no model {self.model!r}; "
                              f"it serves: {listed}. Set planner.model (or OPENAI_MODEL) to "
                              f"one of them")

    def served_models(self) -> list[str] | None:
        """The model names the endpoint lists at ``/models``, or None when it cannot say
        (no such API, an error): asked once per question, never retried."""
        try:
            return [m.id for m in self.client.models.list()]
        except (openai.OpenAIError, ValueError, TypeError, AttributeError) as exc:
            log.info("%s cannot list its models: %s", self.endpoint, type(exc).__name__)
            return None


class _FormatRefused(Exception):
    """The endpoint refused the answer format; ``said``: its words (redacted)."""

    def __init__(self, said: str):
        super().__init__(said)
        self.said = said


def server_message(exc: openai.APIStatusError) -> str:
    """The server's own words in an error answer, whatever shape its body has: OpenAI's
    ``{"error": {"message"}}``, FastAPI's ``{"detail"}``, ``{"error": "..."}``, plain text."""
    body: Any = exc.body
    if isinstance(body, dict):
        for key in ("message", "detail", "error", "msg"):
            value = body.get(key)
            if isinstance(value, str) and value.strip():
                return " ".join(value.split())
            if isinstance(value, dict | list) and value:
                return json.dumps(value, ensure_ascii=False)[:300]
        return ""
    if isinstance(body, str):
        return " ".join(body.split())[:300]
    return ""


def _timeout_of(client: openai.OpenAI) -> str:
    """The client's read timeout, said in seconds."""
    timeout: Any = client.timeout
    seconds = getattr(timeout, "read", timeout)
    return f"{seconds:g} s" if isinstance(seconds, int | float) else "its timeout"


# -- answers ------------------------------------------------------------------------------


def _completion_attributes(completion: ChatCompletion, redact: Callable[[str], str]
                           ) -> dict[str, tracing.AttributeValue | None]:
    usage = completion.usage
    return {"gen_ai.response.model": _redacted(redact, completion.model),
            "gen_ai.response.finish_reasons": tuple(c.finish_reason or "" for c in
                                                    completion.choices or []),
            "gen_ai.usage.input_tokens": usage.prompt_tokens if usage else None,
            "gen_ai.usage.output_tokens": usage.completion_tokens if usage else None}


MAX_CAPTURED = 8_000
"""Characters of each message (and of the answer) put on a span when capture is on."""


def _content_attributes(messages: list[Message], completion: ChatCompletion,
                        redact: Callable[[str], str]) -> dict[str, str]:
    """The GenAI semantic conventions' input and output messages, as JSON; every text
    redacted (the prompts hold config and request text) and bounded."""
    def parts(text: str) -> list[dict[str, str]]:  # redacted before cut: no half secret
        return [{"type": "text", "content": redact(text)[:MAX_CAPTURED]}]

    sent = [{"role": m["role"], "parts": parts(str(m["content"]))} for m in messages]
    answered = [{"role": "assistant", "finish_reason": c.finish_reason or "",
                 "parts": parts(c.message.content or "")} for c in completion.choices or []]
    return {"gen_ai.input.messages": json.dumps(sent),
            "gen_ai.output.messages": json.dumps(answered)}


def _redacted(redact: Callable[[str], str], text: str | None) -> str | None:
    return redact(text) if text else None


def _content(completion: ChatCompletion) -> str:
    if not completion.choices:
        return ""
    return completion.choices[0].message.content or ""


def _answer(completion: ChatCompletion, content: str, answer: type[W]) -> W:
    """The parsed answer; _Refused if it was cut off, refused, empty or malformed."""
    if not completion.choices:
        raise _Refused(["the endpoint returned no answer (no choices)"])
    choice = completion.choices[0]
    if choice.message.refusal:
        raise _Refused([f"you refused: {prompt.clean_text(choice.message.refusal, 300)}. "
                        f"If the request cannot be planned, set cannot_plan instead"])
    if choice.finish_reason == "length":
        raise _Refused(["the answer was cut off at the length limit: answer with fewer "
                        "steps and shorter descriptions"])
    if not content.strip():
        raise _Refused(["the answer was empty"])
    try:
        return prompt.parse_wire(content, answer)  # type: ignore[no-any-return]
    except ValidationError as exc:
        raise _Refused(_pydantic_problems(exc)) from exc
    except ValueError as exc:
        raise _Refused([f"the answer is not valid JSON: {exc}"]) from exc


def _declined(wire: WirePlan) -> None:
    """NoPlanFound if the model declined; a contradictory answer goes back for repair."""
    if not wire.cannot_plan:
        return
    if wire.steps:
        raise _Refused(["cannot_plan must be null when you return steps; to decline, "
                        "return no steps"])
    raise NoPlanFound(f"the planner will not plan this: {wire.cannot_plan}")


def _tool_names(plan: Plan) -> str:
    """The tools a plan uses, as words: a change to it can need them again."""
    return " ".join([*(s.tool for s in plan.steps), *(r.tool for r in plan.rollback)])


def _wire_body(wire: WirePlan) -> dict[str, Any]:
    """Plan fields from the answer; PlanInvalid if a parameter is given twice."""
    return {"goal": wire.goal, "steps": prompt.wire_steps(wire.steps),
            "rollback": prompt.wire_rollback(wire.rollback)}


def _replan_body(wire: WireReplan, done: list[Step]) -> dict[str, Any]:
    """Succeeded steps as they ran, then the model's steps still to run (repeats dropped)."""
    done_ids = {s.id for s in done}
    todo = [s for s in wire.steps if s.id not in done_ids]
    return {"steps": [s.model_dump() for s in done] + prompt.wire_steps(todo),
            "rollback": prompt.wire_rollback(wire.rollback)}


def _pydantic_problems(exc: ValidationError) -> list[str]:
    return [f"{'.'.join(map(str, e['loc'])) or 'answer'}: {e['msg']}"
            for e in exc.errors()[:20]]


def _retry_after(exc: openai.APIError) -> float | None:
    """Seconds from Retry-After-Ms or Retry-After (seconds or an HTTP date), if any."""
    response = getattr(exc, "response", None)
    if response is None:
        return None
    headers = response.headers
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


def _reason(exc: openai.APIError) -> str:
    """Why a call is retried, as a metric label (few values)."""
    if isinstance(exc, openai.RateLimitError):
        return "rate_limited"
    if isinstance(exc, openai.APIStatusError):
        return "server_error"
    return "timeout" if isinstance(exc, openai.APITimeoutError) else "connection"


def _unobserved(model: str, reason: str) -> None:
    """No face is counting retries."""


def _kind(exc: openai.APIError) -> str:
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}"
    return "timed out" if isinstance(exc, openai.APITimeoutError) else "connection failed"
