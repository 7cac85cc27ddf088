"""The run queue: a Redis Stream read by the ``workers`` consumer group."""

from __future__ import annotations

import redis

from agents.store._redis import GROUP, text
from agents.store.runs import RunStore


class QueueStore(RunStore):
    def enqueue(self, run_id: str) -> None:
        with self.errors():
            self.queue_step(run_id)(self.r)

    def ensure_group(self) -> None:
        with self.errors():
            try:
                self.r.xgroup_create(self.keys.queue(), GROUP, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    def read_queue(self, consumer: str, *, block: float) -> tuple[str, str] | None:
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
        with self.errors():
            self.r.xack(self.keys.queue(), GROUP, entry_id)

    def queue_depth(self) -> int:
        with self.errors():
            return int(self.r.xlen(self.keys.queue()))

    def queue_backlog(self) -> tuple[int, int]:
        """(entries no worker has read yet, entries read but not yet acknowledged).

        ``queue_depth`` counts every entry the stream keeps, finished ones included.
        """
        key = self.keys.queue()
        with self.errors():
            if not self.r.exists(key):
                return 0, 0
            groups = self.r.xinfo_groups(key)
            group = next((g for g in groups if text(g["name"]) == GROUP), None)
            if group is None:
                return int(self.r.xlen(key)), 0
            lag = group.get("lag")
            if lag is None:  # Redis < 7, or not computable: count what is past the cursor
                last = text(group["last-delivered-id"])
                lag = len(self.r.xrange(key, min=f"({last}", max="+") or [])
        return int(lag), int(group["pending"])


