"""Which replicas Sentinel could promote: what a mutating start waits for through Sentinel."""

from __future__ import annotations

import redis

from agents.store.connect import _promotable, promotable_replicas

UP = {"is_sdown": False, "is_odown": False, "is_disconnected": False, "slave-priority": 100,
      "master-link-down-time": 0, "down-after-milliseconds": 5000}


def test_a_replica_cut_off_from_the_primary_a_moment_ago_is_promotable() -> None:
    assert _promotable({**UP, "master-link-down-time": 3000})


def test_replicas_sentinel_never_chooses_are_not_waited_for() -> None:
    assert not _promotable({**UP, "is_sdown": True})
    assert not _promotable({**UP, "is_disconnected": True})  # e.g. a dead old primary
    assert not _promotable({**UP, "slave-priority": 0})
    assert not _promotable({**UP, "master-link-down-time": 50001})  # > 10 x down-after


def test_a_client_not_through_sentinel_has_no_sentinel_replicas() -> None:
    assert promotable_replicas(redis.Redis(port=1)) == 0  # no connection is made
