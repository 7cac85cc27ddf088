"""What the MCP face costs over calling deckhand directly.

1. `plan` ("deploy v2.3.1") over stdio with the official client vs ``Desk.plan`` in-process,
   200 calls each: p50/p99 and the ratio of medians (the protocol, JSON and thread hop).
2. `deckhand mcp` start to the first tools/list answer (process start, imports, config).

Run: python -m bench.mcp_overhead   (starts its own redis-server unless REDIS_URL is set)
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import Implementation

from agents.config import load_config
from agents.services import build_services
from agents.store import Store
from bot.cli.demo import copy_examples
from bot.mcp.desk import Desk
from tests.fixtures.redis_server import RedisServer

CALLS = 200
ROOT = Path(__file__).resolve().parents[1]


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(pct / 100 * (len(ordered) - 1))))]


def direct(config_path: Path, redis_url: str) -> list[float]:
    desk = Desk(build_services(load_config(config_path), store=Store.connect(redis_url)))
    times = []
    for _ in range(CALLS):
        start = time.perf_counter()
        desk.plan("deploy v2.3.1", requester="mcp:bench")
        times.append(time.perf_counter() - start)
    return times


async def over_stdio(config_path: Path, redis_url: str) -> tuple[float, list[float]]:
    env = {"PYTHONPATH": str(ROOT), "REDIS_URL": redis_url, "DECKHAND_CONFIG": str(config_path)}
    params = StdioServerParameters(command=sys.executable, args=["-m", "bot.cli", "mcp"],
                                   env=env, cwd=str(ROOT))
    started = time.perf_counter()
    with open(os.devnull, "w") as quiet:
        async with stdio_client(params, errlog=quiet) as (read, write), ClientSession(
                read, write, client_info=Implementation(name="bench", version="1")) as session:
            await session.initialize()
            await session.list_tools()
            ready = time.perf_counter() - started
            times = []
            for _ in range(CALLS):
                start = time.perf_counter()
                result = await session.call_tool("plan", {"request": "deploy v2.3.1"})
                times.append(time.perf_counter() - start)
                assert not result.is_error
    return ready, times


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        redis = None
        url = os.environ.get("REDIS_URL")
        if url is None:
            redis = RedisServer(Path(tmp) / "redis")
            redis.workdir.mkdir()
            redis.start()
            url = redis.url
        try:
            config_path = copy_examples(Path(tmp) / "sample")
            local = direct(config_path, url)
            ready, remote = anyio.run(over_stdio, config_path, url)
        finally:
            if redis is not None:
                redis.stop()
    ms = 1000.0
    print(f"plan in-process: p50 {percentile(local, 50) * ms:.2f} ms, "
          f"p99 {percentile(local, 99) * ms:.2f} ms")
    print(f"plan over stdio: p50 {percentile(remote, 50) * ms:.2f} ms, "
          f"p99 {percentile(remote, 99) * ms:.2f} ms "
          f"({statistics.median(remote) / statistics.median(local):.1f}x in-process)")
    print(f"deckhand mcp start to first tools/list: {ready * ms:.0f} ms")


if __name__ == "__main__":
    main()
