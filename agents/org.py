"""An organisation's services (docs/services.md): the main config's ``services:`` loaded
into one ``Config`` per service, or a config without it as its one (legacy) service.

Every problem of every service file, and every problem between services (names,
duplicates, shared hosts, channels), is collected into one ``ConfigError``, each at its
file:line. Until the faces learn several services (later steps of issue 40), they take
``Org.only()``, which refuses an organisation of more than one service in one line.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.config import (
    SERVICE_NAME,
    Config,
    OrgWide,
    load_main,
    load_service,
    policy_problems,
    single_config,
)
from agents.config_cache import CACHE_DIR, CheckVerdicts, ParseCache
from agents.errors import ManyServices, ServiceUnknown
from agents.policy.eligibility import PlanSubject, RuleLine, eligibility, of_scopes
from agents.policy.layers import winners
from agents.policy.rules import Policy
from tools.errors import ConfigError, Problem
from tools.inventory import Environment, Host
from tools.yamlsrc import Located, load_yaml_file

REQUEST_WORDS = frozenset({"to", "of", "in", "for", "on", "all", "previous", "deploy",
                           "status"})
"""Words requests use around names: a service named so could not be told apart (2.1)."""


HostId = tuple[str, ...]
"""A host's identity: ``("name", NAME)``, and for an SSH host also ``("ssh", ADDRESS, PORT)``."""


@dataclass(frozen=True)
class OrgIndex:
    """What the faces need to know about every service without touching its ``Config``
    (docs/services.md 1.2), computed once per load."""

    names: dict[str, str] = field(default_factory=dict)
    """Lowercased service name -> its name."""
    hosts: dict[HostId, list[tuple[str, str]]] = field(default_factory=dict)
    """Host identity -> every (service, environment) that lists it."""
    owned: dict[str, list[str]] = field(default_factory=dict)
    """A Slack user or group id of an owner -> the services it owns."""
    scopes: list[tuple[str, str]] = field(default_factory=list)
    """Every (service, environment)."""

    @classmethod
    def of(cls, services: dict[str, Config]) -> OrgIndex:
        index = cls()
        for name, config in services.items():
            index.names[name.lower()] = name
            index.scopes.extend((name, env) for env in config.inventory.environments)
            for env_name, env in config.inventory.environments.items():
                for host in env.hosts:
                    found = config.inventory.hosts.get(host)
                    for identity in _identities(host, found) if found else [("name", host)]:
                        index.hosts.setdefault(identity, []).append((name, env_name))
            who = config.owners.approvers if config.owners else None
            for owner in [*who.users, *who.groups] if who else []:
                index.owned.setdefault(owner, []).append(name)
        return index

    def owned_by(self, user: str, groups: list[str] | None = None) -> list[str]:
        """The services ``user`` (or one of ``groups``) owns, in config order."""
        found = [s for who in [user, *(groups or [])] for s in self.owned.get(who, [])]
        return list(dict.fromkeys(found))


@dataclass
class Org:
    """Every service deckhand serves from one main config."""

    path: Path
    services: dict[str, Config]
    legacy: str | None = None
    """The service that owns records written without a service (section 3): the only one
    of a config without ``services:``, else the one ``legacy_service:`` names, if any."""
    channels: dict[str, str] = field(default_factory=dict)
    """A channel's default service (``channels:``; read by the faces in a later step)."""
    split: bool = False
    """Whether the file has ``services:`` (False: the file itself is the one service)."""
    index: OrgIndex = field(default_factory=OrgIndex)
    policy: Policy | None = None
    """The main config's own ``policy`` (every service's base layer); None: not written."""

    def __post_init__(self) -> None:
        if not self.index.names:
            self.index = OrgIndex.of(self.services)

    def service_of(self, key: str | None) -> Config:
        """The service a record names (None: the legacy one); ServiceUnknown otherwise,
        never another service's config."""
        name = self.legacy if key is None else key
        if name is None or name not in self.services:
            said = "records from before services" if key is None else f"service {key!r}"
            raise ServiceUnknown(f"{said}: not a service of {self.path.name} (known: "
                                 f"{', '.join(self.services)}); nothing is done under "
                                 f"another service's rules")
        return self.services[name]

    def only(self) -> Config:
        """The one service; ManyServices when there are several (the faces serve one
        until multi-service support lands)."""
        if len(self.services) == 1:
            return next(iter(self.services.values()))
        raise ManyServices(
            f"{self.path.name} has {len(self.services)} services "
            f"({', '.join(self.services)}): deckhand serves one service per config until "
            f"multi-service support lands in a later step (issue 40); `deckhand check` "
            f"validates them all")


