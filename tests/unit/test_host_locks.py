"""Which host locks a run takes (docs/services.md 2.5): each host it shares with another
service, or every host it touches under ``lock_hosts`` (the strictest: any rule)."""

from __future__ import annotations

from agents.policy.rules import EnvPolicy, Policy
from agents.run.record import Run
from tools.inventory import Inventory

INVENTORY = Inventory.model_validate({
    "hosts": {"box": {"address": "10.0.0.5", "port": 2222}, "api-1": {"address": "10.0.0.6"},
              "scratch": {"connection": "local"}},
    "environments": {"production": {"hosts": ["box", "api-1", "scratch"]}}})


def a_run(**fields: object) -> Run:
    return Run.model_validate({"plan_id": "plan-1", "plan_version": 1, "plan_hash": "h",
                               "environments": ["production"],
                               "hosts": ["box", "api-1", "scratch", "local"], **fields})


def test_a_run_locks_the_hosts_it_shares_and_with_lock_hosts_every_one() -> None:
    shared = a_run(shared=["web/production"], reach={"production": ["box", "api-1"],
                                                     "web/production": ["box"]})
    assert shared.scopes == ["production", "web/production"]
    assert shared.host_locks(INVENTORY) == ["10.0.0.5:2222"]
    assert shared.host_locks(INVENTORY, every=True) == [  # never "local", this machine
        "10.0.0.5:2222", "10.0.0.6:22", "local:scratch"]
    assert a_run().host_locks(INVENTORY) == []  # nothing shared: environment locks only


def test_lock_hosts_is_the_strictest_of_any_rule() -> None:
    policy = Policy(environments={"production": EnvPolicy(lock_hosts=True),
                                  "staging": EnvPolicy()})
    assert policy.strictest(["production", "staging"]).lock_hosts
    assert not policy.strictest(["staging"]).lock_hosts
