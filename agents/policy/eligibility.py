"""Who may approve a plan or run, how many approvals it still needs, and which rule says so.

The one answer every face gives: the store's approval check, plan validation, Slack's
refusals and App Home, MCP's ``run_status`` and ``deckhand policy explain``. The rules of a
run are those of every environment that lists a host it touches (``agents.plan.targets``), plus
the ``unscoped`` rule for changes outside every environment; a freeze blocks it unless it is
a break-glass run, which then needs the environments' approvals in full plus one grant from
``policy.break_glass``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Protocol

from agents.plan.targets import PlanTargets
from agents.policy.freeze import Frozen, frozen
from agents.policy.limits import explain as explain_limits
from agents.policy.limits import hosts_problem
from agents.policy.rules import UNSCOPED, Approvers, EnvPolicy, Policy
from tools.inventory import Inventory


class Grant(StrEnum):
    """What one approval counts as."""

    ENVIRONMENT = "environment"
    BREAK_GLASS = "break_glass"


class Approved(Protocol):
    user: str
    break_glass: bool


class Subject(Protocol):
    """What the rules read from a run (or a plan not yet stored as one)."""

    environments: list[str]
    reach: dict[str, list[str]]
    requested_by: str
    break_glass: str | None

    @property
    def scopes(self) -> list[str]: ...

    @property
    def approvals(self) -> Sequence[Approved]: ...


@dataclass(frozen=True)
class RuleLine:
    """One rule that governs the subject, where it is configured, and why it applies."""

    scope: str
    source: str
    why: str
    rule: EnvPolicy
    layer: str = ""
    """Which layer over the scope this is (``organisation``, ``owners``, ``web/production``);
    empty for the scope's own rule."""

    @property
    def label(self) -> str:
        return f"{self.scope} ({self.layer})" if self.layer else self.scope

    def describe(self, *, exclude: str | None = None) -> str:
        count = self.rule.min_approvals
        who = _names(self.rule.approvers, exclude=exclude)
        own = "" if self.rule.self_approval else ", not the requester"
        return f"{self.scope}: {who} ({count} needed{own}) — {self.source}, {self.why}"