def load_org(path: Path | str, *, playbooks: bool = True, cache: bool = False) -> Org:
    """Load the config at ``path`` and, with ``services:``, every service it names; one
    ConfigError lists every problem of every file.

    For an organisation (docs/services.md section 4): ``playbooks`` False skips each
    service's playbook checks (half a load: a start does, ``check`` and a reload do not;
    every plan is validated when it is made anyway). ``cache`` reads and keeps, in the
    state directory (``agents.config_cache``), each service file's parse and which services
    passed the playbook checks, so the next load parses and checks only what changed. A
    config without ``services:`` is loaded and checked in full, as before."""
    with _no_collection():
        return _load_org(Path(path).resolve(), playbooks=playbooks, cache=cache)


@contextmanager
def _no_collection() -> Iterator[None]:
    """The cyclic collector paused while a load builds ~100,000 objects that all stay: it
    would otherwise walk them again and again, ~45% of a 200-service load (docs/services.md
    section 4). What a load leaves unreachable is collected once it is back on."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _load_org(path: Path, *, playbooks: bool, cache: bool) -> Org:
    doc = load_yaml_file(path)
    if not isinstance(doc.data, dict) or "services" not in doc.data:
        config = single_config(path, doc)
        return Org(path, {config.name: config}, legacy=config.name)
    org, problems = load_main(path, doc)
    folder = org.state_dir / CACHE_DIR
    parse = ParseCache(folder) if cache else None
    verdicts = CheckVerdicts(folder) if cache and playbooks else None
    services: dict[str, Config] = {}
    origins: dict[str, tuple[Path, Located]] = {}
    loaded_from: dict[Path, str] = {}
    for key, body in org.services.items():
        name = str(key)
        here = doc.where(("services", name))
        problems += _name_problems(name, here)
        source = _source(key, body, path, doc, here, loaded_from, problems,
                         parse.load if parse else load_yaml_file)
        if source is None:
            continue
        loaded, found = load_service(name, *source, org, playbooks=playbooks,
                                     verdicts=verdicts,
                                     parse=parse.load if parse else load_yaml_file)
        problems += found
        if loaded is not None:
            services[name], origins[name] = loaded, source
    problems += _between(org, services, origins, doc)
    if parse is not None:  # every service file was read: keep exactly their parses
        parse.save()
    if verdicts is not None:
        verdicts.save()  # the services that passed, even if another one failed
    if problems:
        raise ConfigError(problems)
    index = OrgIndex.of(services)
    share_layers(services, index)
    return Org(path, services, legacy=org.legacy, channels=org.channels, split=True,
               policy=org.policy, index=index)


def _name_problems(name: str, here: str) -> list[Problem]:
    if not SERVICE_NAME.match(name):
        return [Problem(here, f"{name!r} is not a service name: lowercase letters, digits, "
                              f"- and _, starting with a letter (at most 63)")]
    if name in REQUEST_WORDS:
        return [Problem(here, f"{name!r} is a word requests use ({', '.join(sorted(REQUEST_WORDS))}"
                              f"): name the service otherwise")]
    return []


def _source(key: Any, body: Any, main: Path, doc: Located, here: str,
            loaded_from: dict[Path, str], problems: list[Problem],
            parse: Callable[[Path], Located]) -> tuple[Path, Located] | None:
    """Where service ``key`` is written: its own file (relative to the main config), or
    the main config's node ``services.KEY``. None (a problem said why) if neither."""
    name = str(key)
    if isinstance(body, dict):
        return main, doc.under(("services", key))
    if not isinstance(body, str) or not body.strip():
        problems.append(Problem(here, "must be the path of the service's config file "
                                      "(relative to this file) or an inline mapping"))
        return None
    file = (main.parent / Path(body).expanduser()).resolve()
    if file == main:
        problems.append(Problem(here, "names the main config itself; give the service's "
                                      "own file, or its sections inline"))
        return None
    if file in loaded_from:
        problems.append(Problem(here, f"loads the same file as service {loaded_from[file]!r} "
                                      f"({file}); each service has its own"))
        return None
    loaded_from[file] = name
    try:
        return file, parse(file)
    except ConfigError as exc:  # said where the main config names it, and what is wrong
        problems += [Problem(here, f"{p.where}: {p.message}" if p.where else p.message)
                     for p in exc.problems]
        return None


