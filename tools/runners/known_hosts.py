"""The known_hosts file: which host keys deckhand trusts, parsed once and re-read on change.

A rollout opens one connection per host and checks each host's key twice (the key type to
ask for, then the key offered). Re-parsing the file for every check made connection setup
O(N²) in the number of hosts (paramiko's ``HostKeys`` also de-duplicates with a linear scan
per line). So the file is parsed once into an index, and read again only when it changed:
its inode, size or mtime differ, or it was modified so recently that a same-size rewrite
within the file system's timestamp granularity could look unchanged (then its bytes are
compared). A host trusted while deckhand runs (``deckhand hosts trust``, or by hand) is
accepted on its next connection; a key replaced in the file is refused on the next one.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import threading
import time
from dataclasses import dataclass
from enum import StrEnum
from hashlib import sha1
from pathlib import Path

import paramiko

from tools.errors import HostKeyError
from tools.inventory import Host

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
RACY_NS = 2_000_000_000
"""A file modified this close to when we read it may change again with the same stamp
(mtimes are as coarse as 1-2 s on some file systems): its bytes are compared instead."""

# known_hosts says ssh-rsa; the host key algorithm we must ask for is an rsa-sha2 one.
_ALGORITHMS = {"ssh-rsa": "rsa-sha2-512"}


class KeyStatus(StrEnum):
    TRUSTED = "trusted"
    UNKNOWN = "unknown"
    CHANGED = "changed"


@dataclass(frozen=True)
class HostKeyInfo:
    """A server's public host key, as shown to a person deciding whether to trust it."""

    key_type: str
    base64: str
    fingerprint: str

    @classmethod
    def of(cls, key: paramiko.PKey) -> HostKeyInfo:
        return cls(key.get_name(), key.get_base64(), key.fingerprint)


class _Index:
    """One parse of the file: plain names in a dict, hashed names (``|1|salt|hmac``) in a
    list matched on lookup. The first key of a type listed for a name is the trusted one."""

    def __init__(self, text: str):
        self.plain: dict[str, dict[str, str]] = {}
        self.hashed: list[tuple[bytes, bytes, str, str]] = []
        for line in text.splitlines():
            fields = line.split()
            if len(fields) < 3 or fields[0].startswith(("#", "@")):
                continue  # comments, and @cert-authority / @revoked (no certificates here)
            names, key_type, key = fields[:3]
            _check_base64(line, key)
            for name in names.split(","):
                self._add(name, key_type, key)

    def _add(self, name: str, key_type: str, key: str) -> None:
        if name.startswith("|1|"):
            salt, _, digest = name[3:].partition("|")
            try:
                self.hashed.append((base64.b64decode(salt), base64.b64decode(digest),
                                    key_type, key))
            except (binascii.Error, ValueError):
                return  # not a hashed name OpenSSH could have written: it matches nothing
        else:
            self.plain.setdefault(name, {}).setdefault(key_type, key)

    def lookup(self, name: str) -> dict[str, str]:
        found = dict(self.plain.get(name, {}))
        for salt, digest, key_type, key in self.hashed:
            mac = hmac.new(salt, name.encode(), sha1).digest()
            if hmac.compare_digest(mac, digest):
                found.setdefault(key_type, key)
        return found


def _check_base64(line: str, key: str) -> None:
    try:
        base64.b64decode(key, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"invalid key in line {line[:80]!r}") from exc


