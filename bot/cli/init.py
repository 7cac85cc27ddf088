"""``deckhand init [DIR]``: write a commented, working config to start from."""

from __future__ import annotations

import argparse
from importlib import resources
from pathlib import Path

from rich.console import Console

from agents.config import load_config
from bot.cli.common import DEFAULT_NAME, Commands

NEXT_STEPS = ('deckhand plan "deploy v1.0.0"', 'deckhand run "deploy v1.0.0"',
              'deckhand run "status of production"')


def register(commands: Commands) -> None:
    parser = commands.add_parser("init", help="write a commented, working deckhand.yml")
    parser.add_argument("directory", nargs="?", default=".", type=Path,
                        help="where to write deckhand.yml (default: here)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing file")
    parser.set_defaults(handler=_init)


def template_text() -> str:
    """The template shipped inside the package, so init works from any install."""
    return (resources.files("bot.cli") / "templates" / DEFAULT_NAME).read_text("utf-8")


def _init(args: argparse.Namespace, console: Console) -> int:
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
