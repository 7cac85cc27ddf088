"""What reading requests in people's words costs the playbook planner (issue 33).

On the config `deckhand init` writes, over the 43 plannable requests of
agents/evaluation/phrasings_cases.yml:

1. peer: the same playbook regexes (RE2, as the planner compiles them) tried on each request
   as typed, lower-cased, as the planner matched before this change;
2. deckhand: PlaybookPlanner.match — filler dropped, versions normalised, aliases tried,
   captures typed (the plan is then built alike either way, so it is left out).

Prints the median per request of each, the ratio, and how many requests each understood.

Run: python -m bench.phrasing [--repeat 200]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from agents.config import load_config
from agents.evaluation.cases import load_cases
from agents.requests.phrasing import Phrasing
from agents.requests.playbooks import PlaybookPlanner
from bench.timing import median_ms
from bot.cli.init import template_text
from tools.regex import compile_safe

CASES = Path(__file__).parents[1] / "agents" / "evaluation" / "phrasings_cases.yml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "deckhand.yml"
        path.write_text(template_text())
        config = load_config(path)
    requests = [c.request for c in load_cases(CASES) if c.kind != "refuse"]
    patterns = [compile_safe(p, ignore_case=True) for b in config.playbooks for p in b.match]
    planner = PlaybookPlanner(config.playbooks,
                              phrasing=Phrasing.of(config.inventory.environments))

    def peer() -> int:
        return sum(any(p.fullmatch(r.strip().lower()) for p in patterns) for r in requests)

    def deckhand() -> int:
        return sum(planner.match(r) is not None for r in requests)

    peer_ms = median_ms(peer, args.repeat) / len(requests)
    ours_ms = median_ms(deckhand, args.repeat) / len(requests)
    print(f"{len(requests)} requests, median per request over {args.repeat} rounds")
    print(f"  peer (regexes as typed):       {peer_ms:.4f} ms, understood {peer()}")
    print(f"  deckhand (read as people say): {ours_ms:.4f} ms, understood {deckhand()}")
    print(f"  deckhand / peer: {ours_ms / peer_ms:.1f}x")


if __name__ == "__main__":
    main()