class KnownHosts:
    """A known_hosts file (OpenSSH format, hashed entries included). Thread-safe: share one
    instance per file (``RunnerPool`` does), so it is parsed once for every host."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(os.path.expanduser(str(path or DEFAULT_KNOWN_HOSTS)))
        self.loads = 0
        """How many times the file was parsed (once, until it changes)."""
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._raw: bytes | None = None
        self._read_at = 0
        self._index = _Index("")
        self._found: dict[str, dict[str, str]] = {}

    @staticmethod
    def entry_name(host: Host) -> str:
        """How OpenSSH names the host in known_hosts: ``addr`` or ``[addr]:port``."""
        return host.address if host.port == 22 else f"[{host.address}]:{host.port}"

    def keys_for(self, host: Host) -> dict[str, str]:
        """The trusted keys for ``host``, base64 by key type (empty when it is unknown)."""
        name = self.entry_name(host)
        with self._lock:
            self._refresh()
            found = self._found.get(name)
            if found is None:
                found = self._found[name] = self._index.lookup(name)
            return dict(found)

    def status(self, host: Host, key: HostKeyInfo) -> KeyStatus:
        known = self.keys_for(host)
        if not known:
            return KeyStatus.UNKNOWN
        return KeyStatus.TRUSTED if known.get(key.key_type) == key.base64 \
            else KeyStatus.CHANGED

    def verify(self, host: Host, key: HostKeyInfo) -> None:
        """Raise HostKeyError unless ``key`` is the trusted key for ``host``."""
        status = self.status(host, key)
        if status is KeyStatus.UNKNOWN:
            raise HostKeyError(self._unknown_message(host, key))
        if status is KeyStatus.CHANGED:
            raise HostKeyError(self._changed_message(host, key))

    def add(self, host: Host, key: HostKeyInfo) -> None:
        """Append ``key`` as trusted for ``host`` (creating the file if needed)."""
        with self._lock:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            text = self.path.read_text() if self.path.exists() else ""
            lead = "\n" if text and not text.endswith("\n") else ""
            with self.path.open("a") as out:
                out.write(f"{lead}{self.entry_name(host)} {key.key_type} {key.base64}\n")

    def prefer_known_types(self, transport: paramiko.Transport, host: Host) -> None:
        """Ask for the key type we already trust, so a second key type is not 'changed'."""
        known = [_ALGORITHMS.get(t, t) for t in self.keys_for(host)]
        if known:
            options = transport.get_security_options()
            first = [t for t in options.key_types if t in known]
            options.key_types = first + [t for t in options.key_types if t not in first]

    # -- reading the file ----------------------------------------------------------------

    def _refresh(self) -> None:
        """Re-parse the file if it changed since it was last read (call under the lock)."""
        try:
            info = self.path.stat()
        except FileNotFoundError:
            self._use(None, b"")
            return
        except OSError as exc:
            raise HostKeyError(f"cannot read known_hosts {self.path}: {exc}") from exc
        stamp = (info.st_ino, info.st_mtime_ns, info.st_size)
        if stamp == self._stamp and info.st_mtime_ns < self._read_at - RACY_NS:
            return
        try:
            raw = self.path.read_bytes()
        except OSError as exc:
            raise HostKeyError(f"cannot read known_hosts {self.path}: {exc}") from exc
        self._use(stamp, raw)

    def _use(self, stamp: tuple[int, int, int] | None, raw: bytes) -> None:
        self._stamp, self._read_at = stamp, time.time_ns()
        if raw == self._raw:
            return
        try:
            index = _Index(raw.decode("utf-8", errors="replace"))
        except ValueError as exc:
            raise HostKeyError(f"cannot read known_hosts {self.path}: {exc}") from exc
        self._raw, self._index, self._found = raw, index, {}
        self.loads += 1

    # -- messages ------------------------------------------------------------------------

    def _unknown_message(self, host: Host, key: HostKeyInfo) -> str:
        # Never suggest a blind ssh-keyscan: it trusts whatever key answers, attacker's too.
        return (f"host key of {self.entry_name(host)} is not in {self.path}; refusing to "
                f"connect. It offered {key.key_type} {key.fingerprint}. Compare that "
                f"fingerprint with the host's own (`ssh-keygen -lf` on its host key, or your "
                f"provisioning records); if it matches, run `deckhand hosts trust "
                f"{host.name}`")

    def _changed_message(self, host: Host, key: HostKeyInfo) -> str:
        name = self.entry_name(host)
        return (f"HOST KEY CHANGED for {name}: it offered {key.key_type} {key.fingerprint}, "
                f"which is not the key in {self.path}. Refusing to connect: the host was "
                f"reinstalled, or someone is intercepting the connection. If you know it "
                f"was rebuilt, remove the old key with `ssh-keygen -R '{name}' -f "
                f"{self.path}`, then run `deckhand hosts trust {host.name}`")
