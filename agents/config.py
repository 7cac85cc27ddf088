"""Loading deckhand.yml (and its tools.yml): every problem reported at once, with its line."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agents.config_cache import CheckVerdicts, verdict_key
from agents.errors import PlanError
from agents.history.deploys import HistorySettings
from agents.history.retention import RetentionSettings
from agents.plan.model import PLACEHOLDER, SERVICE_PATTERN, Plan
from agents.plan.validation import PlanChecker
from agents.policy.layers import Written, layered
from agents.policy.owners import Owners, Resolved, entity_ref
from agents.policy.owners import resolve as resolve_owners
from agents.policy.rules import EnvPolicy, Policy
from agents.prompts.templates import PromptSet, Template, TemplateRefused, read_template
from agents.requests.phrasing import CaptureError, Phrasing
from agents.requests.playbooks import Playbook
from agents.settings import PlannerEndpoint
from agents.state_dir import PLACEHOLDER as STATE_DIR
from agents.state_dir import resolve_state_dir
from tools import gantz
from tools.catalog import Catalog, Tool, unknown_tool_message
from tools.errors import ConfigError, Problem
from tools.inventory import Environment, Inventory, SSHSettings
from tools.shell import ShellRefused, refusals_in
from tools.sinks import SinkSettings
from tools.yamlsrc import Located, load_yaml_file

SECTIONS = {"vars", "tools", "inventory", "policy", "playbooks", "secrets", "history",
            "retention", "planner", "state_dir", "audit"}
"""A config without ``services:`` (one service; ``service:`` and ``owners`` besides)."""
SERVICE_SECTIONS = frozenset({"service", "vars", "tools", "inventory", "policy", "playbooks",
                              "secrets", "history", "owners"})
"""A service's config: a file named under ``services:``, or an inline mapping there."""
MAIN_SECTIONS = frozenset({"services", "legacy_service", "channels", "owners_map", "vars",
                           "inventory", "policy", "secrets", "retention", "planner",
                           "state_dir", "audit"})
"""A main config with ``services:``: what is organisation-wide (docs/services.md 1.1)."""
ROLE_SECTIONS = {"single": frozenset(SECTIONS | {"service", "owners", "owners_map"}),
                 "service": SERVICE_SECTIONS, "main": MAIN_SECTIONS}
ORG_INVENTORY = frozenset({"known_hosts", "ssh"})
"""The main config's ``inventory``: one SSH pool and known_hosts file for every service."""
PLANNER_KEYS = frozenset({"prompts", *PlannerEndpoint.model_fields})
SERVICE_NAME = re.compile(SERVICE_PATTERN)
BUILTIN_SCOPES = ("host.", "vars.")


class AuditSettings(BaseModel):
    """The ``audit`` section: where a continuous copy of the audit stream goes."""

    model_config = ConfigDict(extra="forbid")

    sink: SinkSettings | None = None
    checkpoint_every: float = Field(
        default=600.0, ge=10, le=86_400,
        description="seconds between the signed checkpoints workers write (with "
                    "DECKHAND_AUDIT_KEY_FILE); `audit verify` fails on entries left unsigned "
                    "for twice as long")


@dataclass
class Config:
    """Everything a deckhand deployment is configured with."""

    path: Path
    catalog: Catalog
    inventory: Inventory
    policy: Policy
    playbooks: list[Playbook]
    vars: dict[str, Any] = field(default_factory=dict)
    secrets: list[str] = field(default_factory=list)
    history: HistorySettings = field(default_factory=lambda: HistorySettings())
    retention: RetentionSettings | None = None
    """None: nothing is ever trimmed."""
    prompts: PromptSet = field(default_factory=PromptSet)
    """The LLM planner's prompt templates (``planner.prompts`` replaces some from files)."""
    state_dir: Path | None = None
    """Where ``{state_dir}`` points (agents.state_dir); None: not resolved (built in code)."""
    uses_state_dir: bool = False
    """Whether the file writes anything under ``{state_dir}``."""
    audit: AuditSettings = field(default_factory=AuditSettings)
    """``audit.sink``: shipped by ``deckhand worker`` or ``deckhand audit ship``."""
    name: str = ""
    """The service's name (docs/services.md): its key under ``services:``, else the file's
    ``service:``, else the file's stem (lowercased, other characters ``-``)."""
    key: str | None = None
    """The name records and store keys carry; None for the legacy service (a config without
    ``services:``, or the one ``legacy_service:`` names), whose records carry none."""
    main_path: Path | None = None
    """The main config this service was loaded from (what a reload reads again); None: the
    file at ``path`` is the whole config."""
    owners: Resolved | None = None
    """Who may approve this service's runs (within its rules; a layer of ``policy``)."""
    planner: PlannerEndpoint = field(default_factory=PlannerEndpoint)
    """The LLM endpoint's settings (``planner:`` besides ``prompts``)."""

    def __post_init__(self) -> None:
        self.name = self.name or service_name_of(self.path)


