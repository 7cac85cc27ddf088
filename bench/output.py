"""Output at wire speed: N MB of log lines from a host over SSH, through `deckhand run`,
side by side with `ssh host cmd | wc -c` in the same run.

    python -m bench.output [--mb 100] [--profile /tmp/output.prof]

One sshd on loopback (the tests' fixture). The step is read-only (it runs at once, no
approval); deckhand keeps a bounded, redacted tail of what it printed, like any step.
Prints wall time, MB/s, the ratio to plain ssh, deckhand's peak RSS, and the same with
1 MB, so that the cost per further MB (the output path itself) is shown apart from
deckhand's fixed start-up (imports, connection, plan, summary). ``--profile``
runs deckhand under py-spy (``pip install py-spy``) and writes collapsed stacks there.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from tests.fixtures.sshd import SSHFleet, start_fleet

ROOT = Path(__file__).resolve().parents[1]
LINE = "2026-11-25T13:00:00Z INFO request handled path=/api/v1/items status=200 ms=12"


def flood(mb: int) -> str:
    return f"yes '{LINE}' | head -c {mb * 1024 * 1024}"


def write_config(root: Path, fleet: SSHFleet, mb: int) -> Path:
    data = {"tools": {"flood": {"description": "print a lot of log lines (read-only)",
                                "command": flood(mb), "target": "environment",
                                "approval": "none", "timeout": 600}},
            "inventory": {"known_hosts": str(fleet.known_hosts),
                          "hosts": {"h": fleet.inventory_host("h")},
                          "environments": {"solo": {"hosts": ["h"]}}},
            "secrets": ["not-in-the-output-zq81"],
            "playbooks": [{"name": "flood", "match": ["^flood$"], "goal": "flood",
                           "steps": [{"id": "flood", "tool": "flood",
                                      "params": {"environment": "solo"}}]}]}
    path = root / "deckhand.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def plain_ssh(fleet: SSHFleet, mb: int) -> float:
    host = fleet["h"]
    started = time.perf_counter()
    done = subprocess.run(
        f"ssh -q -i {fleet.user_key} -p {host.port} -o UserKnownHostsFile={fleet.known_hosts}"
        f" -o BatchMode=yes {fleet.user}@127.0.0.1 \"{flood(mb)}\" | wc -c",
        shell=True, capture_output=True, text=True, check=True)
    took = time.perf_counter() - started
    assert int(done.stdout) == mb * 1024 * 1024, done.stdout
    return took


def deckhand(config: Path, profile: str | None) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of `deckhand run flood`."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"} | {"PYTHONPATH": str(ROOT)}
    prefix = [sys.executable]
    if profile:  # every thread (the run's work is not on the main one)
        prefix = ["py-spy", "record", "--threads", "--format", "raw", "-r", "200", "-o",
                  profile, "--", sys.executable]
    started = time.perf_counter()
    done = subprocess.run([*prefix, "-m", "bot.cli", "run", "flood", "--config", str(config)],
                          env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"deckhand run failed ({done.returncode}):\n{done.stdout[-2000:]}"
                         f"\n{done.stderr[-2000:]}")
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return took, rss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100, help="MB of output (at least 2)")
    parser.add_argument("--profile", help="write deckhand's py-spy stacks to this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        fleet = start_fleet(root / "fleet", ["h"])
        try:
            ssh = plain_ssh(fleet, args.mb)
            ours, rss = deckhand(write_config(root, fleet, args.mb), args.profile)
            ssh_1 = plain_ssh(fleet, 1)  # the fixed costs: start, connect, plan, summary
            ours_1, _ = deckhand(write_config(root, fleet, 1), None)
        finally:
            fleet.stop()
    print(f"{args.mb} MB of log lines from one host over SSH")
    print(f"  ssh host cmd | wc -c   {ssh:7.2f} s  {args.mb / ssh:7.0f} MB/s")
    print(f"  deckhand run           {ours:7.2f} s  {args.mb / ours:7.0f} MB/s   "
          f"ratio {ours / ssh:5.1f}x   peak RSS {rss:.0f} MB")
    per_mb_ssh, per_mb_ours = (ssh - ssh_1) / (args.mb - 1), (ours - ours_1) / (args.mb - 1)
    print(f"  the same with 1 MB: ssh {ssh_1:.2f} s, deckhand {ours_1:.2f} s (start-up, "
          f"connection, plan, summary)")
    print(f"  per further MB: ssh {per_mb_ssh * 1000:.1f} ms, deckhand {per_mb_ours * 1000:.1f} "
          f"ms (ratio {per_mb_ours / max(per_mb_ssh, 1e-6):.1f}x)")


if __name__ == "__main__":
    main()
