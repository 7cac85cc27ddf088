"""``deckhand check --store [--repair]``: verify the live store's invariants (REDIS_URL)."""

from __future__ import annotations

import argparse

from rich.console import Console

from agents.errors import StoreError
from agents.settings import Settings
from agents.store import Store
from agents.store.check import StoreCheck


def check_store(args: argparse.Namespace, console: Console) -> int:
    """Print each violation with its key; with --repair, fix the safe ones and re-check.

    Exit 0 when nothing is (left) wrong, 1 otherwise.
    """
    url = Settings().redis_url
    if url is None:
        raise StoreError("set REDIS_URL to the Redis to check (an in-process store has "
                         "nothing to check)")
    checker = StoreCheck(Store.connect(url.get_secret_value()))
    found = checker.violations()
    _print(console, [v.describe() for v in found])
    if found and args.repair:
        _print(console, [f"repaired {line}" for line in checker.repair(found)])
        found = checker.violations()
        _print(console, [f"still: {v.describe()}" for v in found])
    if found:
        console.print(f"[red]{len(found)} violation(s)[/]")
        return 1
    console.print("[green]the store keeps every invariant[/]")
    return 0


def _print(console: Console, lines: list[str]) -> None:
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