def service_name_of(path: Path) -> str:
    """A config's service name from its file's stem: lowercased, other characters ``-``."""
    return re.sub(r"[^a-z0-9_-]", "-", path.stem.lower())


def load_config(path: Path | str) -> Config:
    """Load and check a config file without ``services:`` (one service, as before
    services); ConfigError lists every problem with its location. A main config with
    ``services:`` is loaded by ``agents.org.load_org``, as every face does.

    Every part is checked, even after another part failed, so one pass shows everything;
    checks that would only repeat an earlier problem (knock-on errors) are skipped.
    """
    path = Path(path).resolve()
    return single_config(path, load_yaml_file(path))


def single_config(path: Path, doc: Located) -> Config:
    """The one service of the config file at ``path`` (parsed as ``doc``)."""
    loader = _Loader(path, doc)
    config = loader.build()
    if loader.problems or config is None:
        raise ConfigError(loader.problems or [Problem(doc.source, "invalid config")])
    return config


@dataclass
class OrgWide:
    """What a main config with ``services:`` holds for every service (docs/services.md 1.1),
    as each service's ``Config`` takes it."""

    path: Path
    state_dir: Path
    """The organisation's ``{state_dir}``: a service's is ``services/NAME`` in it."""
    services: dict[Any, Any] = field(default_factory=dict)
    """Name -> a path (relative to the main config) or an inline mapping, as written."""
    legacy: str | None = None
    channels: dict[str, str] = field(default_factory=dict)
    vars: dict[str, Any] = field(default_factory=dict)
    secrets: list[str] = field(default_factory=list)
    retention: RetentionSettings | None = None
    prompts: PromptSet = field(default_factory=PromptSet)
    planner: PlannerEndpoint = field(default_factory=PlannerEndpoint)
    audit: AuditSettings = field(default_factory=AuditSettings)
    known_hosts: str | None = None
    ssh: SSHSettings = field(default_factory=SSHSettings)
    policy: Policy | None = None
    """The main config's ``policy`` (None: not written)."""
    policy_at: Callable[[Where], str] | None = None
    """Where a path inside the main config's ``policy`` is written (``deckhand.yml:14 …``)."""
    owners_map: dict[str, list[str]] = field(default_factory=dict)
    """Backstage owner references (in full, ``agents.owners.entity_ref``) -> Slack ids."""
    uses_state_dir: bool = False
    contents: str = ""
    """The main config's sections but ``services`` as read (for ``CheckVerdicts`` keys)."""


def load_main(path: Path, doc: Located) -> tuple[OrgWide, list[Problem]]:
    """The organisation-wide sections of the main config at ``path`` (which has
    ``services:``), and every problem with them."""
    loader = _Loader(path, doc, role="main")
    return loader.build_main(), loader.problems


def load_service(name: str, path: Path, doc: Located, org: OrgWide, *,
                 playbooks: bool = True, verdicts: CheckVerdicts | None = None,
                 parse: Callable[[Path], Located] = load_yaml_file
                 ) -> tuple[Config | None, list[Problem]]:
    """Service ``name`` of ``org``: ``doc`` is its file at ``path``, or the main config's
    node ``services.NAME`` (``Located.under``) for an inline one. ``playbooks`` False
    skips the playbook checks (half a load; ``check`` and a reload run them); with
    ``verdicts``, only a service whose inputs changed since they passed runs them;
    ``parse`` reads its tools file (``agents.config_cache.ParseCache.load``)."""
    loader = _Loader(path, doc, role="service", org=org, name=name)
    loader.playbooks, loader.verdicts, loader.parse = playbooks, verdicts, parse
    config = loader.build()
    return (None if loader.problems else config), loader.problems


Where = tuple[str | int, ...]