def _between(org: OrgWide, services: dict[str, Config],
             origins: dict[str, tuple[Path, Located]], doc: Located) -> list[Problem]:
    """What no one service can see: names that are also environments, hosts two services
    share, channels and ``legacy_service`` naming no service, the main policy's names."""
    declared = {str(name) for name in org.services}  # one that failed was said already
    known = ", ".join(sorted(declared))
    out: list[Problem] = []
    environments: dict[str, Environment] = {}
    for name, config in services.items():
        for env_name, env in config.inventory.environments.items():
            environments.setdefault(env_name, env)
            out += [Problem(doc.where(("services", word)), f"service {word!r} is also an "
                            f"environment (or alias) of {name}: requests could not tell "
                            f"them apart") for word in (env_name, *env.aliases)
                    if word in declared]
    out += _shared_hosts(services, origins)
    if org.legacy is not None and org.legacy not in declared:
        out.append(Problem(doc.where(("legacy_service",)),
                           f"unknown service {org.legacy!r} (known: {known})"))
    out += [Problem(doc.where(("channels", channel)),
                    f"channel {channel} names unknown service {service!r} (known: {known})")
            for channel, service in org.channels.items() if service not in declared]
    if org.policy is not None and set(services) == declared:  # (else: knock-on problems)
        # its rules go by environment name, across every service
        out += [Problem(doc.where(("policy", *where)), message)
                for where, message in policy_problems(org.policy, environments)]
    return out


def _shared_hosts(services: dict[str, Config],
                  origins: dict[str, tuple[Path, Located]]) -> list[Problem]:
    """One host name meaning two machines in two services: the name would join rules and
    locks that are not one machine's (a machine under two names is one host, 2.5)."""
    seen: dict[str, tuple[str, Host]] = {}
    out: list[Problem] = []
    for name, config in services.items():
        doc = origins[name][1]
        for host_name, host in config.inventory.hosts.items():
            first, theirs = seen.setdefault(host_name, (name, host))
            if first == name or _machine(theirs) == _machine(host):
                continue
            out.append(Problem(doc.where(("inventory", "hosts", host_name)),
                               f"host {host_name!r} is {theirs.label} in service {first} but "
                               f"{host.label} here: one name is one machine across services "
                               f"(its rules and locks are shared); rename one of them"))
    return out


def _machine(host: Host) -> tuple[str, ...]:
    return (host.connection,) if host.connection == "local" else (
        host.connection, host.address, str(host.port))


def _identities(name: str, host: Host) -> list[HostId]:
    """What makes two inventory entries one machine (docs/services.md 1.2)."""
    found: list[HostId] = [("name", name)]
    if host.connection == "ssh":
        found.append(("ssh", str(host.address), str(host.port)))
    return found


def policy_notes(org: Org) -> list[str]:
    """For ``deckhand check``: each service's owners; per service and environment, which
    layer wins each field several layers set (docs/services.md 1.4); and the environments
    no organisation rule names, which fall to its default (rules match names, section 6)."""
    out: list[str] = []
    for name, config in org.services.items():
        label = f"{name}/" if org.split else ""
        if config.owners is not None:
            out.append(f"{name}: owners {config.owners.approvers.describe()} approve its runs, "
                       f"within every environment's rules ({config.owners.source})")
        out += _open_environments(label, config)
        for env in config.inventory.environments:
            out += [f"{label}{env}: {line}" for line in winners(config.policy, env)]
            answer = eligibility(of_scopes([env]), config.policy)
            if answer.nobody:
                out.append(f"{label}{env}: nobody is allowed by every layer, so no plan "
                           f"touching it can be approved: {answer.who()}")
        if org.policy is not None and org.policy.environments:
            default = ("its default" if "default" in org.policy.model_fields_set
                       else "nothing of the organisation's")
            out += [f"{name}/{env}: no organisation rule of that name, so {default} applies "
                    f"(organisation rules match names)"
                    for env in config.inventory.environments
                    if env not in org.policy.environments]
    return out


def _open_environments(label: str, config: Config) -> list[str]:
    """Environments anyone may approve only because nothing was written (issue 41.6):
    no entry, no written ``policy.default``, no layer naming approvers."""
    policy = config.policy
    if "default" in policy.model_fields_set:
        return []  # written: open (or not) on purpose
    open_ = [env for env in config.inventory.environments
             if env not in policy.environments
             and not any(not rule.approvers.anyone for _, rule in policy.layers.get(env, []))]
    if not open_:
        return []
    return [f"{label}{', '.join(open_)}: OPEN — anyone may approve, the requester included, "
            f"because no `policy.environments` entry and no `policy.default` says who. Write "
            f"`policy.default: {{approvers: {{anyone: true}}}}` to keep that on purpose, or "
            f"an entry naming the approvers"]


