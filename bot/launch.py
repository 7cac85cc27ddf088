"""The ``deckhand`` command's entry point: ``--version`` is answered before anything of
deckhand is imported (loading the whole CLI takes most of a second), every other command
is handed to ``bot.cli.main``."""

from __future__ import annotations

import sys
from collections.abc import Sequence

QUICK = {("--version",), ("-V",)}


def main(argv: Sequence[str] | None = None) -> int:
    args = tuple(sys.argv[1:] if argv is None else argv)
    if args in QUICK:
        print(f"deckhand {_version()}")
        return 0
    from bot.cli import main as cli_main

    return cli_main(list(args))


def _version() -> str:
    """As ``bot.cli.help.version`` (importing that would load the whole ``bot.cli``)."""
    from importlib import metadata

    try:
        return metadata.version("deckhand")
    except metadata.PackageNotFoundError:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
