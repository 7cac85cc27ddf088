"""Pictures are optional: matplotlib (with numpy, fontTools and Pillow, ~165 MB installed)
comes with the ``charts`` extra, ``pip install 'deckhand[charts]'``. Without it every
picture says it is off, where it would have appeared: ``runs show --timeline`` and
``eval --chart`` fail with this line, the Slack timeline is skipped with a warning and
counted as ``deckhand_timeline_uploads{result="unavailable"}``, and ``deckhand check``
says so. Nothing else depends on it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

from tools.errors import DeckhandError

INSTALL = "pip install 'deckhand[charts]'"


class ChartsUnavailable(DeckhandError):
    """A picture was asked for, and matplotlib is not installed."""


def missing() -> str | None:
    """None when pictures can be drawn; else one line saying why not and what to install."""
    # found, not imported: importing matplotlib costs `check` ~0.5 s (drawing imports it)
    found = (sys.modules["matplotlib"] is not None if "matplotlib" in sys.modules
             else importlib.util.find_spec("matplotlib") is not None)
    return None if found else f"matplotlib is not installed (pictures are optional: {INSTALL})"


def require(feature: str) -> None:
    """ChartsUnavailable naming ``feature`` when pictures cannot be drawn."""
    reason = missing()
    if reason is not None:
        raise ChartsUnavailable(f"{feature} needs a picture, but {reason}")