class _Loader:
    """One file's (or inline mapping's) sections. ``role``: ``single`` (a config without
    ``services:``), ``main`` (the organisation-wide part of one with it) or ``service``
    (one of its services, built over ``org``); it decides which sections belong."""

    def __init__(self, path: Path, doc: Located, *, role: str = "single",
                 org: OrgWide | None = None, name: str | None = None):
        self.path, self.doc, self.tools_doc = path, doc, doc
        self.role, self.org = role, org
        self.tools_prefix: Where = ("tools",)
        self.problems: list[Problem] = list(doc.problems)
        self.broken_tools: set[str] = set()
        self.name = name or service_name_of(path)
        if org is not None:  # two services' local hosts never share a directory
            self.state_dir = (org.state_dir if name == org.legacy
                              else org.state_dir / "services" / self.name)
        else:
            raw = doc.data.get("state_dir") if isinstance(doc.data, dict) else None
            self.state_dir = resolve_state_dir(path.parent, str(raw) if raw else None)
        self.dirs = {"{config_dir}": str(path.parent), STATE_DIR: str(self.state_dir)}
        self.playbooks: bool = True
        self.verdicts: CheckVerdicts | None = None
        self.parse: Callable[[Path], Located] = load_yaml_file

    def build(self) -> Config | None:
        data = self.doc.data
        if not isinstance(data, dict):
            what = "a service's config" if self.role == "service" else "the config"
            self._add(self.doc, (), f"{what} must be a YAML mapping of sections")
            return None
        self._sections(data)
        org = self.org
        own_vars = self._vars(_expand(data.get("vars") or {}, self.dirs))
        config_vars = {**org.vars, **own_vars} if org else own_vars  # the service's win
        tools = self._tools(data.get("tools") or {})
        inventory = self._inventory(_expand(data.get("inventory") or {}, self.dirs))
        own_policy = self._policy(data)
        owners = self._owners(data.get("owners"))
        policy = self._layered(own_policy, "policy" in data, inventory, owners)
        playbooks = self._playbooks(data.get("playbooks") or [])
        history = self._model(HistorySettings,
                              _expand(data.get("history") or {}, self.dirs),
                              ("history",))
        secrets = self._secrets(data.get("secrets") or [])
        if org is None:
            retention = self._retention(data.get("retention"))
            prompts = PromptSet(self._prompts(_expand(data.get("planner") or {}, self.dirs)))
            planner = self._planner(data.get("planner"))
            audit = self._model(AuditSettings, _expand(data.get("audit") or {}, self.dirs),
                                ("audit",)) or AuditSettings()
            uses_state_dir = STATE_DIR in str(data)
        else:
            retention, prompts, audit = org.retention, org.prompts, org.audit
            planner = org.planner
            secrets = [*org.secrets, *secrets]
            uses_state_dir = org.uses_state_dir or STATE_DIR in str(data)
        config = Config(self.path, Catalog(tools or {}), inventory or Inventory(),
                        policy or Policy(require_rollback=False), [b for _, b in playbooks],
                        config_vars, secrets, history or HistorySettings(), retention,
                        prompts, self.state_dir, uses_state_dir, audit,
                        name=self._name(data), key=self._key(),
                        main_path=org.path if org else None, owners=owners,
                        planner=planner)
        _bind_environments(config.catalog, config.inventory)
        self._cross_check(config, tools=tools is not None, inventory=inventory is not None,
                          policy=own_policy, playbooks=playbooks)
        return config

    def build_main(self) -> OrgWide:
        """The organisation-wide sections (``role`` main); services are loaded apart."""
        data = self.doc.data
        self._sections(data)
        org = OrgWide(self.path, self.state_dir,
                      vars=self._vars(_expand(data.get("vars") or {}, self.dirs)),
                      secrets=self._secrets(data.get("secrets") or []),
                      retention=self._retention(data.get("retention")),
                      prompts=PromptSet(self._prompts(_expand(data.get("planner") or {},
                                                              self.dirs))),
                      planner=self._planner(data.get("planner")),
                      audit=self._model(AuditSettings,
                                        _expand(data.get("audit") or {}, self.dirs),
                                        ("audit",)) or AuditSettings(),
                      uses_state_dir=STATE_DIR in str({k: v for k, v in data.items()
                                                       if k != "services"}),
                      contents=repr({k: v for k, v in data.items() if k != "services"}))
        services = data.get("services")
        if not isinstance(services, dict) or not services:
            self._add(self.doc, ("services",), "must map each service's name to its config "
                      "file (relative to this file) or an inline mapping of its sections")
        else:
            org.services = services
        self._org_inventory(_expand(data.get("inventory") or {}, self.dirs), org)
        if "policy" in data:
            org.policy = self._model(Policy, data.get("policy") or {}, ("policy",))
            org.policy_at = self._at
            if org.policy is not None:
                self._freeze_services(org.policy, org)
        org.owners_map = self._owners_map(data.get("owners_map"))
        legacy = data.get("legacy_service")
        if legacy is not None and not isinstance(legacy, str):
            self._add(self.doc, ("legacy_service",), "must be the name of one service")
        org.legacy = legacy if isinstance(legacy, str) else None
        channels = data.get("channels") or {}
        if not isinstance(channels, dict) or not all(isinstance(v, str)
                                                     for v in channels.values()):
            self._add(self.doc, ("channels",), "must map Slack channel ids to service names")
        else:
            org.channels = {str(k): v for k, v in channels.items()}
        return org

    def _org_inventory(self, raw: Any, org: OrgWide) -> None:
        """The main config's ``inventory``: only ``known_hosts`` and ``ssh``."""
        if not isinstance(raw, dict):
            self._add(self.doc, ("inventory",), "must be a mapping (known_hosts, ssh)")
            return
        for key in raw:
            if key not in ORG_INVENTORY:
                self._add(self.doc, ("inventory", key), f"inventory.{key} belongs in a "
                          f"service's config; the main config's inventory holds only "
                          f"known_hosts and ssh (one SSH pool for every service)")
        inventory: Inventory | None = self._model(
            Inventory, {k: v for k, v in raw.items() if k in ORG_INVENTORY}, ("inventory",))
        if inventory is not None:
            org.known_hosts, org.ssh = inventory.known_hosts, inventory.ssh

    def _sections(self, data: dict[Any, Any]) -> None:
        """Each section must belong in this kind of file; where it belongs is said."""
        allowed = ROLE_SECTIONS[self.role]
        for key in data:
            if key not in allowed:
                self._add(self.doc, (key,), _misplaced(str(key), self.role))

    def _policy(self, data: dict[Any, Any]) -> Policy | None:
        """The policy this file writes (None: none, or invalid: a problem says why)."""
        if "policy" not in data:
            return None
        raw = data.get("policy") or {}
        if self.org is not None and isinstance(raw, dict):
            if "break_glass" in raw:
                self._add(self.doc, ("policy", "break_glass"), "policy.break_glass belongs "
                          "in the main config (a service adding granters would loosen the "
                          "organisation's freezes)")
            for index, window in enumerate(raw.get("freeze") or []):
                if isinstance(window, dict) and "services" in window:
                    self._add(self.doc, ("policy", "freeze", index, "services"), "a "
                              "service's freeze applies to itself; `services:` is for the "
                              "main config's windows")
        policy: Policy | None = self._model(Policy, raw, ("policy",))
        return policy

    def _layered(self, own: Policy | None, written: bool, inventory: Inventory | None,
                 owners: Resolved | None) -> Policy | None:
        """The policy the service runs under: its own, the organisation's as layers, its
        owners as one more (docs/services.md 1.4). None: its own is invalid."""
        if written and own is None:
            return None
        org = self.org
        mine = Written(own, self._at if org else None) if own is not None else None
        theirs = (Written(org.policy, org.policy_at)
                  if org is not None and org.policy is not None else None)
        if mine is None and org is None:
            mine = Written(Policy())
        policy, problems = layered(
            mine, theirs, list(inventory.environments) if inventory else [],
            service=self.name, owners=(owners.approvers, owners.source) if owners else None)
        for path, message in problems:
            self._add(self.doc, ("policy", *path), message)
        return policy

    def _at(self, path: Where) -> str:
        """Where ``policy.PATH`` of this file is, its file named from the main config's
        (or this config's) directory: ``services/api.yml:12 policy.environments.x``."""
        return self._short(self.doc.where(("policy", *path)))

    def _short(self, where: str) -> str:
        base = (self.org.path if self.org else self.path).parent
        return where.removeprefix(f"{base}/")

    def _owners(self, raw: Any) -> Resolved | None:
        """The ``owners`` section, a catalog file's owner mapped through ``owners_map``."""
        if raw is None:
            return None
        owners: Owners | None = self._model(Owners, raw, ("owners",))
        if owners is None:
            return None
        found, problems = resolve_owners(
            owners, where=self._short(self.doc.where(("owners",))), base=self.path.parent,
            owners_map=self.org.owners_map if self.org else self._owners_map(
                self.doc.data.get("owners_map")), short=self._short)
        self.problems += problems
        return found

    def _owners_map(self, raw: Any) -> dict[str, list[str]]:
        """``owners_map``: Backstage owner references -> a Slack id or a list of them."""
        if raw is None:
            return {}
        if not isinstance(raw, dict) or not all(
                isinstance(v, str) or (isinstance(v, list) and v and all(
                    isinstance(i, str) for i in v)) for v in raw.values()):
            self._add(self.doc, ("owners_map",), "must map Backstage owner references "
                      "(group:default/team-api) to a Slack user or group id, or a list")
            return {}
        return {entity_ref(str(k)): [v] if isinstance(v, str) else list(v)
                for k, v in raw.items()}

    def _freeze_services(self, policy: Policy, org: OrgWide) -> None:
        """The main config's freeze windows may name only its services."""
        known = {str(name) for name in org.services}
        for index, window in enumerate(policy.freeze):
            for i, name in enumerate(window.services or []):
                if name not in known:
                    self._add(self.doc, ("policy", "freeze", index, "services", i),
                              f"unknown service {name!r} (known: {', '.join(sorted(known))})")

    def _name(self, data: dict[Any, Any]) -> str:
        """The service's name; a ``service:`` that is no name, or disagrees with the main
        config's key, is a problem at its line."""
        given = data.get("service")
        if given is None:
            return self.name
        if not isinstance(given, str) or not SERVICE_NAME.match(given):
            self._add(self.doc, ("service",), f"{given!r} is not a service name: lowercase "
                      f"letters, digits, - and _, starting with a letter (at most 63)")
            return self.name
        if self.role == "service" and given != self.name:
            self._add(self.doc, ("service",), f"says service {given!r}, but the main config "
                      f"({self.org.path if self.org else ''}) names it {self.name!r}")
            return self.name
        return given

    def _key(self) -> str | None:
        """What records carry: nothing for the legacy service (section 3)."""
        if self.org is None or self.name == self.org.legacy:
            return None
        return self.name

    def _vars(self, raw: Any) -> dict[str, Any]:
        if not isinstance(raw, dict):
            self._add(self.doc, ("vars",), "must be a mapping of names to values")
            return {}
        return dict(raw)

    def _secrets(self, raw: Any) -> list[str]:
        if not isinstance(raw, list) or not all(isinstance(s, str | int) for s in raw):
            self._add(self.doc, ("secrets",), "must be a list of secret values (strings)")
            return []
        return [str(s) for s in raw]

    def _retention(self, raw: Any) -> RetentionSettings | None:
        """The retention section; its export path is relative to the config file."""
        if raw is None:
            return None
        settings: RetentionSettings | None = self._model(
            RetentionSettings, _expand(raw, self.dirs), ("retention",))
        if settings is not None:
            settings.export = str(self.path.parent / Path(settings.export).expanduser())
        return settings
    def _prompts(self, raw: Any) -> dict[str, Template]:
        """``planner.prompts``: template name -> file (relative to the config), each read
        and checked now, so a lost placeholder stops every command, not the first plan."""
        if not isinstance(raw, dict):
            self._add(self.doc, ("planner",), "must be a mapping (prompts, base_url, model …)")
            return {}
        if unknown := sorted(map(str, set(raw) - PLANNER_KEYS)):
            self._add(self.doc, ("planner",), f"has no key {', '.join(unknown)}; use "
                                              f"{', '.join(sorted(PLANNER_KEYS))}")
            return {}
        files = raw.get("prompts") or {}
        if not isinstance(files, dict):
            self._add(self.doc, ("planner", "prompts"), "must map template names to files")
            return {}
        found = {}
        for name, file in files.items():
            try:
                if not isinstance(file, str):
                    raise TemplateRefused(f"template {name}: expected a file path")
                found[name] = read_template(str(name), self.path.parent / file)
            except TemplateRefused as exc:
                self._add(self.doc, ("planner", "prompts", name), str(exc))
        return found

    def _planner(self, raw: Any) -> PlannerEndpoint:
        """``planner:``'s endpoint keys (``prompts`` is read by _prompts)."""
        if not isinstance(raw, dict):
            return PlannerEndpoint()
        keys = {k: v for k, v in raw.items() if k in PlannerEndpoint.model_fields}
        found = self._model(PlannerEndpoint, keys, ("planner",))
        return found or PlannerEndpoint()

    def _tools(self, raw: Any) -> dict[str, Tool] | None:
        if isinstance(raw, str):  # a path to a separate tools.yml
            try:
                self.tools_doc = self.parse(self.path.parent / raw)
            except ConfigError as exc:
                self.problems += exc.problems
                return None
            self.problems += self.tools_doc.problems
            data = self.tools_doc.data
            if not isinstance(data, dict) or "tools" not in data:
                self._add(self.tools_doc, (), "a tools file must be a mapping with a `tools:` "
                                              "section")
                return None
            raw = data["tools"]
        if gantz.is_gantz(raw):
            return self._gantz_tools(raw, self.tools_doc, self.tools_prefix)
        if not isinstance(raw, dict):
            self._add(self.tools_doc, self.tools_prefix, "must map tool names to tool "
                                                         "definitions")
            return None
        tools: dict[str, Tool] = {}
        for name, body in raw.items():
            body = {"name": name, **body} if isinstance(body, dict) else body
            tool = self._model(Tool, body, (*self.tools_prefix, name), self.tools_doc)
            if tool is None:
                self.broken_tools.add(str(name))
            else:
                tools[name] = tool
        return tools

    def _gantz_tools(self, raw: list[Any], doc: Located, prefix: Where
                     ) -> dict[str, Tool] | None:
        """A gantz-style list: every entry that cannot be converted is a problem, with why."""
        tools, problems = gantz.convert(raw)
        for index, why, line in problems:
            where = (doc.where_in_text((*prefix, index, "script", "shell"), line) if line
                     else doc.where((*prefix, index)))
            self.problems.append(Problem(where, f"cannot convert this gantz tool: {why}"))
        return None if problems else tools

    def _inventory(self, raw: Any) -> Inventory | None:
        if self.org is not None and isinstance(raw, dict):
            for key in ORG_INVENTORY & set(raw):
                self._add(self.doc, ("inventory", key), f"inventory.{key} belongs in the main "
                          f"config (one SSH pool for every service), not in a service")
            raw = {k: v for k, v in raw.items() if k not in ORG_INVENTORY}
        inventory: Inventory | None = self._model(Inventory, raw, ("inventory",),
                                                  context={"defer_references": True})
        if inventory is not None:
            for path, message in [*inventory.reference_problems(),
                                  *inventory.alias_problems(),
                                  *inventory.judgment_problems()]:
                self._add(self.doc, ("inventory", *path), message)
            if self.org is not None:
                inventory.known_hosts, inventory.ssh = self.org.known_hosts, self.org.ssh
                for env in inventory.environments:  # keys and text split at ':' and '/'
                    if ":" in env or "/" in env:
                        self._add(self.doc, ("inventory", "environments", env),
                                  f"environment {env!r}: with services, environment names "
                                  f"may not contain ':' or '/'")
        return inventory

    def _playbooks(self, raw: Any) -> list[tuple[int, Playbook]]:
        if not isinstance(raw, list):
            self._add(self.doc, ("playbooks",), "must be a list of playbooks")
            return []
        books = [(i, self._model(Playbook, body, ("playbooks", i))) for i, body in enumerate(raw)]
        return [(i, b) for i, b in books if b is not None]

    def _model(self, model: type[Any], raw: Any, where: Where, doc: Located | None = None,
               context: dict[str, Any] | None = None) -> Any:
        try:
            return model.model_validate(raw, context=context)
        except ValidationError as exc:
            for err in exc.errors():
                if isinstance((err.get("ctx") or {}).get("error"), ShellRefused):
                    continue  # reported below, one per placeholder, at its own line
                self._add(doc or self.doc, (*where, *err["loc"]), _pydantic_message(err))
            for loc, refusal in refusals_in(exc):
                located = doc or self.doc
                self.problems.append(Problem(located.where_in_text((*where, *loc),
                                                                   refusal.line),
                                             str(refusal)))
            return None

    def _cross_check(self, config: Config, *, tools: bool, inventory: bool,
                     policy: Policy | None,
                     playbooks: list[tuple[int, Playbook]]) -> None:
        if config.history.retention_days is not None and config.retention is None \
                and "retention" not in self.doc.data:
            where = "" if self.org is None else " in the main config"
            self._add(self.doc, ("history", "retention_days"), f"needs a retention section"
                      f"{where} with export: the file old deploys are exported to before "
                      f"they are trimmed")
        for name, tool in config.catalog.tools.items():
            for path, problem in _tool_problems(tool, config, inventory=inventory):
                self._add(self.tools_doc, (*self.tools_prefix, name, *path), problem)
        if inventory and policy is not None:  # what this file writes: its names are its own
            for path, problem in policy_problems(policy,
                                                  config.inventory.environments):
                self._add(self.doc, ("policy", *path), problem)
        if not (tools and inventory):
            return  # every step would report knock-on "unknown tool/environment" problems
        for env_name, env in config.inventory.environments.items():
            names = [n for n in env.rollout.after_each_batch if n not in self.broken_tools]
            for problem in _batch_gate_problems(names, config.catalog):
                self._add(self.doc, ("inventory", "environments", env_name, "rollout"), problem)
        self._check_playbooks(config, playbooks)

    def _check_playbooks(self, config: Config, playbooks: list[tuple[int, Playbook]]) -> None:
        """Each playbook as a plan and each example request (``_PlaybookCheck``), unless
        turned off, or ``verdicts`` know these very inputs passed them."""
        if not self.playbooks:
            return
        key = self._verdict_key(config) if self.verdicts is not None else ""
        if self.verdicts is not None and self.verdicts.passed(key):
            return
        before = len(self.problems)
        for index, book in playbooks:
            checker = _PlaybookCheck(book, config, self.broken_tools)
            for path, problem in checker.problems():
                self._add(self.doc, ("playbooks", index, *path), problem)
        if self.verdicts is not None and len(self.problems) == before:
            self.verdicts.add(key)

    def _verdict_key(self, config: Config) -> str:
        """Everything the playbook checks read, as read: the main config, this service's
        sections and tools file, its policy with every layer (owners from a catalog too)."""
        return verdict_key(self.org.contents if self.org else "", repr(self.doc.data),
                           repr(self.tools_doc.data), config.policy.model_dump_json())

    def _add(self, doc: Located, path: Where, message: str) -> None:
        self.problems.append(Problem(doc.where(path), message))


