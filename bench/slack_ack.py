"""Slack ack latency and Web API call count, over loopback HTTP.

1. Ack latency p50/p99 of /deploy and of Approve, 200 signed requests each, measured at
   the client (target p99 < 100 ms; Slack's own limit is 3000 ms).
2. Ack p99 of refused requests (``/deckhand cancel`` of a run that does not exist).
3. Ack p99 of /deploy while the Web API answers 429 to everything (Retry-After: 1).
4. Ack p99 of /deploy with 1,000 idle connections held open with partial requests.
5. Web API calls for one 8-step run end to end, /deploy to summary (target <= 20).

Targets for 1-4: p99 < 100 ms over loopback.

Run: python -m bench.slack_ack   (starts its own redis-server unless REDIS_URL is set)
"""

from __future__ import annotations

import os
import socket
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlparse

from pydantic import SecretStr

from agents.config import load_config
from agents.engine.worker import WorkerOptions
from agents.policy.rules import Policy
from agents.services import build_services
from agents.settings import Settings
from agents.store import Store
from bot.cli.demo import prepare_workspace, stop_servers
from bot.slack import blocks as bk
from bot.slack.runtime import BotRuntime
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.sample import free_port
from tests.fixtures.slack_standin import Signer, SlackStandin

SECRET = "bench-signing-secret"


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(pct / 100 * (len(ordered) - 1))))]


def start(workdir: Path, redis_url: str, standin: SlackStandin, workers: int
          ) -> tuple[BotRuntime, Signer, Store]:
    config = prepare_workspace(workdir / f"sample-{workers}")
    config.policy = Policy()  # anyone may approve; one approval
    store = Store.connect(redis_url)
    store.r.flushdb()
    settings = Settings(SLACK_BOT_TOKEN=SecretStr("xoxb-bench"),
                        SLACK_SIGNING_SECRET=SecretStr(SECRET),
                        SLACK_API_URL=f"{standin.url}/api/")
    runtime = BotRuntime(build_services(config, settings, store=store), settings,
                         workers=workers, worker_options=WorkerOptions(block=0.1))
    runtime.start_workers()
    port = free_port()
    runtime.start_http(host="127.0.0.1", port=port)
    return runtime, Signer(SECRET, f"http://127.0.0.1:{port}/slack/events"), store


def ack_latencies(signer: Signer, standin: SlackStandin, count: int) -> tuple[list, list]:
    deploys, approvals = [], []
    for i in range(count):
        status, _, took = signer.command("/deploy", "v2.3.1", user="UBENCH",
                                         trigger_id=f"bench-{i}",
                                         response_url=f"{standin.url}/response/b")
        assert status == 200
        deploys.append(took)
    plans = standin.wait_for(lambda: (p := [c for c in standin.of("chat.postMessage")
                                            if "approve" in c.text_of_blocks()])
                             and len(p) >= count and p, timeout=120, what="all plans")
    for call in plans[:count]:
        value = _approve_value(call)
        status, _, took = signer.interaction({
            "type": "block_actions", "user": {"id": "UAPPROVER"}, "team": {"id": "T1"},
            "api_app_id": "A1", "trigger_id": "t", "channel": {"id": "CDEPLOY"},
            "actions": [{"type": "button", "action_id": "approve", "block_id": "b",
                         "value": value, "action_ts": str(time.time())}]})
        assert status == 200
        approvals.append(took)
    return deploys, approvals


def refused_latencies(signer: Signer, standin: SlackStandin, count: int) -> list[float]:
    took = []
    for i in range(count):
        status, _, seconds = signer.command("/deckhand", f"cancel run-nope{i}", user="UBENCH",
                                            response_url=f"{standin.url}/response/r")
        assert status == 200
        took.append(seconds)
    return took


def storm_latencies(signer: Signer, standin: SlackStandin, count: int) -> list[float]:
    """/deploy acks while every Web API call is answered 429 (the work pool absorbs it)."""
    for method in ("chat.postMessage", "chat.postEphemeral", "chat.update", "usergroups.list"):
        standin.rate_limit(method, times=100_000, retry_after=1)
    return _deploys(signer, standin, count, "storm")


