"""A service's policy over the organisation's: layers, never a merge (docs/services.md 1.4).

A service may tighten policy, never loosen it. Each source stays a rule of its own in
``Policy.layers`` (the organisation's rule of the environment's name, else its default; the
service's owners; the rules of another service sharing a host), and every layer must allow,
as several environments' rules do: ``Policy.rules``, ``strictest`` and ``may_approve`` read
them. The policy-wide fields are combined here, each by its strictest reading. Only what the
organisation *writes* counts: a field it leaves unset is neutral, so an organisation rule
that names approvers does not also, silently, turn every service's ``unattended`` off.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from agents.policy.freeze import FreezeWindow
from agents.policy.limits import Limits
from agents.policy.rules import NEUTRAL, OTHER_SCOPES, UNSCOPED, Approvers, EnvPolicy, Layer, Policy

ORGANISATION = "organisation"
"""How the organisation's layers are named (``organisation: deckhand.yml:14 policy.…``)."""

Where = tuple[str | int, ...]
At = Callable[[Where], str]
"""Where a path inside a ``policy`` section is written: ``services/api.yml:12 policy.x``."""


@dataclass(frozen=True)
class Written:
    """A policy as written in one file, and how to name where each of its parts is."""

    policy: Policy
    at: At | None = None
    """None: the rules are named by their policy path alone (a config without services)."""


def layered(own: Written | None, org: Written | None, environments: Sequence[str], *,
            service: str, owners: tuple[Approvers, str] | None = None
            ) -> tuple[Policy, list[tuple[Where, str]]]:
    """The policy service ``service`` (of ``environments``) runs under: its own policy (else
    the organisation's), the organisation's as layers, and its owners (approvers, and where
    they are written) as one more. Also the problems (paths in the service's ``policy``)."""
    if own is None:
        base = _org_alone(org, environments, service) if org else Policy()
        problems: list[tuple[Where, str]] = []
    else:
        base, problems = _over_org(own, org, environments, service)
    if owners is not None:
        rule = NEUTRAL.model_copy(update={"approvers": owners[0]})
        for scope in _keys(environments):
            base.layers.setdefault(scope, []).append((owners[1], rule))
    return base, problems


def _keys(environments: Sequence[str]) -> list[str]:
    return [*environments, UNSCOPED, OTHER_SCOPES]


def _org_alone(org: Written, environments: Sequence[str], service: str) -> Policy:
    """A service that writes no policy takes the organisation's: its promotion order over
    the service's environments, its freezes for this service."""
    base = org.policy.model_copy(deep=True)
    base.promotion = [e for e in base.promotion if e in environments]
    base.freeze = _freezes_for(org.policy, service)
    base.sources = _sources(org, environments)
    return base


def _over_org(own: Written, org: Written | None, environments: Sequence[str], service: str
              ) -> tuple[Policy, list[tuple[Where, str]]]:
    base = own.policy.model_copy(deep=True)
    base.sources = _sources(own, environments)
    if org is None:
        return base, []
    o = org.policy
    for scope in _keys(environments):
        found = _org_rules(org, scope, environments)
        if found:
            base.layers[scope] = found
    written = o.model_fields_set
    if "require_rollback" in written:
        base.require_rollback = base.require_rollback or o.require_rollback
    if "max_replans" in written:
        base.max_replans = min(base.max_replans, o.max_replans)
    if "on_failure" in written and o.on_failure == "cancel":
        base.on_failure = "cancel"
    if "pause_timeout" in written:
        base.pause_timeout = min(base.pause_timeout, o.pause_timeout)
    base.freeze = [*_freezes_for(o, service), *base.freeze]
    base.break_glass = o.break_glass.model_copy(deep=True)  # main config only
    base.limits = _limits(base.limits, o.limits)
    problems = _promotion(own, org, environments)
    if not own.policy.promotion:
        base.promotion = [e for e in o.promotion if e in environments]
    return base, problems


def _sources(written: Written, environments: Iterable[str]) -> dict[str, str]:
    """Where ``written``'s own rule for each scope is."""
    policy = written.policy
    if written.at is None:
        return {}
    default = (written.at(("default",)) if "default" in policy.model_fields_set
               else f"{written.at(())} (default: anyone)")
    out = {env: written.at(("environments", env)) if env in policy.environments else default
           for env in environments}
    out[OTHER_SCOPES] = default
    if policy.unscoped is not None:
        out[UNSCOPED] = written.at(("unscoped",))
    return out


