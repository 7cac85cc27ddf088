"""Issue 43 §3: an environment locked by hand refuses new plans and approvals there, naming
who holds it, why and since when, until its holder or an approver unlocks it or it lapses.

Real Redis; the CLI through ``bot.cli.main`` on the sample config; Slack through signed
requests into the real Bolt app.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.config import Config
from agents.engine.manual_locking import LockAsked, lock, said_in_chat, unlock
from agents.engine.worker import Worker, WorkerOptions
from agents.errors import ApprovalRefused, EnvironmentLocked, ManualLockRefused
from agents.ids import short_id
from agents.policy.rules import Policy
from agents.run.record import Run, RunStatus
from agents.services import Services, build_services
from agents.store import Store
from bot.cli import main
from bot.slack import blocks as bk
from tests.fixtures.slack_world import SlackWorld, button

NOON = 1_796_040_000.0  # 2026-11-30 12:00 UTC
HOUR = 3600.0
POLICY = {"environments": {
    "staging": {"approvers": {"anyone": True}},
    "production": {"approvers": {"users": ["bob", "carol"]}, "self_approval": True}}}


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def held(sample_config: Config, redis_url: str) -> Iterator[tuple[Clock, Store, Services]]:
    """Services on an empty real Redis whose store and planning read an injected clock."""
    sample_config.policy = Policy.model_validate(POLICY)
    clock = Clock(NOON)
    store = Store.connect(redis_url, clock=clock)
    store.r.flushdb()
    services = build_services(sample_config, store=store)
    services.clock = clock
    yield clock, store, services
    store.r.flushdb()


def _waiting(services: Services, store: Store) -> Run:
    plan = services.make_plan("deploy v2.3.1", requested_by="alice", face="cli")
    store.plans.save(plan)
    return store.runs.create(Run.for_plan(plan, services.targets(plan)))


def _approve(store: Store, run: Run, user: str, policy: Policy) -> Run:
    return store.runs.approve(run.id, user=user, face="cli", plan_version=run.plan_version,
                              plan_hash=run.plan_hash, policy=policy)


def _audit(store: Store) -> list[dict[str, object]]:
    return [{**e.details, "action": e.action, "actor": e.actor}
            for e in store.audit.entries(limit=100)]


def test_a_lock_refuses_plans_and_approvals_until_an_approver_unlocks(
        held: tuple[Clock, Store, Services]) -> None:
    clock, store, services = held
    policy = services.config.policy
    waiting = _waiting(services, store)
    queued = _approve(store, _waiting(services, store), "bob", policy)
    running = _approve(store, _waiting(services, store), "bob", policy)
    store.runs.transition(running.id, RunStatus.RUNNING)  # as a worker would have
    assert queued.status is RunStatus.QUEUED

    said = lock(services, LockAsked("production", "db migration"), user="bob", face="cli")
    assert "production is locked by bob since 2026-11-30 12:00 UTC: db migration" in said
    assert f"not stopped: {short_id(running.id)} (running)" in said
    assert f"will not start: {short_id(queued.id)} (queued)" in said
    assert json.loads(store.r.get("dh:manlock:production"))["holder"] == "bob"
    worker = Worker(services, store, name="w1", options=WorkerOptions(block=0.1))
    assert worker.process(queued.id) is None  # approved before the lock: not started
    after = store.runs.get(queued.id)
    assert after.status is RunStatus.CANCELLED
    assert (after.reason or "").startswith("not started: production is locked by bob")
    assert store.runs.get(running.id).status is RunStatus.RUNNING  # not stopped

    clock.now += HOUR
    with pytest.raises(EnvironmentLocked, match="locked by bob since 2026-11-30 12:00 UTC: "
                                                "db migration. Ask bob or an approver"):
        services.make_plan("deploy v2.3.1", requested_by="alice", face="cli")
    with pytest.raises(ApprovalRefused, match="production is locked by bob"):
        _approve(store, waiting, "carol", policy)
    assert store.runs.get(waiting.id).approvals == []  # nothing was written
    assert services.make_plan("status of production", requested_by="alice",
                              face="cli").steps  # read-only: changes nothing, passes
    with pytest.raises(ManualLockRefused, match="only someone who may approve production may "
                                                "unlock it. Who can: production: bob, carol"):
        unlock(services, "production", user="mallory", face="cli")

    said = unlock(services, "prod", user="carol", face="cli")  # an alias names it too
    assert said.startswith("🔓 production is unlocked by carol (it was held by bob since "
                           "2026-11-30 12:00 UTC: db migration)")
    assert store.r.get("dh:manlock:production") is None
    assert _approve(store, waiting, "carol", policy).status is RunStatus.QUEUED

    entries = _audit(store)
    actions = [(e["action"], e["actor"], e.get("what")) for e in entries]
    assert ("locked", "bob", None) in actions and ("unlocked", "carol", None) in actions
    assert ("refused", "mallory", "unlock") in actions
    assert ("locked_out", "w1", None) in actions
    assert ("plan_refused", "alice", "plan") in actions and ("refused", "carol", "approve") in actions
    unlocked = next(e for e in entries if e["action"] == "unlocked")
    assert (unlocked["holder"], unlocked["reason"], unlocked["face"]) == ("bob", "db migration",
                                                                          "cli")


def test_a_lock_lapses_at_its_expiry_on_the_store_clock(held: tuple[Clock, Store, Services]
                                                        ) -> None:
    clock, store, services = held
    words = ["lock", "production", "--reason", "db migration", "--for", "2h"]
    said = said_in_chat(services, words, user="bob", groups=[], face="slack")
    assert "until 2026-11-30 14:00 UTC" in said
    clock.now = NOON + 2 * HOUR - 1
    with pytest.raises(EnvironmentLocked, match="until 2026-11-30 14:00 UTC"):
        services.make_plan("deploy v2.3.1", requested_by="alice", face="cli")
    clock.now = NOON + 2 * HOUR
    assert services.make_plan("deploy v2.3.1", requested_by="alice", face="cli").steps
    assert store.manual_locks.all(service=None) == {}
    # a lapsed lock is anyone's to take again, and the taking is audited as such
    lock(services, LockAsked("production", "load test"), user="carol", face="cli")
    assert store.manual_locks.get("production", service=None).holder == "carol"  # type: ignore[union-attr]


def test_only_the_holder_renews_and_bad_words_are_refused(held: tuple[Clock, Store, Services]
                                                          ) -> None:
    _, store, services = held
    lock(services, LockAsked("production", "db migration"), user="bob", face="cli")
    with pytest.raises(ManualLockRefused, match="locked by bob .*: db migration; it stays theirs"):
        lock(services, LockAsked("production", "mine now"), user="carol", face="cli")
    lock(services, LockAsked("production", "db migration, part 2"), user="bob", face="cli")
    assert store.manual_locks.get("production", service=None).reason == "db migration, part 2"  # type: ignore[union-attr]
    for words, problem in [(["lock", "production"], "a lock needs a reason"),
                           (["lock", "prd", "--reason", "x"], "no environment 'prd'; known"),
                           (["lock", "staging", "--reason", "x", "--for", "soon"],
                            "'soon' is not a duration"),
                           (["lock", "staging", "--reason", "x", "--force"], "unknown option"),
                           (["lock"], "which environment?"),
                           (["unlock", "staging"], "staging is not locked")]:
        with pytest.raises(Exception, match=problem):
            said_in_chat(services, words, user="bob", groups=[], face="slack")
    assert set(store.manual_locks.all(service=None)) == {"production"}  # nothing else taken


def test_named_services_key_their_locks_apart(held: tuple[Clock, Store, Services]) -> None:
    _, store, services = held
    services.config.key = "web"
    lock(services, LockAsked("production", "db migration"), user="bob", face="cli")
    assert store.r.exists("dh:manlock:web:production")
    assert store.manual_locks.blocking(["production"], service=None) is None
    assert store.manual_locks.all(service="web")["production"].holder == "bob"


def test_the_cli_locks_refuses_shows_and_unlocks(sample_config: Config, redis_url: str,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    store = Store.connect(redis_url)
    store.r.flushdb()
    monkeypatch.setenv("REDIS_URL", redis_url)
    config = ["--config", str(Path(sample_config.path))]
    assert main(["lock", "production", "--reason", "db migration", "--for", "2h",
                 "--user", "bob", *config]) == 0
    assert "production is locked by bob" in capsys.readouterr().out
    assert main(["plan", "deploy v2.3.1", *config]) != 0
    refused = capsys.readouterr()  # stderr once issue 43 §4 lands; stdout before
    said = refused.err + refused.out
    assert "locked by bob" in said and "db migration" in said
    assert main(["where", *config]) == 0
    assert "🔒 production is locked by bob since " in capsys.readouterr().out
    assert main(["where", "--json", *config]) == 0
    where = {e["environment"]: e["lock"] for e in json.loads(capsys.readouterr().out)}
    assert where["staging"] is None
    assert where["production"]["holder"] == "bob"
    assert where["production"]["until"] - where["production"]["since"] == pytest.approx(2 * HOUR, abs=60)
    assert main(["unlock", "production", "--user", "alice", *config]) == 0
    assert "held by bob" in capsys.readouterr().out
    assert main(["plan", "deploy v2.3.1", *config]) == 0
    assert store.r.get("dh:manlock:production") is None
    assert {e.action for e in store.audit.entries(limit=20)} >= {"locked", "unlocked",
                                                                 "plan_refused"}
    store.r.flushdb()


def _said_in(world: SlackWorld, what: str) -> str:
    """A message posted in the channel, or an answer to a response_url, containing ``what``."""
    def find() -> str | None:
        texts = [str(c.payload.get("text")) for c in world.standin.of("chat.postMessage")]
        texts += [str(r.get("text")) for r in list(world.standin.responses)]
        return next((t for t in texts if what in t), None)
    return str(world.standin.wait_for(find, what=repr(what)))


def test_slack_lock_refuses_a_deploy_and_an_approval_until_unlocked(world: SlackWorld) -> None:
    world.deploy("v2.3.1 to staging")
    before = button(world.plan_message(), "approve")  # planned before the lock
    status, _, _ = world.signer.command("/deckhand", '.lock staging --reason "db migration"',
                                        user="UBOB", response_url=f"{world.standin.url}/response/b")
    assert status == 200
    said = _said_in(world, "staging is locked by UBOB")
    assert "db migration" in said
    assert any(r.get("response_type") == "in_channel" for r in world.standin.responses)

    world.deploy("v2.3.1 to staging", user="UALICE")
    refused = _said_in(world, "Ask UBOB or an approver of staging")
    assert "db migration" in refused and "since" in refused
    world.click("approve", before, user="UCAROL")
    world.standin.wait_for(lambda: any("locked by UBOB" in t for t in world.told("UCAROL")),
                           what="the approval's refusal")
    run_id = bk.parse_button_value(before)[0]
    assert world.store.runs.get(run_id).status is RunStatus.AWAITING_APPROVAL

    mention = {"type": "app_mention", "user": "UMALLORY", "channel": "CDEPLOY",
               "text": "<@UBOT> unlock staging", "ts": "1.1"}
    world.signer.event(mention, event_id="EvUnlock1")
    world.standin.wait_for(lambda: any("only someone who may approve staging" in t
                                       for t in world.told("UMALLORY")), what="the refusal")
    assert world.store.manual_locks.get("staging", service=None) is not None
    world.signer.event({**mention, "user": "UALICE", "text": "<@UBOT> .unlock staging"},
                       event_id="EvUnlock2")
    assert "held by UBOB" in _said_in(world, "staging is unlocked by UALICE")
    world.deploy("v2.3.1 to staging", user="UALICE")
    world.plan_message(1)  # planned and posted again
    actions = [(e.action, e.actor) for e in world.store.audit.entries(limit=50)]
    assert ("locked", "UBOB") in actions and ("unlocked", "UALICE") in actions
    assert ("refused", "UMALLORY") in actions


def test_where_can_i_deploy_names_locks_and_who_may_approve(world: SlackWorld) -> None:
    world.signer.command("/deckhand", "lock production --reason “db migration” --for 2h",
                         user="UBOB", response_url=f"{world.standin.url}/response/b")
    _said_in(world, "production is locked by UBOB")
    world.signer.command("/deckhand", ".wcid", user="UMALLORY",
                         response_url=f"{world.standin.url}/response/UMALLORY")
    answer = world.standin.wait_for(lambda: next(
        (t for t in world.told("UMALLORY") if "staging" in t), None), what="the .wcid answer")
    lines = {line.split("*")[1]: line for line in answer.splitlines()}
    assert lines["staging"].startswith("🟢 *staging* — open · you may not approve there")
    assert lines["production"].startswith("🔒 *production* — locked by <@UBOB> since ")
    assert "db migration" in lines["production"]  # curly quotes read as quotes
    world.signer.event({"type": "app_mention", "user": "UCAROL", "channel": "CDEPLOY",
                        "text": "<@UBOT> where can I deploy?", "ts": "2.2"}, event_id="EvWcid")
    told = world.standin.wait_for(lambda: next(
        (t for t in world.told("UCAROL") if "production" in t), None), what="the mention's answer")
    assert "🟢 *staging* — open · you may approve there" in told  # UCAROL: staging's approver
    assert world.store.manual_locks.get("production", service=None) is not None
    world.open_home("UCAROL")
    home = world.standin.wait_for(lambda: next(
        (c.text_of_blocks() for c in world.standin.of("views.publish")
         if "held by" in c.text_of_blocks()), None), what="the Home with the lock")
    assert "✋ held by <@UBOB> since " in home and "db migration" in home
    world.signer.command("/deckhand", "where production", user="UCAROL",
                         response_url=f"{world.standin.url}/response/UCAROL")
    assert "db migration" in _said_in(world, "🔒 *production* held by <@UBOB> since")


def test_noop_is_a_dry_run_from_a_mention_and_the_command(world: SlackWorld) -> None:
    world.signer.event({"type": "app_mention", "user": "UALICE", "channel": "CDEPLOY",
                        "text": "<@UBOT> .noop v2.3.1 to staging", "ts": "3.3"},
                       event_id="EvNoop")
    assert "Dry run: " in _said_in(world, "Dry run: ")
    world.signer.command("/deckhand", "!noop v2.3.1 to staging", user="UBOB",
                         response_url=f"{world.standin.url}/response/UBOB")
    assert "nothing was changed" in _said_in(world, "(nothing was changed)")
    dry = world.standin.wait_for(lambda: len(e := [x for x in world.store.audit.entries(limit=50)
                                                   if x.action == "dry_run"]) >= 2 and e,
                                 what="two dry runs audited")
    assert {e.actor for e in dry} == {"UALICE", "UBOB"}
    assert not world.store.runs.recent(statuses=[RunStatus.QUEUED, RunStatus.RUNNING])
