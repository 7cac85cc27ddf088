"""The audit stream's hash chain: each entry carries the hash of the one before it.

An entry's ``hash`` is SHA-256 over its fields (``prev`` included, ``hash`` left out) as
canonical JSON; its ``prev`` is the hash of the entry written just before it, and the
first entry's ``prev`` is the chain's genesis, a random value recorded when the chain began.
The chain's record (``Keys.audit_chain``, a hash) holds:

- ``genesis``; ``legacy_upto``: the stream's newest id when the chain began (entries up to
  it were written before there was a chain, and carry no link);
- ``head``: the hash of the newest entry, written in the same MULTI as that entry, so an
  entry added past deckhand (``redis-cli XADD``) is found even when it copies the link;
- ``trimmed_hash`` / ``trimmed_id`` / ``trimmed_at``: the last entry retention deleted
  (after exporting it) and the newest ``at`` it deleted: the first kept entry links to it.

The link is computed atomically with the append: :class:`AuditAppend` reads ``head`` under
WATCH (``prepare``) and queues the entry and the new head in the caller's MULTI; a
concurrent append changes ``head`` and the transaction is retried with the new one (the
store's ``cas``). Several workers and replicas may append; an entry a worker held through a
Redis outage is linked when it is finally written, so the chain stays whole.

``verify`` walks the stream from the start and names the first broken link: an entry whose
content no longer matches its hash (edited), whose ``prev`` is not the hash of the entry
before it (one removed or inserted before it), an entry with no link after the chain began
(inserted), or a newest entry that is not the recorded head (added, or the newest removed).
A run's own list holds copies: each must match its hash and be in the stream (unless
retention deleted it there). Anyone who can write Redis can still rebuild the whole chain
from scratch: signed checkpoints (``checkpoints``, a key outside Redis) and a copy kept
elsewhere (the sink's, ``deckhand audit export``, retention's archive) are what find that.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import secrets
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from redis.client import Pipeline

from agents.store._redis import Keys, text

PAGE = 1000
REPEATS = 50_000
"""Entries a copy's check remembers to recognise a batch sent again (10,000 at most)."""
LINK_STATE = "audit_head"
"""Where a transaction keeps the hash its next audit entry links to (``prepare`` state)."""


