"""known_hosts is parsed once, shared, and read again when the file changes (issue 23)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import threading
from pathlib import Path

import pytest

from tools.errors import HostKeyError
from tools.inventory import Host
from tools.runners.known_hosts import HostKeyInfo, KeyStatus, KnownHosts


def key(seed: int) -> str:
    """A well-formed ed25519 public key blob (32 bytes of key material)."""
    blob = b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + bytes([seed]) * 32
    return base64.b64encode(blob).decode()


def host(port: int) -> Host:
    return Host(name=f"h{port}", address="127.0.0.1", port=port)


def offered(seed: int) -> HostKeyInfo:
    return HostKeyInfo("ssh-ed25519", key(seed), f"SHA256:fake{seed}")


def line(port: int, seed: int) -> str:
    return f"[127.0.0.1]:{port} ssh-ed25519 {key(seed)}\n"


def test_a_fleet_file_is_parsed_once_for_every_host(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    path.write_text("".join(line(2000 + i, i) for i in range(200)))
    known = KnownHosts(path)
    statuses = [known.status(host(2000 + i), offered(i)) for i in range(200)]
    assert statuses == [KeyStatus.TRUSTED] * 200
    assert known.loads == 1


def test_a_host_added_after_loading_is_trusted_and_a_changed_key_refused(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    path.write_text(line(2001, 1))
    known = KnownHosts(path)
    assert known.status(host(2002), offered(2)) is KeyStatus.UNKNOWN
    with path.open("a") as out:  # by hand, within the same timestamp tick
        out.write(line(2002, 2))
    assert known.status(host(2002), offered(2)) is KeyStatus.TRUSTED
    path.write_text(line(2001, 1) + line(2002, 3))  # same size: only the bytes differ
    assert known.status(host(2002), offered(2)) is KeyStatus.CHANGED
    with pytest.raises(HostKeyError, match="HOST KEY CHANGED"):
        known.verify(host(2002), offered(2))
    assert known.loads == 3


def test_an_unchanged_file_is_not_parsed_again_once_its_stamp_is_old(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    path.write_text(line(2001, 1))
    os.utime(path, ns=(0, 10**9))  # modified long before it was read: the stamp is reliable
    known = KnownHosts(path)
    for _ in range(5):
        assert known.status(host(2001), offered(1)) is KeyStatus.TRUSTED
    assert known.loads == 1
    path.write_text(line(2001, 4))  # a new mtime: read again
    assert known.status(host(2001), offered(1)) is KeyStatus.CHANGED


def test_add_is_seen_by_the_same_instance(tmp_path: Path) -> None:
    known = KnownHosts(tmp_path / "sub" / "known_hosts")
    assert known.status(host(2005), offered(5)) is KeyStatus.UNKNOWN
    known.add(host(2005), offered(5))
    assert known.status(host(2005), offered(5)) is KeyStatus.TRUSTED


def test_hashed_names_and_the_first_key_of_a_type_count(tmp_path: Path) -> None:
    salt = bytes(range(20))
    digest = hmac.new(salt, b"[127.0.0.1]:2007", hashlib.sha1).digest()
    hashed = f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"
    path = tmp_path / "known_hosts"
    path.write_text(f"# comment\n\n{hashed} ssh-ed25519 {key(7)}\n{line(2008, 8)}"
                    f"{line(2008, 9)}")
    known = KnownHosts(path)
    assert known.status(host(2007), offered(7)) is KeyStatus.TRUSTED
    assert known.status(host(2009), offered(7)) is KeyStatus.UNKNOWN
    assert known.status(host(2008), offered(9)) is KeyStatus.CHANGED  # the first one wins


def test_a_corrupt_file_fails_closed(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    path.write_text("[127.0.0.1]:2010 ssh-ed25519 not*base64\n")
    with pytest.raises(HostKeyError, match="cannot read known_hosts"):
        KnownHosts(path).status(host(2010), offered(10))


def test_lookups_from_many_threads_agree(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    path.write_text("".join(line(3000 + i, i) for i in range(50)))
    known = KnownHosts(path)
    results: list[KeyStatus] = []
    lock = threading.Lock()

    def check(i: int) -> None:
        status = known.status(host(3000 + i), offered(i))
        with lock:
            results.append(status)

    threads = [threading.Thread(target=check, args=(i % 50,)) for i in range(200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == [KeyStatus.TRUSTED] * 200
    assert known.loads == 1