def _misplaced(section: str, role: str) -> str:
    """Why ``section`` does not belong in a file of ``role``, and where it does."""
    if section == "services" and role == "single":
        return ("`services:` makes this a main config: it is loaded with "
                "agents.org.load_org, as every deckhand command does")
    if role == "main" and section in SERVICE_SECTIONS:
        return (f"`{section}` belongs in a service's config (a file or an inline mapping "
                f"under `services:`), not beside `services:`")
    if role == "service" and section in MAIN_SECTIONS:
        return (f"`{section}` is organisation-wide: it belongs in the main config, not in "
                f"a service")
    if role == "single" and section in MAIN_SECTIONS - {"owners_map"}:
        return f"`{section}` belongs beside `services:`, in a main config"
    expected = sorted(ROLE_SECTIONS[role])
    return f"unknown section (expected one of {', '.join(expected)})"


def _tool_problems(tool: Tool, config: Config, *, inventory: bool) -> list[tuple[Where, str]]:
    out: list[tuple[Where, str]] = []
    for field_name in tool.placeholders:
        if field_name.startswith("vars.") and field_name[5:] not in config.vars:
            out.append((("command",), f"command uses {{{field_name}}} but vars has no "
                                      f"{field_name[5:]!r}"))
        elif not field_name.startswith(BUILTIN_SCOPES) and field_name not in tool.params:
            out.append((("command",), f"command uses {{{field_name}}}, which is not a "
                                      f"parameter of {tool.name}"))
    if tool.rollback and tool.rollback not in config.catalog:
        out.append((("rollback",), f"rollback tool {tool.rollback!r} is not defined"))
    if not inventory:
        return out
    if tool.target.startswith("group:") and tool.target[6:] not in config.inventory.groups:
        out.append((("target",), f"target {tool.target!r}: no such host group in the "
                                 f"inventory"))
    for key, spec in tool.params.items():
        reason = spec.check(spec.default) if spec.default is not None else None
        if reason:
            out.append((("params", key, "default"), f"default of {key!r} {reason}"))
    return out


