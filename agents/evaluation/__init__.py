"""Plan quality: planner configurations scored against hand-written gold plans.

    cases.py      the cases file (bundled cases.yml, or the team's own), checked with pydantic
    planners.py   ``PLANNER[:key=value]`` specs, built into plan functions
    recording.py  the HTTP transport under the openai client: live, record, replay
    runner.py     cases through a configuration, one Outcome each (timed, tokens counted)
    scoring.py    node / edge F1 against the gold plan, promotion-order and rollback checks
    report.py     totals per configuration, differences between two, CI thresholds

    cases ─▶ build_subject(spec) ─▶ run_cases ─▶ [Outcome] ─▶ summarise / differences /
                  └─ openai client ─▶ ModelTraffic ─▶ endpoint | DIR      missed_thresholds

``deckhand eval`` (bot.cli.eval) is the face; its ``--from-history`` (quality from run
records) is ``agents.evaluation.quality``, shared with the metrics.
"""