def _org_rules(org: Written, scope: str, environments: Sequence[str]) -> list[Layer]:
    """The organisation's layer over ``scope``: its rule of that name, else its default
    (written ones only); outside every environment, its ``unscoped`` rule, else every
    rule of the service's environments."""
    o, where = org.policy, org.at or (lambda path: ".".join(("policy", *map(str, path))))

    def at(path: Where) -> str:
        return f"{ORGANISATION}: {where(path)}"

    if scope == UNSCOPED:
        if o.unscoped is not None:
            return [(at(("unscoped",)), as_layer(o.unscoped))]
        return [layer for env in [*environments, OTHER_SCOPES]
                for layer in _org_rules(org, env, environments)]
    if scope in o.environments:
        return [(at(("environments", scope)), as_layer(o.environments[scope]))]
    if "default" in o.model_fields_set:
        return [(at(("default",)), as_layer(o.default))]
    return []


def as_layer(rule: EnvPolicy) -> EnvPolicy:
    """``rule`` as a layer: what it writes, and neutral values for what it does not."""
    return NEUTRAL.model_copy(update={name: getattr(rule, name)
                                      for name in rule.model_fields_set})


def _freezes_for(org: Policy, service: str) -> list[FreezeWindow]:
    """The organisation's freeze windows that apply to ``service``."""
    return [w.model_copy(deep=True) for w in org.freeze
            if w.services is None or service in w.services]


def _limits(own: dict[str, Limits], org: dict[str, Limits]) -> dict[str, Limits]:
    """Per environment, each limit the smaller of both (one side unset: the other's)."""
    out = {env: limits.model_copy() for env, limits in own.items()}
    for env, theirs in org.items():
        mine = out.get(env, Limits())
        out[env] = Limits(runs_per_hour=_smaller(mine.runs_per_hour, theirs.runs_per_hour),
                          hosts_per_run=_smaller(mine.hosts_per_run, theirs.hosts_per_run))
    return out


def _smaller(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _promotion(own: Written, org: Written, environments: Sequence[str]
               ) -> list[tuple[Where, str]]:
    """The service's order must keep the organisation's (over its environments) as a
    subsequence: it may add stages, never skip or swap one."""
    theirs = [e for e in org.policy.promotion if e in environments]
    mine = own.policy.promotion
    if not mine or _is_subsequence(theirs, mine):
        return []
    at = org.at(("promotion",)) if org.at else "the main config"
    return [(("promotion",), f"{' -> '.join(mine)} does not keep the organisation's order "
             f"{' -> '.join(theirs)} ({at}): a service may add stages, never skip or "
             f"reorder one")]


def _is_subsequence(short: Sequence[str], long: Sequence[str]) -> bool:
    rest = iter(long)
    return all(item in rest for item in short)


FIELDS = {"min_approvals": max, "approval_ttl": min}
"""The numeric fields of a rule and how layers combine them (the rest are flags)."""


def winners(policy: Policy, scope: str) -> list[str]:
    """For ``deckhand check``: each field of ``scope``'s rule that several layers set
    differently, the value that applies and the layer it comes from."""
    own = policy.unscoped if scope == UNSCOPED and policy.unscoped else policy.for_env(scope)
    source = policy.sources.get(scope, "policy")
    rules = [(source, own), *policy.layers_of(scope)]
    if len(rules) < 2:
        return []
    out = [_approvers_line(rules)] if sum(not r.approvers.anyone for _, r in rules) > 1 else []
    for name, pick in FIELDS.items():
        out += _numeric(name, pick, rules)
    for name, strict in (("self_approval", False), ("confirm", True), ("unattended", False),
                         ("lock", "refuse"), ("lock_hosts", True)):
        out += _flag(name, strict, rules)
    return out


def _approvers_line(rules: list[Layer]) -> str:
    named = [f"{r.approvers.describe()} ({source})" for source, r in rules
             if not r.approvers.anyone]
    return f"approvers: someone allowed by every layer: {'; '.join(named)}"


def _numeric(name: str, pick: Callable[[Iterable[float]], float], rules: list[Layer]
             ) -> list[str]:
    values = [(source, getattr(r, name)) for i, (source, r) in enumerate(rules)
              if i == 0 or _sets(r, name)]  # the service's own rule always has its say
    if len({v for _, v in values}) < 2:
        return []
    best = pick(v for _, v in values)
    wins = next(source for source, v in values if v == best)
    others = ", ".join(f"{source} ({_show(v)})" for source, v in values if v != best)
    return [f"{name} {_show(best)} — {wins} wins over {others}"]


def _flag(name: str, strict: object, rules: list[Layer]) -> list[str]:
    values = [(source, getattr(r, name)) for i, (source, r) in enumerate(rules)
              if i == 0 or _sets(r, name)]
    if len({v for _, v in values}) < 2:
        return []
    wins = next(source for source, v in values if v == strict)
    others = ", ".join(source for source, v in values if v != strict)
    return [f"{name} {_show(strict)} — {wins} wins over {others}"]


def _sets(rule: EnvPolicy, name: str) -> bool:
    """Whether a layer has a say on ``name`` (a neutral value has none)."""
    return bool(getattr(rule, name) != getattr(NEUTRAL, name))


def _show(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}s"
    return str(value)
