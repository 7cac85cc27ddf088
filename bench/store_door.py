"""What the store's redaction door and the audit chain cost, against peers on the same server.

1. A run record rewritten (WATCH, GET, MULTI, SET) for a run of 1, 50 and 500 hosts: the
   door's CPU per write (``redact_text`` over the record, the config's redactor) against the
   bare transaction on the same server (the round trips it rides on), and the store's own
   ``update_record`` (door included) against the same bare transaction.
2. An audit entry appended with its hash link (WATCH on the chain's head, HMGET, MULTI,
   XADD + RPUSH + HSET) vs the pre-chain append (MULTI, XADD + RPUSH) on the same client.

Run: REDIS_URL=redis://127.0.0.1:6379/15 python -m bench.store_door
(the database in REDIS_URL is flushed).
"""

from __future__ import annotations

import json
import os
import time

import redis

from agents.run.record import HostResult, Run, StepState, StepStatus
from agents.store import Store
from bench.timing import median_ms
from tools.redact import Redactor, redact_text

SECRETS = ["cfg-secret-value-1", "another-configured-secret"]


def big_run(hosts: int) -> Run:
    run = Run(plan_id="plan-x", plan_version=1, plan_hash="h" * 64, goal="deploy v1.2.3",
              requested_by="alice")
    state = StepState(id="deploy")
    state.hosts = {f"web-{i}": HostResult(host=f"web-{i}", status=StepStatus.SUCCEEDED,
                                          tail="line one\nline two ok\n" * 4)
                   for i in range(hosts)}
    run.steps = {"deploy": state}
    return run


def record_rewrite(url: str, hosts: int) -> tuple[float, float]:
    """(through the store and its door, the same transaction on a bare client)."""
    store = Store.connect(url)
    store.redact_with(Redactor.from_env(SECRETS))
    run = store.runs.create(big_run(hosts))
    bare, key = redis.Redis.from_url(url), store.keys.run(run.id)

    def raw() -> None:
        with bare.pipeline() as pipe:
            pipe.watch(key)
            record = Run.model_validate_json(pipe.get(key))
            pipe.multi()
            pipe.set(key, record.model_dump_json())
            pipe.execute()

    door: list[float] = []
    peer: list[float] = []
    for _ in range(5):  # interleaved, so load on the shared machine hits both alike
        door.append(median_ms(lambda: store.update_record(key, Run, lambda r: None,
                                                          missing="gone"), 40))
        peer.append(median_ms(raw, 40))
    return sorted(door)[2], sorted(peer)[2]


def door_cpu(hosts: int) -> float:
    redact, text = Redactor.from_env(SECRETS), big_run(hosts).model_dump_json()
    return median_ms(lambda: redact_text(redact, text), 200)


def audit_append(url: str) -> tuple[float, float]:
    store = Store.connect(url)
    chained = median_ms(lambda: store.audit.record("step_finished", actor="w", run_id="run-1",
                                                   step="deploy", status="succeeded"), 500)
    client = store.r

    def bare() -> None:
        entry = {"ref": store.ids("aud"), "at": repr(time.time()), "actor": "w",
                 "action": "step_finished", "run_id": "run-1", "plan_id": "",
                 "details": json.dumps({"step": "deploy", "status": "succeeded"})}
        with client.pipeline() as pipe:
            pipe.xadd(store.keys.audit(), entry)
            pipe.rpush(store.keys.run_audit("run-1"), json.dumps(entry))
            pipe.execute()

    return chained, median_ms(bare, 500)


def main() -> None:
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
    redis.Redis.from_url(url).flushdb()
    print("run record rewrite (median ms): the door's CPU | store.update_record | bare")
    for hosts in (1, 50, 500):
        door, peer = record_rewrite(url, hosts)
        cpu = door_cpu(hosts)
        print(f"  {hosts:>4} hosts: door {cpu:6.3f} ({cpu / peer:5.2f}x bare) | store "
              f"{door:7.3f} ({door / peer:5.2f}x bare) | bare {peer:7.3f}")
    chained, bare = audit_append(url)
    print(f"audit append (median ms): chained {chained:.3f} / bare {bare:.3f} = "
          f"{chained / bare:.2f}x")
    redis.Redis.from_url(url).flushdb()


if __name__ == "__main__":
    main()
