"""The recorder's group commit: host changes written at once by many threads share one
write, yet each caller returns only once its own change has landed, and hears the error of
the write that carried it."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from agents.engine.recorder import GroupCommit
from agents.errors import StoreError
from tests.fixtures.polling import wait_until


class Store:
    """A write that blocks until released, so callers pile up behind it."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, list[Any]]] = []
        self.landed: set[Any] = set()
        self.gate = threading.Event()
        self.fail: BaseException | None = None

    def write(self, run_id: str, changes: list[Any]) -> None:
        self.gate.wait()
        if self.fail is not None:
            raise self.fail
        self.writes.append((run_id, list(changes)))
        self.landed.update(changes)


def _callers(group: GroupCommit, store: Store, n: int) -> tuple[list[threading.Thread],
                                                                 dict[int, object]]:
    seen: dict[int, object] = {}

    def call(i: int) -> None:
        try:
            group.write("run-1", [i])
            seen[i] = i in store.landed  # its own change is in by the time it returns
        except StoreError as exc:
            seen[i] = exc

    threads = [threading.Thread(target=call, args=(i,)) for i in range(n)]
    return threads, seen


def _pile_up(group: GroupCommit, store: Store, n: int) -> dict[int, object]:
    """Caller 0 writes and blocks; callers 1..n-1 queue behind it; then the write goes on:
    what each caller saw (True: its change had landed when it returned, or its error)."""
    threads, seen = _callers(group, store, n)
    threads[0].start()
    wait_until(lambda: group._writing.locked(), what="the first write to be under way")
    for t in threads[1:]:
        t.start()
    wait_until(lambda: len(group._queue) == n - 1, what="the other callers to queue")
    store.gate.set()
    for t in threads:
        t.join(10)
    return seen


def test_callers_waiting_behind_a_write_share_the_next_one() -> None:
    store = Store()
    group = GroupCommit(store.write)
    seen = _pile_up(group, store, 20)
    assert seen == {i: True for i in range(20)}
    assert [w[1] for w in store.writes] == [[0], list(range(1, 20))]  # 2 writes, in order


def test_every_caller_carried_by_a_failed_write_hears_its_error() -> None:
    store = Store()
    store.fail = StoreError("Redis is unreachable")
    group = GroupCommit(store.write)
    seen = _pile_up(group, store, 5)
    assert all(isinstance(v, StoreError) for v in seen.values()) and len(seen) == 5
    assert store.writes == []  # nothing landed: each caller keeps its change (the outbox)


def test_a_lone_caller_writes_at_once() -> None:
    store = Store()
    store.gate.set()
    group = GroupCommit(store.write)
    group.write("run-1", ["a"])
    assert store.writes == [("run-1", ["a"])]
    with pytest.raises(StoreError):
        store.fail = StoreError("down")
        group.write("run-1", ["b"])
