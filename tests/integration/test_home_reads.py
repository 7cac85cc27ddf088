"""What the App Home reads stays bounded however long the history: open runs from their
index alone (older stores' open runs are indexed once), a user's runs found by a byte
search before any record is parsed."""

from __future__ import annotations

import redis

from agents.policy.rules import Policy
from agents.run.record import Run, RunStatus
from agents.store import Store
from tests.fixtures.builders import NO_TARGETS, make_plan

OPEN = [s for s in RunStatus if not s.terminal]


def _run(store: Store, by: str) -> Run:
    plan = make_plan([{"id": "a", "tool": "echo", "params": {"text": "x"}}])
    store.plans.save(plan.model_copy(update={"requested_by": by}))
    return store.runs.create(Run.for_plan(plan, NO_TARGETS).model_copy(
         update={"requested_by": by}))


def test_open_runs_of_an_older_store_are_indexed_once_then_read_from_the_index(
        store: Store, client: redis.Redis) -> None:
    legacy = _run(store, "alice")
    client.zrem(store.keys.runs_open(), legacy.id)  # stored before the open index existed
    finished = _run(store, "bob")
    store.runs.transition(finished.id, RunStatus.CANCELLED)
    assert [r.id for r in store.runs.recent(limit=50, statuses=OPEN)] == [legacy.id]
    assert client.exists(store.keys.runs_open_complete())
    assert client.zrange(store.keys.runs_open(), 0, -1) == [legacy.id.encode()]
    client.zrem(store.keys.runs_open(), legacy.id)  # from now on the index alone answers
    assert store.runs.recent(limit=50, statuses=OPEN) == []


def test_a_users_runs_are_found_without_parsing_the_others(store: Store) -> None:
    mine = [_run(store, "U001") for _ in range(3)]
    theirs = [_run(store, "U002") for _ in range(5)]
    store.runs.approve(theirs[0].id, face="cli", user="U001", plan_version=1, plan_hash=theirs[0].plan_hash,
                       policy=Policy())
    found = store.runs.mentioning("U001", scan=200)
    assert [r.id for r in found] == [theirs[0].id, *[r.id for r in reversed(mine)]]
    assert store.runs.mentioning("U001", scan=2) == []  # only the newest `scan` are looked at
