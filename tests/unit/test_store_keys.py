"""Store keys by service (docs/services.md 2.4): the legacy service (None) keeps the key
shapes written before services byte for byte; a named service's are qualified."""

from __future__ import annotations

import pytest

from agents.store import Keys
from agents.store._redis import scope_label, scope_member, split_member

KEYS = Keys("dh")


@pytest.mark.parametrize(("key", "today", "qualified"), [
    (lambda s: KEYS.lock(s, "production"), "dh:lock:production", "dh:lock:api:production"),
    (lambda s: KEYS.lock_queue(s, "production"), "dh:lockq:production",
     "dh:lockq:api:production"),
    (lambda s: KEYS.approved_by(s, "production", "U1"), "dh:limits:production:U1",
     "dh:limits:api:production:U1"),
    (lambda s: KEYS.history(s, "production"), "dh:history:env:production",
     "dh:history:env:api:production"),
    (lambda s: KEYS.history_facts(s, "production"), "dh:history:facts:production",
     "dh:history:facts:api:production"),
    (lambda s: KEYS.deployed(s, "production"), "dh:where:production", "dh:where:api:production"),
])
def test_every_key_naming_an_environment_is_todays_for_the_legacy_service(
        key: object, today: str, qualified: str) -> None:
    assert callable(key)
    assert key(None) == today
    assert key("api") == qualified


def test_keys_that_name_no_environment_are_unchanged() -> None:
    assert (KEYS.locks(), KEYS.history_environments()) == ("dh:locks", "dh:history:envs")
    assert KEYS.host_lock("10.0.0.5:22") == "dh:hostlock:10.0.0.5:22"
    assert KEYS.host_locks() == "dh:hostlocks"
    assert KEYS.host_lock_queue("local:web-1") == "dh:hostlockq:local:web-1"
    assert KEYS.runs_of("api") == "dh:runs:svc:api"
    assert KEYS.runs_of_complete() == "dh:runs:svc:complete"


@pytest.mark.parametrize(("service", "environment", "member", "label"), [
    (None, "production", "production", "production"),
    ("api", "production", "api:production", "api/production"),
    ("web-2", "staging", "web-2:staging", "web-2/staging"),
])
def test_index_members_split_back_into_service_and_environment(
        service: str | None, environment: str, member: str, label: str) -> None:
    assert scope_member(service, environment) == member
    assert split_member(member) == split_member(member.encode()) == (service, environment)
    assert scope_label(service, environment) == label
