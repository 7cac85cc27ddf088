"""Where deckhand writes its state (artifacts, local hosts' directories, logs), kept apart
from the config, which may be mounted read-only (``-v ./config:/config:ro``).

``{state_dir}`` in the config expands to, first found: ``DECKHAND_STATE_DIR``, the config's
``state_dir:`` (relative to the config file; ``{config_dir}`` allowed), else
``{config_dir}/.deckhand`` (a checkout, where the config directory is writable). The image
sets ``DECKHAND_STATE_DIR=/var/lib/deckhand``, a volume.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

ENV = "DECKHAND_STATE_DIR"
PLACEHOLDER = "{state_dir}"


def resolve_state_dir(config_dir: Path, configured: str | None, *,
                      env: Mapping[str, str] | None = None) -> Path:
    """The state directory for a config in ``config_dir`` (see the module docstring)."""
    environ = os.environ if env is None else env
    chosen = environ.get(ENV) or configured
    if not chosen:
        return config_dir / ".deckhand"
    path = Path(chosen.replace("{config_dir}", str(config_dir))).expanduser()
    return path if path.is_absolute() else config_dir / path


def unwritable(path: Path) -> str | None:
    """None if files can be made in ``path`` (created if missing); else why not."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".deckhand-check-"):
            return None
    except OSError as exc:
        return exc.strerror or str(exc)
