"""A store written before services were keyed is read as the legacy service, with no
migration (docs/services.md 3): tests/fixtures/pre_services_store.json holds the raw keys
the previous release wrote through its own code (tests/fixtures/make_pre_services_store.py),
loaded here into a real redis-server."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import redis

from agents.config import Config
from agents.engine.worker import Worker, WorkerOptions
from agents.errors import LockHeld
from agents.org import load_org
from agents.run.record import Run, RunStatus
from agents.services import Services, build_services
from agents.settings import Settings
from agents.store import Store
from agents.store.check import StoreCheck
from bot.cli import main
from tests.fixtures.make_pre_services_store import dump
from tests.fixtures.store_snapshot import restore

FIXTURE = json.loads((Path(__file__).parents[1] / "fixtures" / "pre_services_store.json")
                     .read_text())
IDS: dict[str, str] = FIXTURE["ids"]


@pytest.fixture
def old_store(client: redis.Redis, redis_url: str) -> Store:
    """The previous release's keys, read through a store whose clock is the fixture's."""
    restore(client, FIXTURE["keys"])
    return Store.connect(redis_url, clock=lambda: FIXTURE["made_at"] + 60)


def test_where_and_history_of_a_one_service_store_print_as_before(
        old_store: Store, tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "deckhand.yml").write_text(FIXTURE["config"])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.delenv("DECKHAND_CONFIG", raising=False)
    assert main(["where", "--json"]) == 0
    where = json.loads(capsys.readouterr().out)
    assert [e.pop("lock") for e in where] == [None] * len(where)  # a field added since
    assert json.dumps(where, indent=2, sort_keys=True) + "\n" == FIXTURE["where_json"]
    assert main(["history", "production", "--json"]) == 0
    assert capsys.readouterr().out == FIXTURE["history_json"]


def test_the_legacy_service_reads_and_keeps_everything_the_old_release_wrote(
        old_store: Store, tmp_path: Path) -> None:
    store, api, _ = _org(tmp_path, old_store)
    assert api.config.key is None  # legacy_service: api owns the unqualified keys
    assert store.history.current(None, "production").version == "v1.0.0"
    assert [w.environment for w in store.history.everywhere(None)] == ["production", "staging"]
    assert len(store.limits.recent(None, "production", "U1")) == 1
    assert store.schedules.get(IDS["schedule"]).service is None
    assert store.locks.get(None, "production").run_id == IDS["holder"]
    with pytest.raises(LockHeld, match=rf"^production is locked by {IDS['holder']}"):
        store.locks.acquire(None, ["production"], run_id="run-new", worker="w", ttl=60)

    pending = FIXTURE["pending_plan"]
    plan = store.plans.get(pending["id"])
    assert (plan.service, plan.hash) == (None, pending["hash"])  # the buttons still match
    run = store.runs.approve(IDS["pending"], user="U1", face="slack", plan_version=1,
                             plan_hash=pending["hash"], policy=api.config.policy)
    assert run.status is RunStatus.QUEUED

    store.queue.ensure_group()
    assert StoreCheck(store).violations() == []
    store.locks.release(None, ["staging", "production"], run_id=IDS["holder"])
    assert store.queue.wake_next(None, "production") == IDS["waiting"]


def test_a_second_service_deploys_production_while_the_legacy_lock_holds(
        old_store: Store, tmp_path: Path, client: redis.Redis,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DECKHAND_STATE_DIR", str(tmp_path / "state"))
    store, api, web = _org(tmp_path, old_store)
    done = _approved_and_processed(web, "deploy v2.0.0")
    assert done.status is RunStatus.SUCCEEDED, done.reason
    assert store.history.current("web", "production").version == "v2.0.0"
    assert store.history.current(None, "production").version == "v1.0.0"  # api's untouched
    assert json.loads(client.get("dh:lock:production"))["run"] == IDS["holder"]
    assert client.keys("dh:lock:web:*") == []  # released

    refused = _approved_and_processed(api, "deploy v1.2.0")
    assert refused.status is RunStatus.FAILED
    assert f"production is locked by {IDS['holder']}" in (refused.reason or "")
    assert client.zrange("dh:runs:svc:web", 0, -1) == [done.id.encode()]
    assert client.keys("dh:runs:svc:*") == [b"dh:runs:svc:web"]  # api's are the legacy rest


def test_a_one_service_deploy_writes_only_shapes_the_old_release_wrote(
        client: redis.Redis, redis_url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "deckhand.yml").write_text(FIXTURE["config"])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.delenv("DECKHAND_CONFIG", raising=False)
    assert main(["run", "deploy v1.0.0", "--yes", "--user", "U1"]) == 0
    assert main(["schedules", "add", "0 2 * * *", "deploy v1.0.0 to staging",
                 "--user", "U1"]) == 0
    capsys.readouterr()
    written, before = dump(client), FIXTURE["keys"]
    assert {_shape(k) for k in written} <= {_shape(k) for k in before}
    assert _fields(written) <= _fields(before) | ADDED


ADDED = {"policy", "face", "approvals.policy", "meta.policy"}
"""Fields added since the previous release, which it ignores on reading (its models do not
forbid extra fields; audit details and ``meta`` are free-form): the policy version of each
run, approval and audit entry, and the face of an audit entry (issue 41 §7)."""


# -- helpers -------------------------------------------------------------------------------


def _org(tmp_path: Path, store: Store) -> tuple[Store, Services, Services]:
    """api (the legacy service: the fixture's config) and web (the same, its own hosts)."""
    (tmp_path / "api.yml").write_text(FIXTURE["config"])
    (tmp_path / "web.yml").write_text(FIXTURE["config"].replace("prod-", "web-prod-")
                                      .replace("staging-1", "web-staging-1"))
    main_config = tmp_path / "deckhand.yml"
    main_config.write_text("services:\n  api: api.yml\n  web: web.yml\nlegacy_service: api\n")
    org = load_org(main_config)
    return store, _services(org.services["api"], store), _services(org.services["web"], store)


def _services(config: Config, store: Store) -> Services:
    return build_services(config, Settings(), store=store)


def _approved_and_processed(services: Services, request: str) -> Run:
    store = services.store
    plan = store.plans.save(services.make_plan(request, requested_by="U1", face="cli"))
    run = store.runs.create(Run.for_plan(plan, services.targets(plan)))
    store.runs.approve(run.id, user="U1", face="cli", plan_version=plan.version,
                       plan_hash=plan.hash, policy=services.config.policy)
    Worker(services, store, name="w-new", options=WorkerOptions(block=0.05)).process(run.id)
    return store.runs.get(run.id)


_ID = re.compile(r"\b(run|plan|sch|aud)-[0-9a-z]{26}\b")


def _shape(key: str) -> str:
    """A key with its ids and timestamps generalised (``dh:run:ID:audit``)."""
    key = _ID.sub(lambda m: f"{m[1]}-ID", key)
    return re.sub(r"\d{4}-\d\d-\d\dT[\d:.+Z-]+$", "ISO", key)


def _fields(keys: dict[str, dict[str, Any]]) -> set[str]:
    """Every JSON field name (as a dotted path) in every stored text value."""
    found: set[str] = set()
    for dumped in keys.values():
        for text in _texts(dumped["value"]):
            try:
                value = json.loads(text)
            except ValueError:
                continue
            found |= _paths(value, "")
    return found


def _texts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return []


def _paths(value: Any, prefix: str) -> set[str]:
    if isinstance(value, dict):
        return {p for k, v in value.items()
                for p in {f"{prefix}{_ID.sub('ID', k)}",
                          *_paths(v, f"{prefix}{_ID.sub('ID', k)}.")}}
    if isinstance(value, list):
        return {p for v in value for p in _paths(v, prefix)}
    return set()
