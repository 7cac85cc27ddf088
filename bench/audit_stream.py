"""The audit stream at scale: ``audit export``, ``audit verify --copy`` and ``audit verify``
in bounded memory, and an incremental verify from the last verified checkpoint (issue 42 §11).

Seeds N linked entries as deckhand writes them (the chain's record, a run copy for one entry
in ten, a signed checkpoint every 10,000), then runs each command in a fresh process, as an
operator would, and reads its peak resident memory (``ru_maxrss``). The bound each figure is
set against is measured in the same run: the same command over an empty chain (the
interpreter and deckhand's imports), so "growth" is what N entries cost. The target: under
100 MB of growth at 1M entries, the same at 1M as at a tenth of it (bounded, not linear).

Run: python -m bench.audit_stream [--entries 1000000]
(starts its own redis-server on a free port; or set REDIS_URL, whose database is flushed).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from agents.store.chain import entry_hash
from agents.store.checkpoints import CHECKPOINT, SCHEME, AuditKey
from bench.store_history import redis_url

ROOT = Path(__file__).resolve().parents[1]
KEY = secrets.token_hex(32)
CHECKPOINT_EVERY = 10_000
PAGE = 2000
TARGET_MB = 100.0
PEAK = ("import resource, sys\nfrom bot.cli import main\ncode = main(sys.argv[1:])\n"
        "print('peak_kb', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
        "sys.exit(code)\n")


def seed(client: redis.Redis, count: int) -> None:
    """``count`` linked entries (and checkpoints), as ``AuditLog.record`` writes them."""
    key, genesis = AuditKey(KEY), hashlib.sha256(secrets.token_bytes(32)).hexdigest()
    prev, now, pipe = genesis, time.time() - count / 1000, client.pipeline(transaction=False)
    for n in range(count):
        run_id = f"run-{n // 10:07d}"
        fields = {"ref": f"aud-{n:09d}", "at": repr(now + n / 1000), "actor": f"w{n % 7}",
                  "action": "step_finished", "run_id": run_id, "plan_id": f"plan-{n // 10}",
                  "details": json.dumps({"step": f"s{n % 8}", "host": f"web-{n % 40}",
                                         "status": "succeeded", "exit": 0}, sort_keys=True)}
        if n and n % CHECKPOINT_EVERY == 0:
            fields.update(action=CHECKPOINT, run_id="", plan_id="", details=json.dumps(
                {"scheme": SCHEME, "key_id": key.id, "signature": key.sign(
                    "checkpoint", prev, fields["ref"], fields["at"])}, sort_keys=True))
        fields["prev"] = prev
        fields["hash"] = prev = entry_hash(fields)
        pipe.xadd("dh:audit", fields)  # type: ignore[arg-type]
        if n % 10 == 0 and fields["run_id"]:
            pipe.rpush(f"dh:run:{run_id}:audit", json.dumps(fields))
        if n % PAGE == PAGE - 1:
            pipe.execute()
    pipe.hset("dh:audit:chain", mapping={"genesis": genesis, "legacy_upto": "0-0",
                                         "head": prev})
    pipe.execute()


def measure(url: str, args: list[str], *, stdout: Path | None = None) -> tuple[float, float]:
    """(peak MB, seconds) of ``deckhand ARGS`` in a fresh process."""
    key_file = Path(tempfile.gettempdir()) / f"bench-audit-key-{os.getpid()}"
    key_file.write_text(KEY)
    env = {**os.environ, "REDIS_URL": url, "DECKHAND_AUDIT_KEY_FILE": str(key_file)}
    started = time.monotonic()
    with (stdout.open("wb") if stdout else open(os.devnull, "wb")) as out:
        done = subprocess.run([sys.executable, "-c", PEAK, *args], env=env, cwd=ROOT,
                              stdout=out, stderr=subprocess.PIPE, text=True, check=False)
    seconds = time.monotonic() - started
    peak = [line for line in done.stderr.splitlines() if line.startswith("peak_kb")]
    if done.returncode != 0 or not peak:
        raise SystemExit(f"deckhand {' '.join(args)} failed ({done.returncode}):\n"
                         f"{done.stderr[-2000:]}")
    return int(peak[-1].split()[1]) / 1024, seconds


def commands(copy: Path, config: Path) -> dict[str, tuple[list[str], Path | None]]:
    conf = ["--config", str(config)]
    return {"audit export": (["audit", "export", *conf], copy),
            "audit verify --copy": (["audit", "verify", "--copy", str(copy), *conf], None),
            "audit verify --full": (["audit", "verify", "--full", *conf], None),
            "audit verify (incremental)": (["audit", "verify", *conf], None)}


def run_all(url: str, work: Path) -> dict[str, tuple[float, float]]:
    config = work / "deckhand.yml"
    config.write_text("audit:\n  checkpoint_every: 86400\n")
    return {name: measure(url, argv, stdout=out)
            for name, (argv, out) in commands(work / "copy.jsonl", config).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    args = parser.parse_args()
    tenth = max(args.entries // 10, 1)
    with redis_url() as url, tempfile.TemporaryDirectory() as tmp:
        client = redis.Redis.from_url(url)
        results: dict[int, dict[str, tuple[float, float]]] = {}
        for count in (0, tenth, args.entries):
            client.flushdb()
            started = time.monotonic()
            seed(client, count)
            print(f"seeded {count:,} entries in {time.monotonic() - started:.1f} s", flush=True)
            work = Path(tmp) / str(count)
            work.mkdir()
            results[count] = run_all(url, work)
        client.flushdb()
    report(results, tenth, args.entries)


def report(results: dict[int, dict[str, tuple[float, float]]], tenth: int, full: int) -> None:
    print(f"\npeak memory of each command in a fresh process; floor = the same command over "
          f"an empty chain (this run); growth = peak - floor; target < {TARGET_MB:g} MB growth")
    print(f"{'command':28} {'floor MB':>9} {'peak MB':>9} {'growth MB':>10} "
          f"{'growth/target':>14} {f'growth vs {tenth:,}':>16} {'seconds':>8}")
    for name in results[0]:
        floor = results[0][name][0]
        small, (peak, seconds) = results[tenth][name][0], results[full][name]
        growth, small_growth = peak - floor, max(small - floor, 0.1)
        print(f"{name:28} {floor:9.1f} {peak:9.1f} {growth:10.1f} {growth / TARGET_MB:14.2f} "
              f"{growth / small_growth:15.2f}x {seconds:8.1f}")
    full_s, incremental_s = (results[full]["audit verify --full"][1],
                             results[full]["audit verify (incremental)"][1])
    print(f"\nincremental verify after a full one: {incremental_s:.1f} s vs {full_s:.1f} s "
          f"({incremental_s / full_s:.2f}x) at {full:,} entries")


if __name__ == "__main__":
    main()