def idle_latencies(signer: Signer, standin: SlackStandin, count: int, held: int
                   ) -> list[float]:
    """/deploy acks while ``held`` connections sit on half-sent requests."""
    url = urlparse(signer.url)
    with ExitStack() as stack:
        for _ in range(held):
            conn = stack.enter_context(socket.create_connection((url.hostname, url.port), 5))
            conn.sendall(b"POST /slack/events HTTP/1.1\r\nHost: deckhand\r\n")
        return _deploys(signer, standin, count, "idle")


def _deploys(signer: Signer, standin: SlackStandin, count: int, tag: str) -> list[float]:
    took = []
    for i in range(count):
        status, _, seconds = signer.command("/deploy", "v2.3.1", user="UBENCH",
                                            trigger_id=f"{tag}-{i}",
                                            response_url=f"{standin.url}/response/{tag}")
        assert status == 200
        took.append(seconds)
    return took


def _approve_value(call) -> str:
    for block in call.blocks:
        for element in block.get("elements", []):
            if element.get("action_id") == "approve":
                return element["value"]
    raise ValueError("no approve button")


def calls_for_one_run(signer: Signer, standin: SlackStandin, store: Store) -> int:
    before = len(standin.calls)
    signer.command("/deploy", "v2.3.1", user="UBENCH", trigger_id="one-run",
                   response_url=f"{standin.url}/response/one")
    plan = standin.wait_for(lambda: [c for c in standin.calls[before:]
                                     if c.method == "chat.postMessage"
                                     and "approve" in c.text_of_blocks()], what="the plan")[0]
    value = _approve_value(plan)
    signer.interaction({"type": "block_actions", "user": {"id": "UAPPROVER"},
                        "team": {"id": "T1"}, "api_app_id": "A1", "trigger_id": "t",
                        "channel": {"id": "CDEPLOY"},
                        "actions": [{"type": "button", "action_id": "approve",
                                     "block_id": "b", "value": value, "action_ts": "1"}]})
    run_id = bk.parse_button_value(value)[0]
    standin.wait_for(lambda: store.runs.get(run_id).status.terminal, timeout=120, what="the run")
    standin.wait_for(lambda: any("SUCCEEDED" in c.text_of_blocks()
                                 for c in standin.calls[before:]), what="the summary")
    return len([c for c in standin.calls[before:] if c.method != "usergroups.list"])


def main() -> None:
    count = int(os.environ.get("BENCH_REQUESTS", "200"))
    with tempfile.TemporaryDirectory() as tmp:
        redis = None
        url = os.environ.get("REDIS_URL")
        if url is None:
            redis = RedisServer(Path(tmp))
            redis.start()
            url = redis.url
        standin = SlackStandin()
        runtime, signer, store = start(Path(tmp), url, standin, workers=0)
        try:
            deploys, approvals = ack_latencies(signer, standin, count)
            refused = refused_latencies(signer, standin, count)
            idle = idle_latencies(signer, standin, min(count, 100), held=1000)
            storm = storm_latencies(signer, standin, min(count, 100))
        finally:
            runtime.stop()
        standin.close()
        standin = SlackStandin()
        runtime, signer, store = start(Path(tmp), url, standin, workers=1)
        try:
            calls = calls_for_one_run(signer, standin, store)
        finally:
            stop_servers(load_config(Path(tmp) / "sample-1" / "deckhand.yml"))
            runtime.stop()
            standin.close()
            if redis:
                redis.stop()
    for name, values in (("/deploy", deploys), ("Approve", approvals), ("refused", refused),
                         ("1000idle", idle), ("429storm", storm)):
        print(f"{name:8} ack over loopback HTTP: p50 {statistics.median(values) * 1000:.1f} ms, "
              f"p99 {percentile(values, 99) * 1000:.1f} ms ({len(values)} requests; "
              f"p99 is {percentile(values, 99) / 3.0:.3%} of Slack's 3 s; target < 100 ms)")
    print(f"Web API calls for one 8-step run, /deploy to summary: {calls} (target <= 20)")


if __name__ == "__main__":
    main()