def cross_service_hosts(org: Org) -> tuple[list[str], list[str]]:
    """For ``deckhand check``: each host a service shares with another and every rule that
    results for a run touching it (notes), and where no user is allowed by name by all of
    those rules, e.g. both services' owners (warnings: group overlap is unknown at load;
    such a plan is refused as unapprovable when it is made)."""
    notes: list[str] = []
    warnings: list[str] = []
    for name, config in org.services.items():
        inventory, policy = config.inventory, config.policy
        for host_name, foreign in inventory.shared.items():
            own = [e for e, env in inventory.environments.items() if host_name in env.hosts]
            scopes = [*own, *foreign]
            subject = PlanSubject(own, {s: [host_name] for s in scopes}, "", scopes)
            answer = eligibility(subject, policy)
            rule = policy.strictest(scopes)
            host = inventory.hosts[host_name]
            notes.append(f"{name}: host {host_name} ({host.lock_id}) is also in "
                         f"{', '.join(foreign)}: a run of {name} touching it needs every "
                         f"rule of {', '.join(scopes)} — "
                         f"{'; '.join(line.describe() for line in answer.lines)}; their "
                         f"freezes and limits apply, and it holds host lock {host.lock_id} "
                         f"(lock: {rule.lock})")
            warnings += _by_name(name, host_name, answer.lines)
    return notes, warnings


def _by_name(name: str, host: str, lines: tuple[RuleLine, ...]) -> list[str]:
    """A warning if no user named anywhere is allowed by every line's approvers."""
    strict = [line for line in lines if not line.rule.approvers.anyone]
    named = {u for line in strict for u in line.rule.approvers.users}
    if len(strict) < 2 or any(all(line.rule.approvers.allows(u) for line in strict)
                              for u in named):
        return []
    who = "; ".join(f"{line.label}: {line.rule.approvers.describe()}" for line in strict)
    return [f"{name}: no user is allowed by name by every rule over host {host} ({who}): "
            f"only someone in a group they all allow can approve a run touching it, and "
            f"without one such plans are refused as unapprovable"]


def share_layers(services: dict[str, Config], index: OrgIndex) -> None:
    """A host several services list gets every service's layers (docs/services.md 2.5):
    each service's policy learns the other services' environments listing one of its hosts,
    under their qualified names (``web/production``: that service's rule, its layers, its
    freezes and limits, reasons prefixed ``web/production:``), and its inventory learns
    which hosts reach them (``Inventory.shared``), so plan targets name them exactly for
    the runs that touch such a host."""
    before = {name: config.policy.model_copy(deep=True) for name, config in services.items()}
    for name, config in services.items():
        shared: dict[str, tuple[str, ...]] = {}
        for host_name, host in config.inventory.hosts.items():
            others = _sharing(name, host_name, host, index)
            shared[host_name] = tuple(f"{s}/{e}" for s, e in others)
            for other, theirs in others:
                _take(config.policy, f"{other}/{theirs}", before[other], (other, theirs))
        config.inventory.share(shared)


def _sharing(name: str, host_name: str, host: Host, index: OrgIndex) -> list[tuple[str, str]]:
    """Other services' (service, environment) that list the machine ``host`` is."""
    found = [scope for identity in _identities(host_name, host)
             for scope in index.hosts.get(identity, []) if scope[0] != name]
    return list(dict.fromkeys(found))


def _take(policy: Policy, label: str, theirs: Policy, scope: tuple[str, str]) -> None:
    """Make ``theirs``'s rules over its environment ``scope[1]`` a scope ``label`` of
    ``policy``: governed by those rules alone, never by ``policy``'s own."""
    if label in policy.foreign:
        return
    env = scope[1]
    policy.add_foreign(label, *scope)
    source = theirs.sources.get(env) or (
        f"policy.environments.{env}" if env in theirs.environments else "policy.default")
    policy.layers[label] = [(f"{label}: {where}", rule)
                            for where, rule in [(source, theirs.for_env(env)),
                                                *theirs.layers_of(env)]]
    policy.freeze += [w.model_copy(update={"environments": [label],
                                           "reason": f"{label}: {w.reason}"})
                      for w in theirs.freeze if env in w.environments]
    if env in theirs.limits:
        policy.limits[label] = theirs.limits[env].model_copy()
