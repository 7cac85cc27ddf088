"""Who looked at their App Home lately, shared by every ``serve`` replica: the replica that
says a run's thread refreshes the Homes of people who opened theirs through any replica."""

from __future__ import annotations

from agents.store._redis import Part, text

KEEP = 1_000
"""Viewers remembered at most (the most recent)."""


class HomeViewers(Part):
    def opened(self, user: str) -> None:
        key = self.keys.home_viewers()
        with self.errors(), self.r.pipeline() as pipe:
            pipe.zadd(key, {user: self.clock()})
            pipe.zremrangebyrank(key, 0, -KEEP - 1)
            pipe.execute()

    def recent(self, within: float, *, limit: int) -> list[str]:
        """Who opened their Home in the last ``within`` seconds, most recent first."""
        with self.errors():
            found = self.r.zrevrangebyscore(self.keys.home_viewers(), "+inf",
                                            self.clock() - within, start=0, num=limit)
        return [text(user) for user in found]