def entry_hash(fields: dict[str, str]) -> str:
    """The hash an entry with these fields carries (its own ``hash`` field left out)."""
    body = {k: v for k, v in fields.items() if k != "hash"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


class AuditAppend:
    """One audit entry's writes (a ``Write``): the stream entry, the run's copy and the new
    head, linked to the head read under WATCH by ``prepare``."""

    def __init__(self, keys: Keys, fields: dict[str, str], run_id: str | None):
        self.keys, self.fields, self.run_id = keys, fields, run_id
        self.linked: dict[str, str] | None = None
        self.start: dict[str, str] = {}

    def prepare(self, pipe: Pipeline, state: dict[str, Any]) -> None:
        """Read the head (once per transaction, under WATCH) and link to it."""
        if LINK_STATE not in state:
            state[LINK_STATE], self.start = _head(pipe, self.keys)
        prev = state[LINK_STATE]
        linked = {**self.sealed(prev), "prev": prev}
        linked["hash"] = entry_hash(linked)
        state[LINK_STATE] = linked["hash"]
        self.linked = linked

    def sealed(self, prev: str) -> dict[str, str]:
        """The fields to link, given the hash they link to (a checkpoint signs it)."""
        return self.fields

    def __call__(self, pipe: Any) -> None:  # Any: redis-py's stubs type fields narrowly
        if self.linked is None:
            raise RuntimeError("an audit entry was queued without its link: queue it with "
                               "RedisBase.queue_writes (update_record and commit do)")
        pipe.xadd(self.keys.audit(), self.linked)
        if self.run_id:
            pipe.rpush(self.keys.run_audit(self.run_id), json.dumps(self.linked))
        pipe.hset(self.keys.audit_chain(), mapping={**self.start, "head": self.linked["hash"]})


def _head(pipe: Any, keys: Keys) -> tuple[str, dict[str, str]]:  # Any: untyped watch()
    """The hash the next entry links to; and the chain's record to create, if it has none."""
    pipe.watch(keys.audit_chain())
    head, genesis = pipe.hmget(keys.audit_chain(), "head", "genesis")
    if genesis is not None:
        return text(head or genesis), {}  # a chain's head, or its genesis before any entry
    pipe.watch(keys.audit())
    newest = pipe.xrevrange(keys.audit(), count=1)
    start = {"genesis": hashlib.sha256(secrets.token_bytes(32)).hexdigest(),
             "legacy_upto": text(newest[0][0]) if newest else "0-0"}
    return start["genesis"], start


@dataclass
class Broken:
    """The first broken link: where, and what is wrong there."""

    where: str
    problem: str

    def __str__(self) -> str:
        return f"{self.where}: {self.problem}"


class HashIndex:
    """Which hashes were seen, in about 8 bytes each (a set of the hex strings took ~150 MB
    at 1M entries): each hash's first 64 bits, kept in sorted runs of ``RUN`` values (only
    one run is ever sorted at once, so memory never spikes); a lookup bisects each run."""

    RUN = 1 << 16

    def __init__(self) -> None:
        self._runs: list[array[int]] = []
        self._pending = array("Q")

    def add(self, hex_hash: str) -> None:
        self._pending.append(_short(hex_hash))
        if len(self._pending) >= self.RUN:
            self._seal()

    def __contains__(self, hex_hash: str) -> bool:
        self._seal()
        value = _short(hex_hash)
        for run in self._runs:
            at = bisect.bisect_left(run, value)
            if at < len(run) and run[at] == value:
                return True
        return False

    def _seal(self) -> None:
        if self._pending:
            self._runs.append(array("Q", sorted(self._pending)))
            self._pending = array("Q")


@dataclass
class ChainReport:
    entries: int = 0
    """Linked entries checked in the stream."""
    legacy: int = 0
    """Entries from before the chain began (no link to check)."""
    copies: int = 0
    """Entries checked in the runs' own lists."""
    trimmed: str | None = None
    """The last entry retention deleted (the stream starts after it)."""
    broken: Broken | None = None
    resumed: str | None = None
    """The verified checkpoint this walk started after (None: from the start)."""
    hashes: HashIndex = field(default_factory=lambda: HashIndex(), repr=False)
    """The linked entries' hashes, for the runs' copies' check."""

    @property
    def ok(self) -> bool:
        return self.broken is None


class Observer(Protocol):
    """Sees each linked entry of a walk, once its link held (``checkpoints.Seals``)."""

    def see(self, stream_id: str, fields: dict[str, str]) -> Broken | None: ...

    def finish(self) -> Broken | None: ...


def verify(r: Any, keys: Keys, *, seals: Observer | None = None,
           resume: tuple[str, str] | None = None) -> ChainReport:
    """Check the stream's chain end to end, then the runs' copies; stop at the first break.
    ``resume``: (stream id, hash) of an entry verified before — the walk starts after it,
    once its content still matches that hash (the runs' copies are then not checked)."""
    report = ChainReport()
    meta = {text(k): text(v) for k, v in r.hgetall(keys.audit_chain()).items()}
    if "genesis" not in meta:
        return _unchained(r, keys, report)
    report.trimmed = meta.get("trimmed_id")
    expected, last, newest = meta.get("trimmed_hash") or meta["genesis"], None, "the stream"
    start = (f"the last entry retention removed ({report.trimmed})" if report.trimmed
             else "the chain's genesis")
    if resume is not None and _still(r, keys, resume):
        expected, last = resume[1], resume[0]
        report.resumed, newest = last, f"entry {last}"
    while True:  # again from the newest checked entry while others append meanwhile
        for stream_id, fields in _walk(r, keys, f"({last}" if last else "-"):
            if "hash" not in fields and _id(stream_id) <= _id(meta["legacy_upto"]):
                report.legacy += 1
                continue
            report.broken = _link_problem(stream_id, fields, expected,
                                          f"entry {last}" if last else start)
            if report.broken:
                return report
            if seals is not None and (broken := seals.see(stream_id, fields)):
                report.broken = broken
                return report
            expected, last, newest = fields["hash"], stream_id, describe(stream_id, fields)
            report.entries += 1
            report.hashes.add(expected)
        head = r.hget(keys.audit_chain(), "head")
        if (text(head) if head else meta["genesis"]) == expected:
            break
        if not r.xrange(keys.audit(), min=f"({last}" if last else "-", max="+", count=1):
            report.broken = Broken(newest,
                                   "is the newest entry but not the head deckhand recorded: "
                                   "an entry was added past deckhand, or the newest ones "
                                   "were removed")
            return report
    if seals is not None and (broken := seals.finish()):
        report.broken = broken
        return report
    if report.resumed is None:
        report.broken = _copies(r, keys, report, meta)
    return report


def _still(r: Any, keys: Keys, resume: tuple[str, str]) -> bool:
    """Whether the entry ``resume`` names is still there, unchanged (else: walk it all)."""
    page = r.xrange(keys.audit(), min=resume[0], max=resume[0])
    if not page:
        return False  # trimmed since: the walk starts from the trimmed head
    fields = {text(k): text(v) for k, v in page[0][1].items()}
    return fields.get("hash") == resume[1] and entry_hash(fields) == resume[1]


def _short(hex_hash: str) -> int:
    try:
        return int(hex_hash[:16], 16)
    except ValueError:
        return 0


def _link_problem(stream_id: str, fields: dict[str, str], expected: str,
                  before: str, *, content: bool = True) -> Broken | None:
    where = describe(stream_id, fields)
    if "hash" not in fields or "prev" not in fields:
        return Broken(where, "carries no link: it was inserted outside deckhand")
    if content and entry_hash(fields) != fields["hash"]:
        return Broken(where, "its content does not match its hash: it was edited")
    if fields["prev"] != expected:
        return Broken(where, f"does not link to {before}: an entry between them was removed "
                             f"or inserted, or {before} was edited")
    return None


def describe(stream_id: str, fields: dict[str, str]) -> str:
    return f"entry {stream_id} ({fields.get('action', '?')} by {fields.get('actor', '?')})"


def _copies(r: Any, keys: Keys, report: ChainReport, meta: dict[str, str]) -> Broken | None:
    """Every run's own list: copies of stream entries, each matching its hash."""
    trimmed_at = float(meta.get("trimmed_at", "-inf"))
    for key in r.scan_iter(match=keys.run_audit("*"), count=PAGE):
        for index, raw in enumerate(r.lrange(key, 0, -1)):
            fields = json.loads(raw)
            if "hash" not in fields:
                continue  # written before the chain began
            report.copies += 1
            where = f"{text(key)}[{index}] ({fields.get('action', '?')})"
            if entry_hash(fields) != fields["hash"]:
                return Broken(where, "its content does not match its hash: it was edited")
            if fields["hash"] not in report.hashes and float(fields["at"]) > trimmed_at:
                return Broken(where, "is not in the audit stream: it was inserted, or its "
                                     "stream entry was removed")
    return None


def _unchained(r: Any, keys: Keys, report: ChainReport) -> ChainReport:
    """No chain record: fine while no entry carries a link (all written before the chain)."""
    for stream_id, fields in _walk(r, keys):
        if "hash" in fields:
            report.broken = Broken(f"entry {stream_id}", "carries a link but the chain's "
                                   f"record ({keys.audit_chain()}) is gone: it was deleted")
            return report
        report.legacy += 1
    return report


def _walk(r: Any, keys: Keys, start: str = "-") -> Iterator[tuple[str, dict[str, str]]]:
    while page := r.xrange(keys.audit(), min=start, max="+", count=PAGE):
        for stream_id, fields in page:
            yield text(stream_id), {text(k): text(v) for k, v in fields.items()}
        start = f"({text(page[-1][0])}"


def _id(stream_id: str) -> tuple[int, int]:
    millis, _, seq = stream_id.partition("-")
    return int(millis), int(seq or 0)


def trimmed(entries: list[tuple[str, dict[str, str]]], meta: dict[str, str]) -> dict[str, str]:
    """The chain record's new ``trimmed_*`` fields once ``entries`` (the stream's oldest,
    oldest first) are deleted."""
    newest_at = max([float(f["at"]) for _, f in entries] + [float(meta.get("trimmed_at",
                                                                          "-inf"))])
    kept = {"trimmed_at": repr(newest_at)}
    linked = [(i, f) for i, f in entries if "hash" in f]
    if linked:
        kept |= {"trimmed_id": linked[-1][0], "trimmed_hash": linked[-1][1]["hash"]}
    return kept


# -- a copy kept elsewhere (the sink's, an export) ---------------------------------------------

COPY_KEYS = ("stream_id", "masked", "kind")
"""Keys a copy's line carries beside the entry's own fields (not hashed): its stream id,
retention's ``kind``, and ``masked`` when the sink's redactor changed the entry (its content
can no longer match its hash; its links still can)."""


@dataclass
class CopyReport:
    entries: int = 0
    """Linked entries checked."""
    legacy: int = 0
    duplicates: int = 0
    """Lines sent again (at-least-once): the same stream id and hash as a line before."""
    masked: int = 0
    """Entries the sink redacted: links checked, content not."""
    anchor: str | None = None
    """The ``prev`` of the first linked entry: the chain's genesis or trimmed head, or the
    entry before the copy began (compare with ``deckhand audit verify``)."""
    head: str | None = None
    broken: Broken | None = None

    @property
    def ok(self) -> bool:
        return self.broken is None


def verify_copy(lines: Iterable[dict[str, Any]], *, anchor: str | None = None,
                seals: Observer | None = None) -> CopyReport:
    """Check a copy of the stream (the sink's JSON lines, or ``audit export``'s), oldest
    first, with the same link checks as ``verify``; lines sent twice are counted once.
    Streams: it holds only the last ``REPEATS`` entries' keys (a repeat is a batch sent
    again, so it follows closely; one from further back fails its link check instead)."""
    report, seen = CopyReport(anchor=anchor), OrderedDict[tuple[str, str], None]()
    expected, before = anchor, "the copy's anchor"
    for number, line in enumerate(lines, 1):
        stream_id, fields = copy_fields(line, number)
        if "hash" not in fields:
            if expected is not None:
                report.broken = Broken(describe(stream_id, fields),
                                       "carries no link: it was inserted outside deckhand")
                return report
            report.legacy += 1
            continue
        if (stream_id, fields["hash"]) in seen:
            report.duplicates += 1
            continue
        if expected is None:  # the copy starts mid-chain: its first link is the anchor
            expected = report.anchor = fields.get("prev", "")
        masked = bool(line.get("masked"))
        report.broken = (_link_problem(stream_id, fields, expected, before, content=not masked)
                         or (seals.see(stream_id, fields) if seals is not None else None))
        if report.broken:
            return report
        seen[(stream_id, fields["hash"])] = None
        if len(seen) > REPEATS:
            seen.popitem(last=False)
        expected, before = fields["hash"], f"entry {stream_id}"
        report.entries, report.masked = report.entries + 1, report.masked + masked
    report.head = expected
    return report


def copy_fields(line: dict[str, Any], number: int) -> tuple[str, dict[str, str]]:
    """(stream id, the entry's fields as hashed) of one line: the sink's lines carry them as
    stored; ``audit export``'s carry the entry's typed view, turned back here."""
    stream_id = str(line.get("stream_id") or f"line {number}")
    fields = {k: v for k, v in line.items() if k not in COPY_KEYS}
    if "ref" in fields or "id" not in fields:
        return stream_id, {k: str(v) for k, v in fields.items()}
    typed = {"ref": fields.pop("id"), "at": repr(float(fields["at"])),
             "run_id": fields.get("run_id") or "", "plan_id": fields.get("plan_id") or "",
             "details": json.dumps(fields.get("details") or {}, sort_keys=True, default=str)}
    if not fields.get("hash"):
        fields.pop("hash", None)
        fields.pop("prev", None)
    return stream_id, {**{k: str(v) for k, v in fields.items()}, **typed}
