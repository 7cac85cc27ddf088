"""``deckhand init [DIR]``: write a commented, working config to start from."""

from __future__ import annotations

import argparse
import re
from importlib import resources
from pathlib import Path

from rich.console import Console

from agents.config import SERVICE_NAME, load_config
from agents.org import load_org
from bot.cli.common import DEFAULT_NAME, Commands
from tools.errors import DeckhandError

NEXT_STEPS = ('deckhand plan "deploy v1.0.0"', 'deckhand run "deploy v1.0.0"',
              'deckhand run "status of production"')


def register(commands: Commands) -> None:
    parser = commands.add_parser("init", help="write a commented, working deckhand.yml")
    parser.add_argument("directory", nargs="?", default=".", type=Path,
                        help="where to write deckhand.yml (default: here)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing file")
    parser.add_argument("--service", metavar="NAME",
                        help="add a service: write services/NAME.yml and list it under "
                             "`services:` in DIR/deckhand.yml (made if missing)")
    parser.set_defaults(handler=_init)


def template_text() -> str:
    """The template shipped inside the package, so init works from any install."""
    return (resources.files("bot.cli") / "templates" / DEFAULT_NAME).read_text("utf-8")


def _init(args: argparse.Namespace, console: Console) -> int:
    if args.service is not None:
        return add_service(Path(args.directory), args.service, console)
    target = Path(args.directory) / DEFAULT_NAME
    if target.exists() and not args.force:
        console.print(f"{target} already exists; keep it, or pass --force to overwrite it.",
                      highlight=False, soft_wrap=True)
        return 1
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(template_text(), encoding="utf-8")
    load_config(target)  # what init writes must load; fail loudly here if it ever does not
    console.print(f"Wrote {target}: local hosts to try things on, an SSH example, tools, "
                  "policy and playbooks.", highlight=False, soft_wrap=True)
    _print_next(console, Path(args.directory))
    return 0


def _print_next(console: Console, directory: Path) -> None:
    console.print("Next:", style="bold")
    if directory.resolve() != Path.cwd().resolve():
        console.print(f"  cd {directory}", highlight=False, soft_wrap=True)
    for command in NEXT_STEPS:
        console.print(f"  {command}", highlight=False, soft_wrap=True)


SERVICES = re.compile(r"^services:[ \t]*(?:#.*)?$")
"""The block heading ``services:`` (a flow mapping on its line is not edited)."""
TEMPLATE_HOSTS = re.compile(r"(?<![\w-])(staging-1|prod-1|prod-2)(?![\w-])")
MAIN_TEXT = """\
# deckhand's main config: what is organisation-wide (policy every service starts from,
# Slack, planner, audit). Each service's tools, hosts and playbooks are in its own file,
# listed below; `deckhand init --service NAME` adds one, `deckhand check` checks them all.
services:
"""


def add_service(directory: Path, name: str, console: Console) -> int:
    """Write ``services/NAME.yml`` (the template's service sections, its hosts named
    ``NAME-…`` so two services never share one) and insert one line under ``services:``
    in the main config, text only: its comments survive. What is written is loaded at
    once; if it does not load, both files are put back as they were."""
    if not SERVICE_NAME.match(name):
        raise DeckhandError(f"{name!r} is not a service name: lowercase letters, digits, - "
                            f"and _, starting with a letter")
    main = directory / DEFAULT_NAME
    before = main.read_text(encoding="utf-8") if main.exists() else None
    service = directory / "services" / f"{name}.yml"
    if service.exists():
        console.print(f"{service} already exists; keep it, or choose another name.",
                      highlight=False, soft_wrap=True)
        return 1
    text = with_service_line(before or MAIN_TEXT, name, main)
    service.parent.mkdir(parents=True, exist_ok=True)
    service.write_text(service_text(name), encoding="utf-8")
    main.write_text(text, encoding="utf-8")
    try:
        load_org(main)
    except DeckhandError:
        service.unlink()
        main.unlink() if before is None else main.write_text(before, encoding="utf-8")
        raise
    console.print(f"Wrote {service} and listed it in {main}; `deckhand check {main}` "
                  f"checks every service.", highlight=False, soft_wrap=True)
    return 0


def service_text(name: str) -> str:
    """The template's service sections for service ``name``."""
    body = template_text()
    body = body[body.index("\nvars:") + 1:]
    head = (f"# Service {name}, listed under `services:` in the main config (written by "
            f"`deckhand init --service {name}`).\n# {{config_dir}} is this file's directory; "
            f"{{state_dir}} is the state directory's services/{name}.\n\n")
    return head + TEMPLATE_HOSTS.sub(rf"{name}-\1", body)


def with_service_line(text: str, name: str, main: Path) -> str:
    """``text`` with ``  NAME: services/NAME.yml`` as the last line of its ``services:``."""
    lines = text.splitlines(keepends=True)
    heading = next((n for n, line in enumerate(lines) if SERVICES.match(line)), None)
    if heading is None:
        raise DeckhandError(
            f"{main} has no `services:` block: it is one service. Move its service "
            f"sections (vars, tools, inventory, policy, history, playbooks) into "
            f"services/OLD.yml, write `services:` listing it, then add {name} (docs/start.md, "
            f"Many services)")
    end, indent = heading + 1, ""
    for n in range(heading + 1, len(lines)):
        line = lines[n]
        if line.strip() and not line[0].isspace():
            break  # the next top-level key
        if line.strip() and not line.lstrip().startswith("#"):
            end = n + 1  # an entry, or a line of an inline one
            indent = indent or line[:len(line) - len(line.lstrip())]
    indent = indent or "  "
    if end > 0 and not lines[end - 1].endswith("\n"):
        lines[end - 1] += "\n"
    lines.insert(end, f"{indent}{name}: services/{name}.yml\n")
    return "".join(lines)
