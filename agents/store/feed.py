"""The audit stream read by the sink's shipper: a consumer group (``SINK_GROUP``) on the
audit stream is the durable cursor.

Redis keeps the group's last-delivered id and its pending list (entries read but not yet
acknowledged) in the stream itself, so a shipper that dies between reading a batch and the
sink taking it leaves the batch pending: the next shipper sends it again (at-least-once;
each entry's stream id and hash are its idempotency key) before reading anything newer, so
order holds. An entry is acknowledged only once the sink took it. The group starts at the
stream's beginning: the sink gets every entry still in Redis.
"""

from __future__ import annotations

from typing import Any

import redis

from agents.store._redis import Part, text

SINK_GROUP = "sink"
SINK_JOB = "audit-sink"
"""The job lease one shipper holds at a time (``Locks.take_job``)."""
CONSUMER = "shipper"
"""One consumer name for every shipper process: whoever ships next finds the pending batch."""
COUNT_PAGE = 1000
COUNT_CAP = 1_000_000
"""Where Redis cannot say the group's lag (an entry deleted past the cursor), it is counted
by reading ids, up to this many."""

Entry = tuple[str, dict[str, str] | None]
"""(stream id, fields); fields None: the entry was deleted (XDEL) before it was shipped."""


class AuditFeed(Part):
    """The audit stream as the sink's shipper reads it: pending first, then new entries."""

    def ensure_group(self) -> None:
        with self.errors():
            try:
                self.r.xgroup_create(self.keys.audit(), SINK_GROUP, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    def pending(self, count: int) -> list[Entry]:
        """Entries read before and not acknowledged (a batch a dead shipper left), oldest first."""
        return self._read("0", count, block=None)

    def fresh(self, count: int, *, block: float) -> list[Entry]:
        """Up to ``count`` entries never read, waiting up to ``block`` seconds for one."""
        return self._read(">", count, block=int(block * 1000) or None)

    def ack(self, stream_ids: list[str]) -> None:
        """The sink took these: they are shipped."""
        if stream_ids:
            with self.errors():
                self.r.xack(self.keys.audit(), SINK_GROUP, *stream_ids)

    def lag(self) -> int:
        """Entries not yet shipped: read but not acknowledged, plus never read (everything
        in the stream while no shipper has started)."""
        with self.errors():
            groups = {text(g["name"]): g for g in self._groups()}
            group = groups.get(SINK_GROUP)
            if group is None:
                return int(self.r.xlen(self.keys.audit()))
            unread = group.get("lag")
            if unread is None:  # Redis < 7, or an entry deleted past the cursor
                unread = self._count_after(text(group["last-delivered-id"]))
            return int(group["pending"]) + int(unread)

    def unshipped_from(self, *, sink: bool) -> str | None:
        """The stream id of the oldest entry the sink has not taken yet — retention keeps it
        and all after it, so the SIEM copy has no gap — or None when the sink has taken
        everything. ``sink``: whether one is configured; with no group yet (no shipper has
        started) it has taken nothing, so the oldest entry is returned; without a sink and
        without a group nothing waits for one (None)."""
        with self.errors():
            group = {text(g["name"]): g for g in self._groups()}.get(SINK_GROUP)
            if group is None:
                if not sink:
                    return None
                first = self.r.xrange(self.keys.audit(), min="-", max="+", count=1)
                return text(first[0][0]) if first else None
            if int(group["pending"]):
                oldest = self.r.xpending(self.keys.audit(), SINK_GROUP)["min"]
                return text(oldest)
            after = text(group["last-delivered-id"])
            page = self.r.xrange(self.keys.audit(), min=f"({after}", max="+", count=1)
        return text(page[0][0]) if page else None

    def _groups(self) -> list[dict[str, Any]]:
        try:
            return list(self.r.xinfo_groups(self.keys.audit()))
        except redis.ResponseError:  # no stream yet
            return []

    def _count_after(self, stream_id: str) -> int:
        counted, start = 0, f"({stream_id}"
        while counted < COUNT_CAP:
            page = self.r.xrange(self.keys.audit(), min=start, max="+", count=COUNT_PAGE)
            counted += len(page)
            if len(page) < COUNT_PAGE:
                break
            start = f"({text(page[-1][0])}"
        return counted

    def _read(self, start: str, count: int, *, block: int | None) -> list[Entry]:
        with self.errors():
            found = self.r.xreadgroup(SINK_GROUP, CONSUMER, {self.keys.audit(): start},
                                      count=count, block=block)
        if not found:
            return []
        return [(text(i), {text(k): text(v) for k, v in f.items()} if f else None)
                for i, f in found[0][1]]
