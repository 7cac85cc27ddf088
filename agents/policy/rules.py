"""The team's rules as data: approvers, approval counts, promotion order, locks.

How the rules apply to a run (who may approve or steer it now) is ``agents.policy.approvals``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from agents.plan.targets import UNSCOPED
from agents.policy.freeze import BreakGlass, FreezeWindow
from agents.policy.limits import Limits

__all__ = ["OTHER_SCOPES", "UNSCOPED", "Approvers", "EnvPolicy", "Layer", "Policy"]

OTHER_SCOPES = "*"
"""The ``Policy.layers`` key for every scope without its own entry (an environment the
service does not list, say): its layers apply there, so no scope escapes them."""


class Approvers(BaseModel):
    """People allowed to approve: Slack user ids and user-group ids (or terminal user names).

    Empty lists mean nobody: "anyone" is only ever the explicit ``anyone: true`` (a typo or
    an emptied list must not open an environment). ``deckhand check`` refuses a written
    rule that names nobody.
    """

    model_config = ConfigDict(extra="forbid")

    users: list[str] = Field(default_factory=list)
    groups: list[str] = Field(default_factory=list)
    anyone: bool = Field(default=False, description="anyone may approve (say so explicitly)")

    @property
    def nobody(self) -> bool:
        return not (self.anyone or self.users or self.groups)

    def allows(self, user: str, user_groups: Iterable[str] = ()) -> bool:
        if self.anyone:
            return True
        return user in self.users or bool(set(user_groups) & set(self.groups))

    def describe(self) -> str:
        if self.anyone:
            return "anyone"
        names = [f"<@{u}>" if u.startswith(("U", "W")) else u for u in self.users]
        names += [f"<!subteam^{g}>" if g.startswith("S") else g for g in self.groups]
        return ", ".join(names) or "nobody"


class EnvPolicy(BaseModel):
    """Rules for one environment."""

    model_config = ConfigDict(extra="forbid")

    approvers: Approvers = Field(default_factory=Approvers)
    min_approvals: int = Field(default=1, ge=1, le=10, strict=True)
    self_approval: bool = True
    confirm: bool = False
    unattended: bool = False
    approval_ttl: float = Field(default=3600.0, gt=0, description="seconds an approval stays valid")
    lock: Literal["wait", "refuse"] = "refuse"
    lock_hosts: bool = Field(default=False, description="also lock each host a run touches, "
                             "not only the environment (hosts shared between services are "
                             "always locked)")


NEUTRAL = EnvPolicy(approvers=Approvers(anyone=True), unattended=True,
                    approval_ttl=366 * 86400.0, lock="wait")
"""A rule that changes nothing when combined with others (``strictest``: max, all, any,
min): the fields a layer does not set take these, e.g. the owners layer's (approvers only)."""

Layer = tuple[str, EnvPolicy]
"""One more rule over a scope, and where it is written (``deckhand.yml:14 policy…``)."""


class Policy(BaseModel):
    """The team's deployment rules, loaded from the ``policy`` section of the config."""

    model_config = ConfigDict(extra="forbid")

    promotion: list[str] = Field(default_factory=list,
                                 description="environments in the order changes must pass them")
    require_rollback: bool = True
    max_replans: int = Field(default=1, ge=0, le=5)
    on_failure: Literal["finish", "cancel"] = "finish"
    pause_timeout: float = Field(default=1800.0, gt=0, description="seconds a paused run "
                                 "waits for Resume before it is rolled back")
    default: EnvPolicy = Field(default_factory=lambda: EnvPolicy(approvers=Approvers(anyone=True)))
    """Environments without an entry (and sharing no host with one): anyone, unless written."""
    environments: dict[str, EnvPolicy] = Field(default_factory=dict)
    freeze: list[FreezeWindow] = Field(default_factory=list)
    break_glass: BreakGlass = Field(default_factory=BreakGlass)
    """Who grants the extra approval a break-glass run needs during a freeze."""
    unscoped: EnvPolicy | None = Field(
        default=None, description="rules for changes outside every environment (local "
        "commands, ad-hoc host groups); unset: all configured rules apply at once")
    limits: dict[str, Limits] = Field(default_factory=dict)
    """Blast-radius limits per environment, checked at approval (``agents.policy.limits``)."""
    layers: dict[str, list[Layer]] = Field(default_factory=dict, exclude=True)
    """Scope -> further rules that must allow too (docs/services.md 1.4): the organisation's
    rule, the service's owners, the rules of another service sharing a host. Built at load
    (``agents.policy.layers``), never written; empty for a config without any."""
    sources: dict[str, str] = Field(default_factory=dict, exclude=True)
    """Scope -> where this policy's own rule for it is written (``services/api.yml:12``),
    for ``policy explain`` and ``check``; empty: named by its policy path alone."""
    _foreign: dict[str, tuple[str, str]] = PrivateAttr(default_factory=dict)
    # private: a config could otherwise name its own environment foreign and drop its rule

    @property
    def foreign(self) -> Mapping[str, tuple[str, str]]:
        """Scopes of another service reached through a shared host (``web/production`` ->
        ``("web", "production")``, docs/services.md 2.5): governed by its layers alone
        (that service's rule, organisation and owners), never by this policy's own rules."""
        return self._foreign

    def add_foreign(self, label: str, service: str, environment: str) -> None:
        """Make ``label`` a scope of ``service``'s ``environment`` (its layers come apart)."""
        self._foreign[label] = (service, environment)

    def for_env(self, environment: str) -> EnvPolicy:
        return self.environments.get(environment, self.default)

    def rules(self, scopes: Iterable[str]) -> list[EnvPolicy]:
        """Every rule that governs ``scopes`` (environment names and UNSCOPED), each
        scope's layers included: all of them must allow."""
        out: list[EnvPolicy] = []
        for scope in scopes:
            if scope in self.foreign:
                pass  # another service's rules, all of them in its layers
            elif scope != UNSCOPED:
                out.append(self.for_env(scope))
            elif self.unscoped is not None:
                out.append(self.unscoped)
            else:
                out += [*self.environments.values(), self.default]
            out += [rule for _, rule in self.layers_of(scope)]
        return out or [self.default, *(rule for _, rule in self.layers_of(OTHER_SCOPES))]

    def layers_of(self, scope: str) -> list[Layer]:
        """The further rules over ``scope`` (its own entry, else those of every other)."""
        found = self.layers.get(scope)
        return found if found is not None else self.layers.get(OTHER_SCOPES, [])

    def strictest(self, environments: Iterable[str]) -> EnvPolicy:
        """The combined rule for a plan touching several environments (or UNSCOPED)."""
        rules = self.rules(environments)
        return EnvPolicy(
            min_approvals=max(r.min_approvals for r in rules),
            self_approval=all(r.self_approval for r in rules),
            confirm=any(r.confirm for r in rules),
            unattended=all(r.unattended for r in rules),
            approval_ttl=min(r.approval_ttl for r in rules),
            lock="refuse" if any(r.lock == "refuse" for r in rules) else "wait",
            lock_hosts=any(r.lock_hosts for r in rules),
        )

    def may_approve(self, user: str, user_groups: Iterable[str],
                    environments: Iterable[str]) -> bool:
        """Whether ``user`` is an allowed approver for every one of ``environments``."""
        groups = list(user_groups)
        return all(r.approvers.allows(user, groups) for r in self.rules(environments))

    def previous_stage(self, environment: str) -> str | None:
        """The environment a change must pass before ``environment``, if any."""
        if environment in self.promotion:
            index = self.promotion.index(environment)
            return self.promotion[index - 1] if index > 0 else None
        return None