def policy_problems(policy: Policy, known: Mapping[str, Environment]
                    ) -> list[tuple[Where, str]]:
    """Unknown environment names in the policy (``known``: the environments it may name):
    a typo would quietly fall back to the default rule (or turn the promotion check off),
    so each one is an error. Paths are within the ``policy`` section."""
    hint = f"(known: {', '.join(sorted(known)) or 'none configured'})"
    aliases = {a: n for n, env in known.items() for a in env.aliases}
    out: list[tuple[Where, str]] = [
        ((name,), "is worked out at load (docs/services.md 1.4), never written")
        for name in ("layers", "sources") if name in policy.model_fields_set]
    out += [(("environments", name), _unknown_in_policy(name, aliases, hint))
            for name in policy.environments if name not in known]
    for index, name in enumerate(policy.promotion):
        if name not in known:
            out.append((("promotion", index), _unknown_in_policy(name, aliases, hint)))
        elif name in policy.promotion[:index]:
            out.append((("promotion", index), f"{name!r} is listed twice"))
    out += [(("limits", name), _unknown_in_policy(name, aliases, hint))
            for name in policy.limits if name not in known]  # a typo here limits nothing
    for index, window in enumerate(policy.freeze):  # a typo here freezes nothing
        out += [(("freeze", index, "environments", i), f"unknown environment {name!r} {hint}")
                for i, name in enumerate(window.environments) if name not in known]
    return out + _approver_problems(policy) + _impossible_rules(policy)