@dataclass(frozen=True)
class Eligibility:
    """The answer for one subject at one moment."""

    lines: tuple[RuleLine, ...]
    rule: EnvPolicy
    requester: str
    approved: tuple[str, ...]
    env_approvals: int
    break_glass: Approvers | None
    """The break-glass granters, when the subject is a break-glass run."""
    glass_granted: bool
    freeze: Frozen | None
    over_limit: str | None = None
    """Why the subject is over a blast-radius limit nobody's approval lifts (hosts per run)."""
    limits: tuple[str, ...] = ()
    """The ``policy.limits`` that apply, described (the per-person count is the store's)."""

    @property
    def needed(self) -> int:
        """Approvals still needed from the environments' approvers."""
        return max(0, self.rule.min_approvals - self.env_approvals)

    @property
    def glass_needed(self) -> bool:
        return self.break_glass is not None and not self.glass_granted

    @property
    def remaining(self) -> int:
        """Every approval still needed (the break-glass grant included)."""
        return self.needed + int(self.glass_needed)

    @property
    def blocked(self) -> str | None:
        """Why nobody may approve now (a freeze, and this is no break-glass run)."""
        if self.freeze is not None and self.break_glass is None:
            return self.freeze.describe()
        return None

    def allows(self, user: str, groups: Iterable[str] = ()) -> bool:
        """Whether ``user`` is allowed by every rule (excluded requesters aside)."""
        groups = list(groups)
        return all(line.rule.approvers.allows(user, groups) for line in self.lines)

    def excludes(self, user: str) -> bool:
        return user == self.requester and not self.rule.self_approval

    def may_grant_glass(self, user: str, groups: Iterable[str] = ()) -> bool:
        return self.break_glass is not None and self.break_glass.allows(user, groups)

    def grant(self, user: str, groups: Iterable[str] = ()) -> Grant | str:
        """What ``user``'s approval would count as now, or why it is refused."""
        groups = list(groups)
        env_ok, glass_ok = self.allows(user, groups), self.may_grant_glass(user, groups)
        if self.blocked:
            return self.blocked
        if self.over_limit:
            return self.over_limit
        if not env_ok and not glass_ok:
            return f"you are not allowed to approve this plan. Who can: {self.who()}"
        if self.excludes(user):
            return "you asked for this deploy, and policy forbids approving your own request here"
        if user in self.approved:
            return (f"you already approved; {self.remaining} more approval(s) needed from "
                    f"someone else")
        env_slot = env_ok and self.needed > 0
        if glass_ok and self.glass_needed and not (env_slot and self._other_granter(user)):
            return Grant.BREAK_GLASS  # someone who is both counts where they are scarcer
        if env_slot:
            return Grant.ENVIRONMENT
        if glass_ok:
            return (f"the break-glass grant is given; the {self.needed} approval(s) still "
                    f"needed must come from: {self.who()}")
        return "the environment approvals are given; one break-glass grant is still needed " \
               f"from {self.glass_who()}"

    def _other_granter(self, user: str) -> bool:
        """Whether someone besides ``user`` could give the break-glass grant."""
        glass = self.break_glass
        return glass is not None and (bool(glass.groups) or any(
            u != user and not self.excludes(u) and u not in self.approved for u in glass.users))

    def who(self) -> str:
        """Who may give an environment approval, per rule, never naming someone excluded."""
        exclude = self.requester if not self.rule.self_approval else None
        scopes: dict[str, list[str]] = {}
        for line in self.lines:
            if not line.rule.approvers.anyone:
                text = _names(line.rule.approvers, exclude=exclude)
                scopes.setdefault(text, []).append(line.label)
        if not scopes:
            return "anyone" + (f" except {exclude}" if exclude else "")
        parts = [f"{', '.join(dict.fromkeys(where))}: {text}" for text, where in scopes.items()]
        if len(parts) == 1:
            return parts[0]
        both = self.candidates()
        also = f" — by name: {Approvers(users=both).describe()}" if both else ""
        return f"only someone allowed by every rule ({'; '.join(parts)}){also}"

    def candidates(self) -> list[str]:
        """Users named in a rule whom every rule allows by name, not excluded."""
        names = dict.fromkeys(u for line in self.lines for u in line.rule.approvers.users)
        return [u for u in names if all(line.rule.approvers.anyone
                                        or u in line.rule.approvers.users
                                        for line in self.lines) and not self.excludes(u)]

    @property
    def nobody(self) -> bool:
        """No one could ever approve: no group, no ``anyone``, and no name every rule
        shares (after excluding the requester)."""
        if any(line.rule.approvers.groups for line in self.lines):
            return False
        if all(line.rule.approvers.anyone for line in self.lines):
            return False
        return not self.candidates()

    @property
    def impossible(self) -> str | None:
        """Why the approvals still needed can never all be given (None: they can): over a
        hosts limit, nobody allowed by every rule, fewer distinct people who may approve
        than approvals needed, or a break-glass grant nobody may give. Groups could hold
        anyone, so a rule naming one is never counted short."""
        if self.over_limit:
            return self.over_limit
        if self.nobody:
            rules = "; ".join(line.describe() for line in self.lines)
            return f"nobody may approve this plan: no one is allowed by every rule that " \
                   f"covers it ({rules})"
        named = not any(line.rule.approvers.groups or line.rule.approvers.anyone
                        for line in self.lines)
        left = [u for u in self.candidates() if u not in self.approved]
        if named and len(left) < self.needed:
            return (f"this plan needs {self.needed} more approval(s) from distinct people, "
                    f"and only {len(left)} may still give one ({', '.join(left) or 'nobody'}"
                    f"; {self._counted_rule()})")
        if self.glass_needed and self.glass_who().startswith("nobody"):
            return "the break-glass grant can come from nobody: set policy.break_glass"
        return None

    def _counted_rule(self) -> str:
        """The rule the count comes from, and the requester it leaves out."""
        line = max(self.lines, key=lambda ln: ln.rule.min_approvals)
        own = f", not the requester {self.requester}" if not self.rule.self_approval else ""
        return f"{line.source}: {self.rule.min_approvals} needed{own}"

    def glass_who(self) -> str:
        if self.break_glass is None:
            return "nobody"
        named = [u for u in self.break_glass.users if not self.excludes(u)]
        return ", ".join([*named, *self.break_glass.groups]) or "nobody (set policy.break_glass)"

    def explain(self) -> list[str]:
        """Every line of the answer, for ``deckhand policy explain`` and MCP."""
        exclude = self.requester if not self.rule.self_approval else None
        out = [line.describe(exclude=exclude) for line in self.lines]
        if self.freeze is not None:
            lifted = " (lifted by break-glass)" if self.break_glass is not None else ""
            out.append(f"freeze: {self.freeze.describe().split('. If')[0]}{lifted}")
        if self.break_glass is not None:
            state = "given" if self.glass_granted else "needed"
            out.append(f"break-glass: one grant from {self.glass_who()} ({state}), on top of "
                       f"the approvals above")
        out += list(self.limits)
        if self.impossible:
            out.append(f"refused: {self.impossible}")
            return [*out, "still needed: none can complete it — change the plan or the rule"]
        glass = f", and the break-glass grant from {self.glass_who()}" if self.glass_needed \
            else ""
        out.append(f"still needed: {self.needed} approval(s) from {self.who()}{glass}")
        return out


@dataclass
class PlanSubject:
    """A plan not stored as a run yet, as the rules see it (nothing approved)."""

    environments: list[str]
    reach: dict[str, list[str]]
    requested_by: str
    scopes: list[str]
    break_glass: str | None = None
    approvals: Sequence[Approved] = ()

    @classmethod
    def of(cls, targets: PlanTargets, *, requested_by: str,
           break_glass: str | None = None) -> PlanSubject:
        return cls(targets.environments, {e: list(h) for e, h in targets.reach.items()},
                   requested_by, targets.scopes, break_glass)


