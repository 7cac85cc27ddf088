"""Errors raised by the agents layer: planning, approvals, runs and the store.

Extends the tree in ``tools.errors``:

    DeckhandError
    ├── ConfigError, ToolError ...     (tools.errors)
    ├── SettingsInvalid                an environment variable's value is not acceptable
    ├── ManyServices                   a config of several services, given to a face that
    │                                  serves one (until multi-service support lands)
    ├── ServiceUnknown                 a record names a service the config does not have
    ├── PlanError                      a plan cannot be made or is not acceptable
    │   ├── PlanInvalid                validation failed; carries every problem
    │   ├── NoPlanFound                no playbook (and no LLM) can plan this request
    │   ├── FreezeRefused              an environment the plan touches is frozen
    │   ├── BreakGlassRefused          break-glass asked while nothing is frozen
    │   ├── ServiceNotChosen           a request or option names no known service, or two
    │   │   └── WhichService           none named and nothing chooses one: the face asks
    │   ├── EnvironmentLocked          a person locked an environment the plan changes
    │   └── PlannerError               the LLM never gave a valid plan (``repairs`` made)
    │       └── ModelError             the model gave no answer: its endpoint failed
    │           ├── ModelUnreachable   connection refused or unreachable
    │           ├── ModelTimeout       no answer in time (not retried: the work runs on)
    │           ├── ModelNotServed     the server has no such model
    │           ├── ModelRejected      the server refused the request (4xx: key, body …)
    │           └── ModelOverloaded    5xx or 429 until the retries ran out
    ├── ScheduleError                  a schedule spec, time zone or command is not acceptable
    ├── EvaluationError                an evaluation cannot run as asked (planner, recordings)
    ├── RetentionError                 the archive cannot be written, or another process trims
    └── StoreError                     durable state refused or failed a change
        ├── NotFound                   no such plan / run / schedule
        │   └── AmbiguousId            a typed id prefix names several records
        ├── ProposalTampered           a remembered plan no longer matches its hash
        ├── IllegalTransition          a run cannot move from its state to the one asked
        ├── ApprovalRefused            not allowed, stale version, self-approval, expired
        │   ├── LimitReached           over a blast-radius limit (policy.limits)
        │   ├── ManualLockRefused      a lock or unlock by hand that is not allowed now
        │   └── AlreadyStopping        a stop asked of a run someone already stopped
        ├── LockHeld                   the environment is locked by another run
        └── StoreUnavailable           Redis cannot be reached; nothing was written
"""

from __future__ import annotations

from tools.errors import DeckhandError


class SettingsInvalid(DeckhandError):
    """An environment variable deckhand reads has a value it cannot use."""


class ManyServices(DeckhandError):
    """A config with several services was given to a face that serves one (issue 40: the
    faces learn several services in later steps); the message names them."""


class ServiceUnknown(DeckhandError):
    """A run or plan names a service the loaded config lacks: nothing is done under
    another service's rules (fail closed); the message names the known ones."""


class PlanError(DeckhandError):
    """A plan could not be produced or accepted."""


class ServiceNotChosen(PlanError):
    """A request or an option names a service the organisation lacks, or two services; the
    message names the known ones. Raised before anything is planned."""


class WhichService(ServiceNotChosen):
    """The request names no service and nothing (option, environment, channel, the only
    service) chooses one: nothing is planned, and the face asks which of ``names``."""

    def __init__(self, names: list[str], *, request: str = ""):
        self.names, self.request = names, request
        super().__init__(f"which service? This organisation has {', '.join(names)}: name "
                         f"one in the request (`deploy api v2.3.1`, `… of api`) or with "
                         f"--service NAME (or DECKHAND_SERVICE)")