def _approver_problems(policy: Policy) -> list[tuple[Where, str]]:
    """A written rule must name its approvers or say ``anyone: true``: an emptied list
    means nobody, never anyone, so say which was meant."""
    written: list[tuple[Where, EnvPolicy]] = [
        (("environments", name), rule) for name, rule in policy.environments.items()]
    if "default" in policy.model_fields_set:
        written.append((("default",), policy.default))
    if policy.unscoped is not None:
        written.append((("unscoped",), policy.unscoped))
    out: list[tuple[Where, str]] = []
    for where, rule in written:
        who = rule.approvers
        if who.nobody:
            out.append(((*where, "approvers"), "names no approver: list users or groups, or "
                        "write `anyone: true` if anyone may approve"))
        elif who.anyone and (who.users or who.groups):
            out.append(((*where, "approvers"), "says `anyone: true` and also lists approvers: "
                        "keep one"))
    return out


def _impossible_rules(policy: Policy) -> list[tuple[Where, str]]:
    """Rules that can never be met, and names that can never match: a count above the
    distinct people a rule names, a name listed twice or with spaces around it (Slack ids
    and login names have none), a written break-glass that names nobody."""
    out: list[tuple[Where, str]] = []
    rules: list[tuple[Where, EnvPolicy]] = [
        (("environments", name), rule) for name, rule in policy.environments.items()]
    rules += [(("default",), policy.default)] if "default" in policy.model_fields_set else []
    rules += [(("unscoped",), policy.unscoped)] if policy.unscoped is not None else []
    for where, rule in rules:
        out += _name_problems((*where, "approvers"), rule.approvers.users, rule.approvers.groups)
        who = rule.approvers
        distinct = set(who.users)
        if not (who.anyone or who.groups) and distinct and rule.min_approvals > len(distinct):
            out.append(((*where, "min_approvals"), f"needs {rule.min_approvals} approvals but "
                        f"the rule names {len(distinct)} approver(s) ({', '.join(sorted(distinct))}"
                        f"): no plan could ever be approved; lower min_approvals or add "
                        f"approvers"))
    glass = policy.break_glass
    out += _name_problems(("break_glass",), glass.users, glass.groups)
    if "break_glass" in policy.model_fields_set and not (glass.users or glass.groups):
        out.append((("break_glass",), "names nobody: a break-glass run could never get its "
                    "grant; list users or groups, or remove break_glass"))
    return out