def of_scopes(scopes: Iterable[str], *, requested_by: str = "") -> PlanSubject:
    """A subject known only by its policy scopes (a schedule's stored environments)."""
    listed = list(scopes)
    return PlanSubject([s for s in listed if s != UNSCOPED], {}, requested_by, listed)


def eligibility(subject: Subject, policy: Policy, *, now: float | None = None) -> Eligibility:
    """The answer for ``subject`` under ``policy`` at ``now`` (None: the wall clock)."""
    lines = tuple(_lines(subject, policy))
    moment = datetime.fromtimestamp(time.time() if now is None else now, UTC)
    approvals = subject.approvals
    return Eligibility(
        lines=lines, rule=policy.strictest(subject.scopes), requester=subject.requested_by,
        approved=tuple(a.user for a in approvals),
        env_approvals=sum(1 for a in approvals if not (a.break_glass and subject.break_glass)),
        break_glass=(Approvers(users=policy.break_glass.users, groups=policy.break_glass.groups)
                     if subject.break_glass else None),
        glass_granted=bool(subject.break_glass) and any(a.break_glass for a in approvals),
        freeze=frozen(policy.freeze, subject.scopes, moment),
        over_limit=hosts_problem(policy.limits, subject.reach),
        limits=tuple(explain_limits(policy.limits, subject.reach, subject.scopes)))


def _lines(subject: Subject, policy: Policy) -> list[RuleLine]:
    """A line per rule, then one per layer over the same scope (docs/services.md 1.4:
    the organisation's rule, the owners, naming where each is written)."""
    out: list[RuleLine] = []
    for scope in subject.scopes:
        if scope == UNSCOPED:
            own = _unscoped_lines(subject, policy)
            why = own[-1].why
        else:
            hosts = subject.reach.get(scope, [])
            why = f"touches {', '.join(hosts)}" if hosts else f"changes {scope}"
            # another service's scope, reached through a shared host: its layers alone
            own = [] if scope in policy.foreign else [_env_line(scope, why, policy)]
        out += own + [RuleLine(scope, source, why, rule, layer=_layer(scope, source, policy))
                      for source, rule in policy.layers_of(scope)]
    return out


def _layer(scope: str, source: str, policy: Policy) -> str:
    """The layer a source names (``owners: …``); for another service's scope, the layer of
    its rules (its own rule, the first, is no layer of it)."""
    if scope in policy.foreign:
        source = source.removeprefix(f"{scope}: ")
        return source.split(": ")[0] if ": " in source else ""
    return source.split(": ")[0]


def _env_line(scope: str, why: str, policy: Policy) -> RuleLine:
    if scope in policy.environments:
        source = policy.sources.get(scope, f"policy.environments.{scope}")
        return RuleLine(scope, source, why, policy.environments[scope])
    source = policy.sources.get(scope, "policy.default")
    return RuleLine(scope, f"{source} ({scope} has no entry)", why, policy.default)


def _unscoped_lines(subject: Subject, policy: Policy) -> list[RuleLine]:
    why = ("names no environment" if not subject.environments
           else "runs outside every environment (local or ad-hoc hosts)")
    if policy.unscoped is not None:
        return [RuleLine(UNSCOPED, policy.sources.get(UNSCOPED, "policy.unscoped"), why,
                         policy.unscoped)]
    every = [RuleLine(UNSCOPED, f"policy.environments.{name} (no policy.unscoped: every rule)",
                      why, rule) for name, rule in policy.environments.items()]
    return [*every, RuleLine(UNSCOPED, "policy.default (no policy.unscoped: every rule)", why,
                             policy.default)]


def shared_host_notes(inventory: Inventory, policy: Policy) -> list[str]:
    """For ``deckhand check``: each host listed in several environments, and what follows."""
    out = []
    for host in inventory.hosts:
        envs = [name for name, e in inventory.environments.items() if host in e.hosts]
        if len(envs) < 2:
            continue
        ruled = [f"{e} (policy.environments.{e})" if e in policy.environments
                 else f"{e} (policy.default)" for e in envs]
        out.append(f"host {host} is in {', '.join(envs)}: any step touching it is approved, "
                   f"frozen, locked and promoted under all of {'; '.join(ruled)} — the "
                   f"strictest of each")
    return out


def _names(approvers: Approvers, *, exclude: str | None) -> str:
    if approvers.anyone:
        return "anyone" + (f" except {exclude}" if exclude else "")
    kept = Approvers(users=[u for u in approvers.users if u != exclude], groups=approvers.groups)
    return kept.describe()


def unapprovable(targets: PlanTargets, policy: Policy, *, requested_by: str) -> str | None:
    """Why a plan with these targets would wait for approval forever (``impossible``: a
    hosts limit, nobody allowed, too few distinct people for the count), or None."""
    return eligibility(PlanSubject.of(targets, requested_by=requested_by), policy).impossible
