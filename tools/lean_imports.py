"""Importing our dependencies without the optional extras they load for features deckhand
never uses.

redis-py, fakeredis and paramiko each import an optional package at import time whenever
it happens to be installed, only to offer a feature deckhand does not call. On a machine
that has them (numpy comes with the ``charts`` extra) they cost every command's start-up
about 0.2 s, most of the time between launching ``deckhand run`` and its first SSH
connection (issue 31; ``python -X importtime``).

:func:`without_unused_extras` hides those packages while the block imports, so each
dependency takes its own "not installed" path; afterwards they import normally again (the
charts still load numpy). Only packages not yet imported are hidden, so nothing already
loaded is affected.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

UNUSED_EXTRAS: dict[str, str] = {
    "numpy": "fakeredis's vector sets",
    "jsonpath_ng": "fakeredis's RedisJSON commands",
    "probables": "fakeredis's Bloom and Cuckoo filters",
    "opentelemetry.sdk.metrics": "redis-py's own OpenTelemetry metrics",
    "invoke": "paramiko's `Match exec` in ssh_config files (deckhand reads none)",
}
"""Package → the feature it would bring, which deckhand does not use."""


@contextmanager
def without_unused_extras() -> Iterator[None]:
    """Within the block, importing any of :data:`UNUSED_EXTRAS` raises ImportError (as if
    it were not installed). Meant for start-up, before other threads import anything."""
    hidden = [name for name in UNUSED_EXTRAS if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # the import system's "absent"
    try:
        yield
    finally:
        for name in hidden:
            if sys.modules.get(name, False) is None:
                del sys.modules[name]
