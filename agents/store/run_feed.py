"""What a run still has to say: a per-run feed that any process can carry on.

Workers and faces append entries to the run's feed (a Redis stream, ``run:ID:feed``): the
worker's recorder one per step- or run-level event, in the same MULTI as the record write
that event caused, so the feed and the record never disagree; a face what it tells the
thread (who approved, paused, stopped). A run whose thread someone reads (it was posted in
Slack, or a schedule will post it) is also put in ``feeds:pending``.

A relay (the Slack face of any ``serve`` replica) takes a pending run with a short lease
(``run:ID:feed:relay``), performs its entries in order, and advances the run's cursor after
each one in ``run:ID:feed:state``, together with what it must remember to carry on (the
status message's ts, each go/no-go message's ts): the cursor, the remembered state and the
key of the entry done are one MULTI, refused once the lease has passed to another relay.
So a relay that dies mid-run leaves the rest to the next one, which starts after the last
entry done; an entry whose key is already done is never performed twice. The run leaves
``feeds:pending`` only when its relay has caught up with a feed nobody added to meanwhile
(WATCH on the stream).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from redis.client import Pipeline
from redis.typing import EncodableT, FieldT

from agents.store._redis import Part, Write, text

FEED_MAX = 5_000
"""Entries a run's feed keeps (a run says a few dozen things; this only bounds a runaway)."""
FEED_TTL = 14 * 86_400
"""Seconds a run's feed and its relay state outlive its last entry (retention deletes them
with the run in any case)."""


@dataclass(frozen=True)
class FeedEntry:
    """One thing a run has to say: ``kind`` (event, say, plan) and its data."""

    id: str
    """The stream id: the order, and the cursor's unit."""
    kind: str
    data: dict[str, Any]

    @property
    def key(self) -> str:
        """What makes the entry unique even if its append was sent twice (a retry after a
        connection dropped with the EXEC in flight)."""
        return str(self.data.get("key") or self.id)


@dataclass
class RelayState:
    """What a relay remembers of a run's thread, so any relay can carry it on."""

    cursor: str = "0-0"
    fields: dict[str, str] = field(default_factory=dict)
    """The thread's own facts (``status_ts``, ``hold:STEP/BATCH`` → ts, ``outcome`` …)."""


