"""Secrets from files as well as the environment: ``SLACK_BOT_TOKEN_FILE=/run/secrets/x``
(the Docker and Kubernetes secrets convention), read once when the settings load.

Setting both ``NAME`` and ``NAME_FILE`` is refused (which one wins would be a guess), as is a
file that cannot be read or is empty; one trailing newline (what ``echo`` writes) is dropped.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

from agents.errors import SettingsInvalid

SUFFIX = "_FILE"


def secrets_from_files(names: list[str], env: Mapping[str, str] | None = None
                       ) -> dict[str, str]:
    """``{NAME: contents}`` for each ``NAME_FILE`` set in ``env``; SettingsInvalid if bad."""
    environ = os.environ if env is None else env
    found: dict[str, str] = {}
    problems: list[str] = []
    for name in names:
        path = environ.get(name + SUFFIX)
        if not path:
            continue
        if environ.get(name):
            problems.append(f"  {name} and {name}{SUFFIX} are both set: unset one")
            continue
        try:
            value = Path(path).read_text().removesuffix("\n")
        except PermissionError as exc:
            problems.append(f"  {name}{SUFFIX}: cannot read {path} ({exc.strerror or exc}): "
                            f"{_unreadable(path)}")
            continue
        except OSError as exc:
            problems.append(f"  {name}{SUFFIX}: cannot read {path} ({exc.strerror or exc})")
            continue
        if not value.strip():
            problems.append(f"  {name}{SUFFIX}: {path} is empty")
            continue
        found[name] = value
    if problems:
        raise SettingsInvalid("bad environment setting(s):\n" + "\n".join(problems)
                              + "\nfix or unset them and try again")
    return found


def _unreadable(path: str) -> str:
    """What to do about a secret file this process may not read: whose it is, who reads."""
    uid, gid = os.geteuid(), os.getegid()
    try:
        info = os.stat(path)
        whose = (f"it is owned by uid {info.st_uid}, gid {info.st_gid}, mode "
                 f"{stat.S_IMODE(info.st_mode):04o}, ")
    except OSError:
        whose = ""
    return (f"{whose}and deckhand runs as uid {uid}, gid {gid}. Make it readable by uid "
            f"{uid}: for a Docker Compose secret, run `chown {uid}:{gid} FILE && chmod 0400 "
            f"FILE` on the host file it comes from (Compose mounts a file secret with the "
            f"host file's owner and mode; see deploy/compose.yml)")
