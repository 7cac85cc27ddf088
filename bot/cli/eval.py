"""``deckhand eval``: planners scored against gold plans, side by side, gated for CI.

Exit 0 when every threshold is met, 1 when one is missed or a replay lacked a recording,
2 for invalid input (a malformed cases file, an unknown planner spec).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rich.console import Console

from agents.config import Config
from agents.errors import EvaluationError
from agents.evaluation.cases import Case, load_cases, spread
from agents.evaluation.planners import ModelSetup, PlannerSpec, build_subject, parse_spec
from agents.evaluation.quality import OUTCOMES, Maker, Tally, fates, tally
from agents.evaluation.report import (
    THRESHOLDS,
    Difference,
    Summary,
    as_json,
    differences,
    missed_thresholds,
    summarise,
)
from agents.evaluation.runner import run_cases
from agents.evaluation.scoring import Outcome
from agents.settings import Settings
from agents.store import Store
from bot.cli.common import (
    Commands,
    add_config_arg,
    add_service_arg,
    age_seconds,
    embedded_store_note,
    service_config,
)
from bot.terminal import evaluation as tables
from bot.terminal.border import TerminalConsole

HISTORY_ONLY = ("cases", "planner", "compare", "record", "replay", "chart", "limit")


def register(commands: Commands) -> None:
    parser = commands.add_parser(
        "eval", help="score planners against gold plans; --compare two; --from-history",
        description="Plan each case of a cases file and score the plans against its gold "
                    "plan. A planner SPEC is PLANNER[:key=value,...]: PLANNER is playbook, "
                    "llm or composite; keys are model, price_in, price_out (dollars per 1K "
                    "tokens).")
    parser.add_argument("--cases", type=Path, metavar="FILE",
                        help="cases file, or a bundled set: examples, starter, phrasings "
                             "(46 natural requests for `deckhand init`'s config) (default: "
                             "the bundled cases that fit the config)")
    add_config_arg(parser)
    add_service_arg(parser)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--planner", metavar="SPEC", help="what to evaluate (default: composite "
                       "with OPENAI_API_KEY or --replay, else playbook)")
    which.add_argument("--compare", nargs=2, metavar=("A", "B"),
                       help="two SPECs on the same cases; lists the cases whose outcome differs")
    _add_options(parser)
    parser.set_defaults(handler=_eval)


def _add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="model of LLM specs that name none (default: "
                                        "$OPENAI_MODEL)")
    parser.add_argument("--price-in", type=float, metavar="USD",
                        help="dollars per 1K input tokens, for cost per plan")
    parser.add_argument("--price-out", type=float, metavar="USD",
                        help="dollars per 1K output tokens")
    tapes = parser.add_mutually_exclusive_group()
    tapes.add_argument("--record", type=Path, metavar="DIR",
                       help="save every model answer in DIR (one JSON file per request)")
    tapes.add_argument("--replay", type=Path, metavar="DIR",
                       help="answer from DIR only: no model, no network")
    parser.add_argument("--json", action="store_true", help="print everything as JSON")
    parser.add_argument("--chart", type=Path, metavar="PNG", help="also draw the totals")
    parser.add_argument("--limit", type=int, metavar="N", help="only N cases, every kind")
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="LLM completion budget (default: the config's planner.max_tokens, "
                             "2048)")
    parser.add_argument("--max-repairs", type=int, default=2, help="LLM repairs per request")
    gates = parser.add_argument_group("thresholds, for every configuration evaluated (exit 1 "
                                      "when one is missed)")
    for threshold in THRESHOLDS:
        gates.add_argument(f"--{threshold.flag}", type=float, metavar="X", help=threshold.help)
    real = parser.add_argument_group("quality from real use (run records in Redis)")
    real.add_argument("--from-history", action="store_true",
                      help="approved / modified / rejected / replanned / succeeded / failed / "
                           "rolled back per planner, prompt version and model, instead of cases")
    real.add_argument("--since", type=_age, default=_age("30d"), metavar="AGE",
                      help="how far back, e.g. 7d, 12h, 2w (default 30d)")


def _age(text: str) -> float:
    seconds = age_seconds(text)
    if seconds is None:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number and a unit, like 30d, 12h, "
                                         f"2w (s, m, h, d, w)")
    return seconds


def _eval(args: argparse.Namespace, console: Console) -> int:
    if args.from_history:
        return _from_history(args, console)
    config = service_config(args)  # a service's planner, tools and hosts are its own
    cases = load_cases(args.cases, config=config)
    cases = spread(cases, args.limit) if args.limit else cases
    settings = Settings()
    specs = _specs(args, settings)
    outcomes = [_run(spec, cases, config, settings, args) for spec in specs]
    summaries = [summarise(spec, found) for spec, found in zip(specs, outcomes, strict=True)]
    diffs = differences(*outcomes) if len(outcomes) == 2 else []
    limits = {t.flag: value for t in THRESHOLDS
              if (value := getattr(args, t.flag.replace("-", "_"))) is not None}
    missed = missed_thresholds(summaries, limits)
    if args.json:
        sys.stdout.write(json.dumps(as_json(summaries, outcomes, diffs, missed), indent=2) + "\n")
    else:
        _print_tables(console, specs, outcomes, summaries, diffs)
    if args.chart:
        _chart(console, summaries, args.chart, quiet=args.json)
    return _verdict(summaries, missed)


def _specs(args: argparse.Namespace, settings: Settings) -> list[PlannerSpec]:
    defaults = PlannerSpec("playbook", model=args.model or settings.openai_model,
                           price_in=args.price_in, price_out=args.price_out)
    wanted = settings.openai_api_key is not None or args.replay is not None
    texts = args.compare or [args.planner or ("composite" if wanted else "playbook")]
    specs = [parse_spec(text, defaults) for text in texts]
    if len(specs) == 2 and specs[0] == specs[1]:
        raise EvaluationError(f"--compare got the same configuration twice ({specs[0].label}); "
                              f"change the planner, the model or a price")
    if (args.record or args.replay) and not any(s.uses_model for s in specs):
        raise EvaluationError("--record and --replay keep model answers: evaluate an llm or "
                              "composite planner (the playbook planner calls no model)")
    return specs


def _run(spec: PlannerSpec, cases: list[Case], config: Config, settings: Settings,
         args: argparse.Namespace) -> list[Outcome]:
    options = {"max_repairs": args.max_repairs,
               **({"max_tokens": args.max_tokens} if args.max_tokens else {})}
    subject = build_subject(spec, config, settings,
                            ModelSetup(record=args.record, replay=args.replay,
                                       llm_options=options))
    try:
        return run_cases(subject, cases, config)
    finally:
        subject.close()


def _print_tables(console: Console, specs: list[PlannerSpec], outcomes: list[list[Outcome]],
                  summaries: list[Summary], diffs: list[Difference]) -> None:
    labels = [s.label for s in specs]
    if len(specs) == 2:
        console.print(tables.compare_table(labels, outcomes[0], outcomes[1], diffs))
    else:
        console.print(tables.cases_table(specs[0], outcomes[0]))
        for line in tables.case_notes(outcomes[0]):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    console.print(tables.summary_table(summaries))
    if len(specs) == 2:
        console.print(tables.differences_table(labels, diffs))


def _chart(console: Console, summaries: list[Summary], path: Path, *, quiet: bool) -> None:
    from bot import charts

    charts.require("--chart")
    from bot.eval_chart import save_chart  # matplotlib loads only when asked

    try:
        save_chart(summaries, path)
    except OSError as exc:
        raise EvaluationError(f"cannot write the chart to {path}: {exc.strerror}") from exc
    if not quiet:
        console.print(f"chart: {path}", markup=False, highlight=False)


def _verdict(summaries: list[Summary], missed: list[str]) -> int:
    """Exit 1, with a line each on stderr, for missed thresholds, missing recordings and
    cases the model gave no answer to."""
    lines = [f"{s.planner}: {s.missing_recordings} case(s) had no recording (see each case); "
             f"re-record with --record DIR" for s in summaries if s.missing_recordings]
    lines += [f"{s.planner}: {s.no_answer} case(s) got no answer from the model (the reason "
              f"is on each case); nothing was measured there: check the endpoint with "
              f"`deckhand check`" for s in summaries if s.no_answer]
    lines += [f"threshold missed: {line}" for line in missed]
    err = TerminalConsole(stderr=True)
    for line in lines:
        err.print(line, style="red", markup=False, highlight=False, soft_wrap=True)
    return 1 if lines else 0


HISTORY_LIMIT = 10_000
"""Runs ``--from-history`` reads at most (the newest of the window)."""


def _from_history(args: argparse.Namespace, console: Console) -> int:
    given = [f"--{name}" for name in HISTORY_ONLY if getattr(args, name)]
    if given:
        raise EvaluationError(f"--from-history reads run records, not cases: drop "
                              f"{', '.join(given)}")
    url = Settings().redis_url
    if url is None:
        embedded_store_note()
    store = Store.connect(url.get_secret_value() if url else None)
    runs = store.runs.since(time.time() - args.since, limit=HISTORY_LIMIT)
    if len(runs) >= HISTORY_LIMIT:  # say so: the counts are of a part of the window
        TerminalConsole(stderr=True).print(
            f"note: only the newest {HISTORY_LIMIT:,} runs of the last "
            f"{args.since / 86400:g} days were read; pass a shorter --since for all of a "
            f"window", markup=False, soft_wrap=True)
    found = tally(fates(runs, store.plans.at))
    if args.json:
        sys.stdout.write(json.dumps([_row(m, t) for m, t in found.items()], indent=2) + "\n")
    elif not found:
        console.print(f"No runs recorded in the last {args.since / 86400:g} days.",
                      markup=False)
    else:
        console.print(tables.quality_table(found, args.since / 86400))
    return 0


def _row(maker: Maker, counts: Tally) -> dict[str, str | int]:
    """One maker's tally for --json: the labels and counts of ``deckhand_plan_outcomes``."""
    return {"planner": maker.planner, "prompt_version": maker.prompt_version,
            "model": maker.model, **{o: counts.outcomes[o] for o in OUTCOMES},
            "changes": counts.changes}