class PlanInvalid(PlanError):
    """The plan broke one or more rules. ``problems`` lists them all, each naming its step."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        merged = merge_step_problems(problems)
        listed = "\n".join(f"  - {p}" for p in merged)
        super().__init__(f"the plan is invalid ({len(merged)} problem(s)):\n{listed}")


def merge_step_problems(problems: list[str]) -> list[str]:
    """One line per problem: ``step a: X`` and ``step b: X`` become ``steps a, b: X``.

    A bad value filled into six steps is one mistake; listing it six times hides the rest.
    """
    steps: dict[str, list[str]] = {}
    order: list[str] = []
    for problem in problems:
        head, sep, message = problem.partition(": ")
        key = message if sep and head.startswith("step ") else problem
        if key not in steps:
            order.append(key)
            steps[key] = []
        if key == message:
            steps[key].append(head.removeprefix("step "))
    return [_merged(key, steps[key]) for key in order]


def _merged(message: str, step_ids: list[str]) -> str:
    if not step_ids:
        return message
    label = "step" if len(step_ids) == 1 else "steps"
    return f"{label} {', '.join(step_ids)}: {message}"


class FreezeRefused(PlanError):
    """An environment the plan touches is frozen; the message says until when and why."""


class EnvironmentLocked(PlanError):
    """A person locked an environment the plan changes (``deckhand lock``); the message
    names who, why, since when and how it is lifted."""


class BreakGlassRefused(PlanError):
    """Break-glass was asked for a plan no freeze covers (it lifts a freeze, nothing else)."""


class NoPlanFound(PlanError):
    """Nothing can plan this request; the message lists what can be asked instead."""


class PlannerError(PlanError):
    """The LLM planner failed: no valid plan after repairs, or (ModelError) no answer.

    ``repairs``: answers sent back to the model before giving up (what ``deckhand eval``
    counts, since no plan carries them)."""

    def __init__(self, message: str, *, repairs: int = 0):
        super().__init__(message)
        self.repairs = repairs

    def with_note(self, note: str) -> PlannerError:
        """The same error (class and repairs) with ``note`` added on a line of its own."""
        return type(self)(f"{self}\n{note}", repairs=self.repairs)


class ModelError(PlannerError):
    """The model gave no answer: its endpoint failed. Never a refusal: nobody said no;
    the thread, the audit and the trace name the class (``ModelTimeout`` …)."""


class ModelUnreachable(ModelError):
    """The endpoint could not be reached (refused or unreachable connection)."""


class ModelTimeout(ModelError):
    """The endpoint did not answer in time; not retried, since the server is still working."""


class ModelNotServed(ModelError):
    """The endpoint has no model by the configured name; the message lists those it serves."""


class ModelRejected(ModelError):
    """The endpoint refused the request (a 4xx: the key, the body, no usable answer format);
    the message quotes the server's own words."""


class ModelOverloaded(ModelError):
    """The endpoint kept failing (5xx) or rate limiting (429) until the retries ran out."""


class ScheduleError(DeckhandError):
    """A schedule cannot be created or changed as asked; the message says what to type."""


class EvaluationError(DeckhandError):
    """``deckhand eval`` cannot run as asked: an unknown planner spec, no endpoint, no
    recordings. (A malformed cases file is a ConfigError listing every problem.)"""


class RetentionError(DeckhandError):
    """Retention stopped before deleting anything it had not exported; the message says why."""


class StoreError(DeckhandError):
    """Durable state refused or failed a change."""


class NotFound(StoreError):
    """No plan, run or schedule with that id."""


class ProposalTampered(StoreError):
    """A remembered plan no longer has the hash it is stored under (edited in Redis)."""


class AmbiguousId(NotFound):
    """A typed prefix matches several records; the message lists them to pick from."""


class IllegalTransition(StoreError):
    """A run cannot move from its current state to the requested one."""


class ApprovalRefused(StoreError):
    """This approval is not accepted (who, which version, or when)."""


class LimitReached(ApprovalRefused):
    """The approver has approved as many runs of an environment this hour as policy allows."""


class AlreadyStopping(ApprovalRefused):
    """A Stop after the first: the run is already stopping (``by`` asked first). Told to
    whoever asked, privately, like a refusal; it changes nothing."""

    def __init__(self, message: str, *, by: str):
        super().__init__(message)
        self.by = by


class ManualLockRefused(ApprovalRefused):
    """A lock or unlock by hand refused: not an approver of the environment, someone else
    holds it, nothing to unlock. The same policy as approving, so the same exit code."""


class LockHeld(StoreError):
    """The environment is locked by another run."""


class StoreUnavailable(StoreError):
    """The store (Redis) cannot be reached. Nothing was written."""