def _name_problems(where: Where, users: list[str], groups: list[str]) -> list[tuple[Where, str]]:
    out: list[tuple[Where, str]] = []
    for kind, names in (("users", users), ("groups", groups)):
        for index, name in enumerate(names):
            if name != name.strip() or not name.strip():
                out.append(((*where, kind, index), f"{name!r} has spaces around it (or is "
                            f"empty); no user or group is named that: write {name.strip()!r}"))
            elif name in names[:index]:
                out.append(((*where, kind, index), f"{name!r} is listed twice; each person "
                            f"counts once"))
    return out


def _unknown_in_policy(name: str, aliases: dict[str, str], hint: str) -> str:
    """An alias is refused in policy too: rules name the environment itself, so that no
    rule can be written for a second name and miss the requests that use the first."""
    if name in aliases:
        return (f"{name!r} is an alias of {aliases[name]}: policy names the environment "
                f"itself; write {aliases[name]!r}")
    return f"unknown environment {name!r} {hint}"


def _batch_gate_problems(names: list[str], catalog: Catalog) -> list[str]:
    """``after_each_batch`` may name only gates (read-only checks deckhand evaluates)."""
    out = []
    for name in names:
        if name not in catalog:
            out.append(f"after_each_batch: {unknown_tool_message(name, list(catalog.tools))}")
        elif catalog.get(name).gate is None:
            out.append(f"after_each_batch: {name} is not a gate (a tool with gate:)")
        elif catalog.get(name).target != "local":
            out.append(f"after_each_batch: gate {name} must have target local (it judges the "
                       f"environment as a whole, between batches)")
    return out


