"""The run queue: a Redis Stream read by the ``workers`` consumer group.

An entry is deleted in the same MULTI that acknowledges it, so the stream holds only work
waiting for a worker or taken by one and not yet done: its length stays bounded by the
backlog, and the backlog is exact even where Redis cannot compute a group's lag.
"""

from __future__ import annotations

from collections.abc import Iterator

import redis
from redis.client import Pipeline

from agents.store._redis import GROUP, Part, Write, scope_label, text

PAGE = 500
"""Stream entries read per round trip when scanning the queue."""


class Queue(Part):
    """The run queue: a stream consumed by a group of workers; an entry names a run."""

    def step(self, run_id: str) -> Write:
        """The XADD that queues ``run_id``; return it from an ``update_run`` change to
        queue the run in the same transaction as its state change."""
        return lambda pipe: pipe.xadd(self.keys.queue(), {"run": run_id})

    def entries(self) -> Iterator[tuple[str, str]]:
        """(entry id, run id) of every entry still in the stream, oldest first, in pages."""
        start = "-"
        while True:
            page = self.r.xrange(self.keys.queue(), min=start, max="+", count=PAGE)
            for entry_id, fields in page:
                yield text(entry_id), text(fields.get(b"run", b""))
            if len(page) < PAGE:
                return
            start = f"({text(page[-1][0])}"

    def unqueue(self, run_id: str) -> list[Write]:
        """The writes that acknowledge and delete ``run_id``'s queue entries (read now, so
        call it inside a change), for a run that no longer needs a worker."""
        found = [entry_id for entry_id, run in self.entries() if run == run_id]
        if not found:
            return []
        return [lambda pipe: pipe.xack(self.keys.queue(), GROUP, *found),
                lambda pipe: pipe.xdel(self.keys.queue(), *found)]

    def wake_next(self, service: str | None, environment: str) -> str | None:
        """Move the first run waiting for ``service``'s ``environment`` lock onto the queue,
        popping and queueing in one EXEC (a crash in between would strand it); None if none
        waits."""
        label = scope_label(service, environment)
        return self._wake(self.keys.lock_queue(service, environment), label)

    def wake_next_host(self, host: str) -> str | None:
        """Move the first run waiting for the lock on host ``host`` onto the queue."""
        return self._wake(self.keys.host_lock_queue(host), f"host {host}")

    def _wake(self, key: str, label: str) -> str | None:
        def attempt(pipe: Pipeline) -> str | None:
            first = pipe.lindex(key, 0)
            if first is None:
                return None
            pipe.multi()
            pipe.lpop(key)
            self.step(text(first))(pipe)
            pipe.execute()
            return text(first)

        return self.cas([key], attempt, busy=f"the queue for {label}'s lock")

    def ensure_group(self) -> None:
        with self.errors():
            try:
                self.r.xgroup_create(self.keys.queue(), GROUP, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    def read(self, consumer: str, *, block: float) -> tuple[str, str] | None:
        """The next new entry for ``consumer`` as (entry id, run id), waiting up to ``block`` s."""
        with self.errors():
            reply = self.r.xreadgroup(GROUP, consumer, {self.keys.queue(): ">"}, count=1,
                                      block=max(1, int(block * 1000)))
        for _, entries in reply or []:
            for entry_id, fields in entries:
                return entry_id.decode(), fields[b"run"].decode()
        return None

    def reclaim(self, consumer: str, *, idle: float) -> tuple[str, str] | None:
        """An entry another consumer left unacknowledged for ``idle`` seconds, now ours."""
        with self.errors():
            reply = self.r.xautoclaim(self.keys.queue(), GROUP, consumer,
                                      min_idle_time=int(idle * 1000), start_id="0-0", count=1)
        for entry_id, fields in reply[1] if len(reply) > 1 else []:
            if fields:
                return entry_id.decode(), fields[b"run"].decode()
        return None

    def touch(self, consumer: str, entry_id: str) -> None:
        """Reset an entry's idle time so nobody reclaims a run that is still executing."""
        with self.errors():
            self.r.xclaim(self.keys.queue(), GROUP, consumer, 0, [entry_id], justid=True)

    def ack(self, entry_id: str) -> None:
        """Done with an entry: acknowledge and delete it together."""
        with self.errors():
            self._settle(self.r.pipeline(), [entry_id])

    def settle(self, run_id: str) -> int:
        """Acknowledge and delete every entry naming ``run_id`` (a run executed in-process,
        so no worker needs to take it); the number settled."""
        with self.errors():
            found = [i for i, run in self.entries() if run == run_id]
            if found:
                self._settle(self.r.pipeline(), found)
        return len(found)


    def _settle(self, pipe: Pipeline, entry_ids: list[str]) -> None:
        pipe.xack(self.keys.queue(), GROUP, *entry_ids)
        pipe.xdel(self.keys.queue(), *entry_ids)
        pipe.execute()

    def depth(self) -> int:
        """Entries no worker has taken yet."""
        return self.backlog()[0]

    def backlog(self) -> tuple[int, int]:
        """(entries no worker has taken yet, entries taken but not yet acknowledged)."""
        key = self.keys.queue()
        with self.errors():
            if not self.r.exists(key):
                return 0, 0
            groups = self.r.xinfo_groups(key)
            group = next((g for g in groups if text(g["name"]) == GROUP), None)
            length = int(self.r.xlen(key))
        if group is None:
            return length, 0
        pending = int(group["pending"])
        # Entries are acknowledged and deleted together, so what is neither pending nor
        # deleted waits. Redis's own ``lag`` is None on Redis < 7 or past a deleted entry,
        # and can overcount once the deleted entries are behind the first one (it read 2
        # with one entry waiting after a cancel then a finish); it is kept as a bound for a
        # stream where older code left acknowledged entries undeleted.
        unread = max(0, length - pending)
        lag = group.get("lag")
        return (min(int(lag), unread) if lag is not None else unread), pending