class RunFeed(Part):
    """Append to a run's feed; take, read and advance it as its relay."""

    # -- producers ---------------------------------------------------------------------------

    def writes(self, run_id: str, entries: list[tuple[str, dict[str, Any]]], *,
               pending: bool) -> list[Write]:
        """The writes appending ``entries`` (kind, data) to the run's feed, to queue in the
        caller's transaction; ``pending``: a relay should pick the run up."""
        key, now = self.keys.run_feed(run_id), self.clock()

        def append(pipe: Pipeline) -> None:
            for kind, data in entries:
                pipe.xadd(key, {"k": kind, "d": json.dumps(data, default=str)},
                          maxlen=FEED_MAX, approximate=True)
            pipe.expire(key, FEED_TTL)
            if pending:
                pipe.zadd(self.keys.feeds_pending(), {run_id: now})

        return [append] if entries else []

    def append(self, run_id: str, kind: str, data: dict[str, Any], *,
               pending: bool = True) -> None:
        """One entry, on its own (a face's line for the thread)."""
        with self.errors(), self.r.pipeline() as pipe:
            for write in self.writes(run_id, [(kind, data)], pending=pending):
                write(pipe)
            pipe.execute()

    # -- the relay ---------------------------------------------------------------------------

    def pending(self, limit: int = 500) -> list[str]:
        """Runs whose thread has something left to say, oldest first."""
        with self.errors():
            return [text(r) for r in self.r.zrange(self.keys.feeds_pending(), 0, limit - 1)]

    def take(self, run_id: str, *, relay: str, ttl: float) -> bool:
        """Become (or stay) the run's relay for ``ttl`` seconds; False if another is."""
        key = self.keys.run_feed_relay(run_id)

        def attempt(pipe: Pipeline) -> bool:
            if pipe.get(key) not in (None, relay.encode()):
                return False
            pipe.multi()
            pipe.set(key, relay, px=int(ttl * 1000))
            pipe.execute()
            return True

        return self.db.cas([key], attempt, busy=f"the relay of run {run_id}")

    def release(self, run_id: str, *, relay: str) -> None:
        key = self.keys.run_feed_relay(run_id)

        def attempt(pipe: Pipeline) -> None:
            if pipe.get(key) == relay.encode():
                pipe.multi()
                pipe.delete(key)
                pipe.execute()

        self.db.cas([key], attempt, busy=f"the relay of run {run_id}")

    def state(self, run_id: str) -> RelayState:
        with self.errors():
            raw = self.r.hgetall(self.keys.run_feed_state(run_id))
        fields = {text(k): text(v) for k, v in raw.items()}
        return RelayState(cursor=fields.pop("cursor", "0-0"), fields=fields)

    def read(self, run_id: str, *, after: str, count: int = 50,
             block: float | None = None) -> list[FeedEntry]:
        """Entries after ``after``, waiting up to ``block`` seconds for one."""
        key = self.keys.run_feed(run_id)
        with self.errors():
            if block and not self.db.embedded:  # fakeredis cannot block: the caller polls
                found = self.r.xread({key: after}, count=count, block=int(block * 1000))
                rows = found[0][1] if found else []
            else:
                rows = self.r.xrange(key, min=f"({after}", max="+", count=count)
        return [FeedEntry(text(i), text(f[b"k"]), json.loads(f[b"d"])) for i, f in rows]

    def done(self, run_id: str, key: str) -> bool:
        with self.errors():
            return bool(self.r.sismember(self.keys.run_feed_done(run_id), key))

    def advance(self, run_id: str, entry: FeedEntry | None, *, relay: str,
                remember: dict[str, str] | None = None) -> bool:
        """Record ``entry`` done (the cursor moves past it) and what the relay learnt doing
        it, in one MULTI; False, writing nothing, if another relay has the run now."""
        lease, state = self.keys.run_feed_relay(run_id), self.keys.run_feed_state(run_id)
        done = self.keys.run_feed_done(run_id)

        def attempt(pipe: Pipeline) -> bool:
            if pipe.get(lease) != relay.encode():
                return False
            pipe.multi()
            mapping: dict[FieldT, EncodableT] = {}
            mapping.update(remember or {})
            if entry is not None:
                mapping["cursor"] = entry.id
                pipe.sadd(done, entry.key)
                pipe.expire(done, FEED_TTL)
            if mapping:
                pipe.hset(state, mapping=mapping)
                pipe.expire(state, FEED_TTL)
            pipe.execute()
            return True

        return self.db.cas([lease], attempt, busy=f"the relay of run {run_id}")

    def forget(self, run_id: str) -> None:
        """The run is gone (retention deleted it): no relay looks for it again."""
        with self.errors():
            self.r.zrem(self.keys.feeds_pending(), run_id)

    def settle(self, run_id: str, *, cursor: str, relay: str) -> bool:
        """Take the run off ``feeds:pending`` if nothing was added after ``cursor``; False
        (it stays) if something was, or another relay has it."""
        key, lease = self.keys.run_feed(run_id), self.keys.run_feed_relay(run_id)

        def attempt(pipe: Pipeline) -> bool:
            newer = pipe.xrange(key, min=f"({cursor}", max="+", count=1)
            if newer or pipe.get(lease) != relay.encode():
                return False
            pipe.multi()
            pipe.zrem(self.keys.feeds_pending(), run_id)
            pipe.delete(lease)
            pipe.execute()
            return True

        return self.db.cas([key, lease], attempt, busy=f"the feed of run {run_id}")