def _bind_environments(catalog: Catalog, inventory: Inventory) -> None:
    """Environment-targeted tools accept only the inventory's environments (unless the
    tool lists its own), so plans and the LLM's schema are checked against them."""
    for tool in catalog.tools.values():
        if tool.target == "environment" and not tool.params["environment"].enum:
            tool.params["environment"].enum = sorted(inventory.environments)


class _PlaybookCheck:
    """A playbook's template checked as a plan (placeholders stand for any value), then
    each example request; every problem points at the node it is about."""

    def __init__(self, book: Playbook, config: Config, broken_tools: set[str]):
        self.book, self.config, self.broken = book, config, broken_tools

    def problems(self) -> list[tuple[Where, str]]:
        out = self._placeholders() + self._template()
        for index, example in enumerate(self.book.examples):
            out += [(("examples", index), p) for p in self._example(example, check=not out)]
        return out

    def _placeholders(self) -> list[tuple[Where, str]]:
        used = sorted(set(PLACEHOLDER.findall(json.dumps(
            [self.book.goal, *(s.model_dump(mode="json") for s in [*self.book.steps,
                                                                   *self.book.rollback])]))))
        out: list[tuple[Where, str]] = []
        for index, pattern in enumerate(self.book.match):
            known = set(re.compile(pattern).groupindex) | set(self.book.defaults)
            missing = [name for name in used if name not in known]
            if missing:
                out.append((("match", index), f"the template uses {{{', '.join(missing)}}}, "
                            f"which this pattern does not capture and `defaults` do not set"))
        return out

    def _template(self) -> list[tuple[Where, str]]:
        try:
            plan = Plan.model_validate({"goal": self.book.goal, "steps": self.book.steps,
                                        "rollback": self.book.rollback})
        except ValidationError as exc:
            return [((), f"the template is not a valid plan: {exc}")]
        checker = PlanChecker(plan, self.config.catalog, self.config.inventory,
                              self.config.policy, templated=True)
        return [(self._path(step_id, message), message) for step_id, message in checker.check()
                if not self._knock_on(plan, step_id, message)]

    def _knock_on(self, plan: Plan, step_id: str, message: str) -> bool:
        """An unknown-tool problem for a tool whose own definition was already refused."""
        tools = {s.tool for s in plan.all_steps if s.id == step_id}
        return message.startswith("unknown tool") and bool(tools & self.broken)

    def _path(self, step_id: str, message: str) -> Where:
        places = [("steps", i) for i, s in enumerate(self.book.steps) if s.id == step_id]
        places += [("rollback", i) for i, s in enumerate(self.book.rollback) if s.id == step_id]
        place: Where = places[-1] if message == "duplicate step id" else places[0]
        param = _PARAM_IN_MESSAGE.match(message)
        return (*place, "params", param.group(1)) if param else place

    def _example(self, example: str, *, check: bool) -> list[str]:
        try:
            values = self.book.groups_for(
                example, Phrasing.of(self.config.inventory.environments))
        except CaptureError as exc:
            return [f"example {example!r}: {exc}"]
        if values is None:
            return [f"example {example!r} does not match the playbook's patterns"]
        if not check:  # the template's own problems were reported; skip their echoes
            return []
        try:
            plan = self.book.instantiate(values, requested_by="check")
        except (PlanError, ValidationError) as exc:
            return [f"example {example!r}: {exc}"]
        checker = PlanChecker(plan, self.config.catalog, self.config.inventory,
                              self.config.policy)
        return [f"example {example!r}: {p}" for p in checker.problems()]


_PARAM_IN_MESSAGE = re.compile(r"^(?:unknown )?parameter '([^']+)'")


def _expand(value: Any, dirs: dict[str, str]) -> Any:
    """Replace ``{config_dir}`` and ``{state_dir}`` in every string, so sample paths work
    from any checkout and state goes where the operator says (agents.state_dir)."""
    if isinstance(value, str):
        for placeholder, path in dirs.items():
            value = value.replace(placeholder, path)
        return value
    if isinstance(value, dict):
        return {k: _expand(v, dirs) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, dirs) for v in value]
    return value


def _pydantic_message(err: Any) -> str:
    message = str(err.get("msg", "invalid value"))
    return message.removeprefix("Value error, ")

