"""Signed checkpoints of the audit chain's head, with a key kept outside Redis.

The chain (``chain``) proves that no entry was edited, removed or inserted *unless the whole
chain was rebuilt*: anyone who can write Redis can recompute every hash. A checkpoint is an
audit entry (``audit_checkpoint``) whose details carry an HMAC-SHA256, by a key only deckhand's
processes hold (``DECKHAND_AUDIT_KEY_FILE``), over the head it links to (its ``prev``), its
own ``ref`` and ``at``. Rewriting any entry before it changes that head, and nobody without
the key can sign the new one; removing the checkpoints leaves entries older than the grace
period unsigned, which ``verify`` reports. Checkpoints travel like every entry, so the
sink's copy carries them too.

``Seals`` is what a walk of the chain (the stream, or a copy) learns from its checkpoints;
``Resume`` is where the last successful verify left off (a verified checkpoint), signed too,
so the next verify walks only what came after it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr

from agents.store._redis import Keys
from agents.store.chain import AuditAppend, Broken, describe

CHECKPOINT = "audit_checkpoint"
SCHEME = "hmac-sha256"


class AuditKey:
    """The signing key; ``id`` names it (a hash of it) in every checkpoint."""

    def __init__(self, secret: str):
        self._secret = secret.strip().encode()
        self.id = hashlib.sha256(b"deckhand audit key id\n" + self._secret).hexdigest()[:16]

    def sign(self, *parts: str) -> str:
        message = "\n".join(("deckhand audit v1", *parts)).encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def verifies(self, signature: str, *parts: str) -> bool:
        return hmac.compare_digest(self.sign(*parts), signature)


def signing_key(secret: SecretStr | None) -> AuditKey | None:
    """The key ``DECKHAND_AUDIT_KEY(_FILE)`` holds, if set (``Settings.audit_key``)."""
    return AuditKey(secret.get_secret_value()) if secret is not None else None


class CheckpointAppend(AuditAppend):
    """A checkpoint entry: linked like any other, its signature over the head it links to."""

    def __init__(self, keys: Keys, fields: dict[str, str], key: AuditKey):
        super().__init__(keys, fields, None)
        self.key = key

    def sealed(self, prev: str) -> dict[str, str]:
        signature = self.key.sign("checkpoint", prev, self.fields["ref"], self.fields["at"])
        details = {"scheme": SCHEME, "key_id": self.key.id, "signature": signature}
        return {**self.fields, "details": json.dumps(details, sort_keys=True)}


@dataclass
class Seals:
    """What the checkpoints met on a walk say: the newest one this key signed, and the
    entries after it (unsigned). ``finish`` fails a walk whose unsigned entries are older
    than ``grace`` seconds: checkpoints were removed, or none was written for too long."""

    key: AuditKey | None
    now: float = 0.0
    grace: float = float("inf")
    checkpoints: int = 0
    """Checkpoints this key signed, each verified."""
    foreign: int = 0
    """Checkpoints signed by another key (or unchecked: no key given)."""
    last: tuple[str, str] | None = None
    """(stream id, hash) of the newest verified checkpoint."""
    last_at: float | None = None
    unsigned: int = 0
    """Linked entries after the newest verified checkpoint."""
    unsigned_since: float | None = None

    def see(self, stream_id: str, fields: dict[str, str]) -> Broken | None:
        """One linked entry, its link already checked; Broken if it is a forged checkpoint."""
        if fields.get("action") != CHECKPOINT:
            self._unsigned(fields)
            return None
        details = _details(fields)
        if self.key is None or details.get("key_id") != self.key.id:
            self.foreign += 1
            self._unsigned(fields)
            return None
        if not self.key.verifies(str(details.get("signature", "")), "checkpoint",
                                 fields.get("prev", ""), fields.get("ref", ""),
                                 fields.get("at", "")):
            return Broken(describe(stream_id, fields),
                          "is a checkpoint whose signature does not verify with this key: "
                          "the chain before it was rewritten (or the checkpoint forged)")
        self.checkpoints += 1
        self.last, self.last_at = (stream_id, fields["hash"]), _at(fields)
        self.unsigned, self.unsigned_since = 0, None
        return None

    def finish(self) -> Broken | None:
        """Broken when a key is given and entries older than ``grace`` are unsigned."""
        if self.key is None or not self.unsigned or self.unsigned_since is None:
            return None
        if self.unsigned_since >= self.now - self.grace:
            return None
        after = "the newest checkpoint" if self.last else "the chain's start (no checkpoint)"
        return Broken(f"{self.unsigned} entries after {after}",
                      f"are unsigned, the oldest older than {self.grace:g} s: checkpoints "
                      f"were removed (the chain may have been rebuilt through Redis), or no "
                      f"worker wrote one. Compare with the sink's copy, then sign the head "
                      f"with `deckhand audit checkpoint`")

    def summary(self) -> str:
        if self.key is None:
            return ("unsigned: no key (DECKHAND_AUDIT_KEY_FILE), so the chain is only as "
                    "strong as Redis access")
        foreign = f" ({self.foreign} by another key)" if self.foreign else ""
        upto = f"signed up to entry {self.last[0]}" if self.last else "nothing signed yet"
        return (f"{self.checkpoints} signed checkpoints verified{foreign}, {upto}; "
                f"{self.unsigned} entries after it not signed yet")

    def _unsigned(self, fields: dict[str, str]) -> None:
        self.unsigned += 1
        if self.unsigned_since is None:
            self.unsigned_since = _at(fields)


@dataclass(frozen=True)
class Resume:
    """Where a successful verify left off: a checkpoint it verified (stream id, hash)."""

    stream_id: str
    hash: str

    def signed(self, key: AuditKey) -> str:
        return json.dumps({"stream_id": self.stream_id, "hash": self.hash, "key_id": key.id,
                           "signature": key.sign("verified", self.stream_id, self.hash)})

    @classmethod
    def read(cls, raw: str | None, key: AuditKey) -> Resume | None:
        """The mark, if this key signed it; None otherwise (the walk starts over)."""
        if not raw:
            return None
        try:
            mark = json.loads(raw)
            resume = cls(str(mark["stream_id"]), str(mark["hash"]))
            signature = str(mark["signature"])
        except (ValueError, KeyError, TypeError):
            return None
        if mark.get("key_id") != key.id or not key.verifies(signature, "verified",
                                                            resume.stream_id, resume.hash):
            return None
        return resume


def _details(fields: dict[str, str]) -> dict[str, Any]:
    try:
        found = json.loads(fields.get("details") or "{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _at(fields: dict[str, str]) -> float:
    try:
        return float(fields.get("at", "0"))
    except ValueError:
        return 0.0
