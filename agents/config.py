"""Loading deckhand.yml (and its tools.yml): every problem reported at once, with its line."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agents.errors import PlanError
from agents.history import HistorySettings
from agents.plan import PlanChecker
from agents.planning.playbooks import Playbook
from agents.policy import Policy
from tools import gantz
from tools.catalog import Catalog, Tool, unknown_tool_message
from tools.errors import ConfigError, Problem
from tools.inventory import Inventory
from tools.yamlsrc import Located, load_yaml_file

SECTIONS = {"vars", "tools", "inventory", "policy", "playbooks", "secrets", "history"}
BUILTIN_SCOPES = ("host.", "vars.")


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


def load_config(path: Path | str) -> Config:
    """Load and check a config file; ConfigError lists every problem with its location."""
    path = Path(path).resolve()
    doc = load_yaml_file(path)
    if not isinstance(doc.data, dict):
        raise ConfigError([Problem(doc.source, "the config must be a YAML mapping")])
    loader = _Loader(path, doc)
    config = loader.build()
    if loader.problems:
        raise ConfigError(loader.problems)
    assert config is not None  # noqa: S101 - build() returns None only with problems
    return config


class _Loader:
    def __init__(self, path: Path, doc: Located):
        self.path, self.doc = path, doc
        self.problems: list[Problem] = []

    def build(self) -> Config | None:
        data = self.doc.data
        for key in data:
            if key not in SECTIONS:
                self._add(self.doc, (key,), f"unknown section (expected one of "
                                             f"{', '.join(sorted(SECTIONS))})")
        for section in ("vars", "inventory", "history"):
            data[section] = _expand(data.get(section) or {}, str(self.path.parent))
        config_vars = self._vars(data["vars"])
        tools = self._tools(data.get("tools") or {})
        inventory = self._model(Inventory, data.get("inventory") or {}, ("inventory",))
        policy = self._model(Policy, data.get("policy") or {}, ("policy",))
        playbooks = self._playbooks(data.get("playbooks") or [])
        secrets = [str(s) for s in data.get("secrets") or []]
        history = self._model(HistorySettings, data.get("history") or {}, ("history",))
        if tools is None or inventory is None or policy is None or playbooks is None \
                or history is None:
            return None
        config = Config(self.path, Catalog(tools), inventory, policy, playbooks, config_vars,
                        secrets, history)
        _bind_environments(config.catalog, inventory)
        self._cross_check(config)
        return config

    def _vars(self, raw: Any) -> dict[str, Any]:
        if not isinstance(raw, dict):
            self._add(self.doc, ("vars",), "must be a mapping of names to values")
            return {}
        return dict(raw)

    def _tools(self, raw: Any) -> dict[str, Tool] | None:
        doc, prefix = self.doc, ("tools",)
        if isinstance(raw, str):  # a path to a separate tools.yml
            try:
                doc = load_yaml_file(self.path.parent / raw)
            except ConfigError as exc:
                self.problems += exc.problems
                return None
            raw, prefix = (doc.data or {}).get("tools"), ("tools",)
        if gantz.is_gantz(raw):
            return self._gantz_tools(raw, doc, prefix)
        if not isinstance(raw, dict):
            self._add(doc, prefix, "must map tool names to tool definitions")
            return None
        tools: dict[str, Tool] = {}
        for name, body in raw.items():
            body = {"name": name, **body} if isinstance(body, dict) else body
            tool = self._model(Tool, body, (*prefix, name), doc)
            if tool is not None:
                tools[name] = tool
        return tools if len(tools) == len(raw) else None

    def _gantz_tools(self, raw: list[Any], doc: Located, prefix: tuple[str, ...]
                     ) -> dict[str, Tool] | None:
        """A gantz-style list: every entry that cannot be converted is a problem, with why."""
        tools, problems = gantz.convert(raw)
        for index, why in problems:
            self._add(doc, (*prefix, index), f"cannot convert this gantz tool: {why}")
        return None if problems else tools

    def _playbooks(self, raw: Any) -> list[Playbook] | None:
        if not isinstance(raw, list):
            self._add(self.doc, ("playbooks",), "must be a list of playbooks")
            return None
        books = [self._model(Playbook, body, ("playbooks", i)) for i, body in enumerate(raw)]
        return [b for b in books if b is not None] if all(books) else None

    def _model(self, model: type[Any], raw: Any, where: tuple[str | int, ...],
               doc: Located | None = None) -> Any:
        try:
            return model.model_validate(raw)
        except ValidationError as exc:
            for err in exc.errors():
                self._add(doc or self.doc, (*where, *err["loc"]), _pydantic_message(err))
            return None

    def _cross_check(self, config: Config) -> None:
        for name, tool in config.catalog.tools.items():
            where = ("tools", name)
            for problem in _tool_problems(tool, config):
                self._add(self.doc, where, problem)
        for index, book in enumerate(config.playbooks):
            for problem in _playbook_problems(book, config):
                self._add(self.doc, ("playbooks", index), problem)
        for env_name, env in config.inventory.environments.items():
            for problem in _batch_gate_problems(env.rollout.after_each_batch, config.catalog):
                self._add(self.doc, ("inventory", "environments", env_name, "rollout"), problem)

    def _add(self, doc: Located, path: tuple[str | int, ...], message: str) -> None:
        self.problems.append(Problem(doc.where(path), message))


def _tool_problems(tool: Tool, config: Config) -> list[str]:
    out = []
    for field_name in tool.placeholders:
        if field_name.startswith("vars.") and field_name[5:] not in config.vars:
            out.append(f"command uses {{{field_name}}} but vars has no {field_name[5:]!r}")
        elif not field_name.startswith(BUILTIN_SCOPES) and field_name not in tool.params:
            out.append(f"command uses {{{field_name}}}, which is not a parameter of {tool.name}")
    if tool.rollback and tool.rollback not in config.catalog:
        out.append(f"rollback tool {tool.rollback!r} is not defined")
    if tool.target.startswith("group:") and tool.target[6:] not in config.inventory.groups:
        out.append(f"target {tool.target!r}: no such host group in the inventory")
    return out


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


def _playbook_problems(book: Playbook, config: Config) -> list[str]:
    """Plan each example request and validate the result like any other plan."""
    out = []
    for example in book.examples:
        values = book.groups_for(example)
        if values is None:
            out.append(f"example {example!r} does not match the playbook's patterns")
            continue
        try:
            plan = book.instantiate(values, requested_by="check")
        except (PlanError, ValidationError) as exc:
            out.append(f"example {example!r}: {exc}")
            continue
        checker = PlanChecker(plan, config.catalog, config.inventory, config.policy)
        out += [f"example {example!r}: {p}" for p in checker.problems()]
    return out


def _expand(value: Any, config_dir: str) -> Any:
    """Replace ``{config_dir}`` in every string, so sample paths work from any checkout."""
    if isinstance(value, str):
        return value.replace("{config_dir}", config_dir)
    if isinstance(value, dict):
        return {k: _expand(v, config_dir) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, config_dir) for v in value]
    return value


def _pydantic_message(err: Any) -> str:
    message = str(err.get("msg", "invalid value"))
    return message.removeprefix("Value error, ")

