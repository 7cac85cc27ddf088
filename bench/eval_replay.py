"""What `deckhand eval`'s model transport costs, and what a replay saves.

One LLM plan ("status of staging") per call through the real openai client, 200 calls each:

1. plain: the client's own transport → the OpenAI stand-in on loopback (the peer);
2. live: the same through ModelTraffic (tokens counted per case);
3. record: live, and every answer written to a directory;
4. replay: answered from that directory, no server at all.

Prints the median per plan and each against the plain client. The stand-in answers at once,
so these are the transport's own costs: a real model's seconds per answer dwarf them, and
are what a replay saves.

Run: python -m bench.eval_replay [--calls 200]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import openai

from agents.config import Config, load_config
from agents.evaluation.planners import ModelSetup, PlannerSpec, build_subject
from agents.planning.llm import LLMPlanner
from agents.planning.prompt import plan_to_wire
from agents.requests.playbooks import PlaybookPlanner
from agents.settings import Settings
from bench.timing import median_ms
from tests.fixtures.openai_standin import API_KEY, OpenAIStandin
from tests.fixtures.sample import EXAMPLES

REQUEST, MODEL = "status of staging", "standin-model"


def through_eval(config: Config, settings: Settings, setup: ModelSetup, calls: int) -> float:
    subject = build_subject(PlannerSpec("llm", model=MODEL), config, settings, setup)
    traffic = subject.traffic
    assert traffic is not None

    def plan() -> object:
        traffic.begin("status-of-staging")
        return subject.plan(REQUEST)

    try:
        return median_ms(plan, calls)
    finally:
        subject.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    calls = parser.parse_args().calls
    config = load_config(EXAMPLES / "deckhand.yml")
    answer = plan_to_wire(PlaybookPlanner(config.playbooks).plan(REQUEST, requested_by="bench"))
    standin = OpenAIStandin().start()
    settings = Settings(OPENAI_API_KEY=API_KEY, OPENAI_BASE_URL=standin.base_url,
                        OPENAI_MODEL=MODEL)
    try:
        for _ in range(3 * calls):
            standin.reply_json(answer)
        client = openai.OpenAI(api_key=API_KEY, base_url=standin.base_url, max_retries=0)
        planner = LLMPlanner(config, client=client, model=MODEL)
        plain = median_ms(lambda: planner.plan(REQUEST, requested_by="bench"), calls)
        with tempfile.TemporaryDirectory() as tapes:
            live = through_eval(config, settings, ModelSetup(), calls)
            record = through_eval(config, settings, ModelSetup(record=Path(tapes)), calls)
            replay = through_eval(config, Settings(OPENAI_MODEL=MODEL),
                                  ModelSetup(replay=Path(tapes)), calls)
    finally:
        standin.stop()
    print(f"{calls} plans each, median ms per plan (vs the plain openai client):")
    for name, value in [("plain client → stand-in", plain), ("ModelTraffic live", live),
                        ("ModelTraffic record", record), ("ModelTraffic replay", replay)]:
        print(f"  {name:<24} {value:7.2f} ms  ({value / plain:.2f}×)")


if __name__ == "__main__":
    main()
