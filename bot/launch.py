"""The ``deckhand`` command's entry point: ``--version`` is answered before anything of
deckhand is imported (loading the whole CLI takes most of a second), every other command
is handed to ``bot.cli.main``.

The garbage collector is kept off the start-up's work: the ~140,000 objects the CLI's
modules and models create live as long as the process, so collecting while they are built
finds nothing (~0.1 s), and they are frozen out of every later collection; the collection
at interpreter exit is skipped the same way (~0.25 s of CPU at 100 connected hosts). Every
collection during the command itself runs as usual; the ~1,300 cyclic leftovers of
start-up are simply kept. Optional packages our dependencies would load for features
deckhand never uses are left out of the import (``tools.lean_imports``)."""

from __future__ import annotations

import gc
import sys
from collections.abc import Sequence

QUICK = {("--version",), ("-V",)}


def main(argv: Sequence[str] | None = None) -> int:
    args = tuple(sys.argv[1:] if argv is None else argv)
    if args in QUICK:
        print(f"deckhand {_version()}")
        return 0
    from tools.lean_imports import without_unused_extras

    gc.disable()
    try:
        with without_unused_extras():
            from bot.cli import main as cli_main
    finally:
        gc.freeze()  # what start-up built lives until exit: never scan it again
        gc.enable()
    try:  # a process's own command line: its output is guarded (a dead pipe never stops
        # a rollback), as for `python -m bot.cli`
        return cli_main(list(args), own_process=argv is None)
    finally:
        gc.freeze()  # exit's own collection would walk every object once more, for nothing


def _version() -> str:
    """As ``bot.cli.help.version`` (importing that would load the whole ``bot.cli``)."""
    from importlib import metadata

    try:
        return metadata.version("deckhand")
    except metadata.PackageNotFoundError:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
