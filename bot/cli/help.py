"""Examples shown under ``deckhand COMMAND --help``, kept in one place so every command has some."""

from __future__ import annotations

import argparse
from importlib import metadata

EXAMPLES: dict[str, list[str]] = {
    "init": ["deckhand init                 # writes ./deckhand.yml",
             "deckhand init ops/deckhand    # or into a directory"],
    "demo": ["deckhand demo", "deckhand demo --keep   # leave the sample app running"],
    "run": ['deckhand run "deploy v1.0.0"', 'deckhand run "deploy v1.0.0" --yes',
            'deckhand run "status of production" -c ops/deckhand.yml'],
    "plan": ['deckhand plan "deploy v1.0.0"', 'deckhand plan "roll back production" '
             '--format yaml'],
    "check": ["deckhand check deckhand.yml", "deckhand check --config ops/deckhand.yml",
              "REDIS_URL=redis://localhost:6379/0 deckhand check --store --repair"],
    "worker": ["REDIS_URL=redis://localhost:6379/0 deckhand worker"],
    "runs": ["deckhand runs", "deckhand runs --json | jq -r '.[0].status'",
             "deckhand runs show RUN_ID --timeline run.png",
             "deckhand runs show RUN_ID --output                 # what every step printed",
             "deckhand runs show RUN_ID --output deploy_production --host prod-2"],
    "audit": ["deckhand audit --run RUN_ID", "deckhand audit --service api --json",
              "deckhand audit verify",
              "deckhand audit export --since 7d > audit.jsonl",
              "deckhand audit verify --copy audit.jsonl     # a copy kept elsewhere",
              "deckhand audit ship              # send entries to audit.sink as they come",
              "deckhand audit ship --once       # what is there now, then exit"],
    "approve": ["deckhand approve RUN_ID --user alice"],
    "pause": ["deckhand pause RUN_ID --user alice"],
    "resume": ["deckhand resume RUN_ID --user alice"],
    "stop": ["deckhand stop RUN_ID --user alice", "deckhand cancel RUN_ID    # its other name"],
    "judge": ["deckhand judge RUN_ID continue --user bob    # go on to the next batch",
              "deckhand judge RUN_ID rollback --user bob    # undo the batches done so far"],
    "hosts": ["deckhand hosts check production", "deckhand hosts trust web-1",
              "deckhand hosts --json                # the inventory, for scripts"],
    "hosts check": ["deckhand hosts check                 # every host",
                    "deckhand hosts check production --timeout 5",
                    "deckhand hosts check --json | jq '.[] | select(.ok | not)'"],
    "hosts trust": ["deckhand hosts trust web-1          # shows the key, asks first",
                    "deckhand hosts trust web-1 --yes    # in a provisioning script"],
    "mcp": ["deckhand mcp                          # stdio, for a local agent",
            "deckhand mcp --http --port 8765       # streamable HTTP on loopback",
            "claude mcp add deckhand -- deckhand mcp --config ops/deckhand.yml"],
    "where": ["deckhand where", "deckhand where production --verify",
              "deckhand where --json",
              "deckhand where api production    # with services: one service's row"],
    "services": ["deckhand services", "deckhand services --json"],
    "lock": ['deckhand lock production --reason "db migration"',
             'deckhand lock production --reason "db migration" --for 2h',
             'deckhand lock staging --reason "load test" --until 2026-12-01T18:00Z'],
    "unlock": ["deckhand unlock production"],
    "history": ["deckhand history production --limit 10", "deckhand history staging --json",
                "deckhand history api production   # with services"],
    "stats": ["deckhand stats production --days 30", "deckhand stats --json",
              "deckhand stats api                 # with services: one service's rows"],
    "serve": ["deckhand serve", "deckhand serve --http --port 3000"],
    "retention": ["deckhand retention --dry-run       # what would be exported and trimmed",
                  "deckhand retention --older-than 180d --export /backup/deckhand.jsonl"],
    "schedules": ['deckhand schedules add "every weekday at 02:00" deploy v1.0.0 to staging'],
    "schedules add": ['deckhand schedules add "every weekday at 02:00" deploy v1.0.0 to staging',
                      'deckhand schedules add "0 */6 * * *" status of production --tz UTC',
                      'deckhand schedules add "every 6h" status --auto --yes'],
    "schedules list": ["deckhand schedules list", "deckhand schedules list --json"],
    "schedules pause": ["deckhand schedules pause SCHEDULE_ID"],
    "schedules resume": ["deckhand schedules resume SCHEDULE_ID"],
    "schedules remove": ["deckhand schedules remove SCHEDULE_ID"],
    "schedules run": ["deckhand schedules run SCHEDULE_ID    # fire one occurrence now"],
    "schedules serve": ["deckhand schedules serve", "deckhand schedules serve --grace 600"],
    "eval": ["deckhand eval --config examples/deckhand.yml --planner playbook",
             "deckhand eval --compare playbook llm:model=gpt-4o-mini --record evals/",
             "deckhand eval --planner llm --replay evals/ --min-valid 0.9 --min-edge-f1 0.8",
             "deckhand eval --config deckhand.yml --cases phrasings --planner playbook",
             "deckhand eval --from-history --since 30d"],
    "policy": ["deckhand policy explain RUN_ID", "deckhand policy diff live/ proposed/"],
    "policy explain": ["deckhand policy explain RUN_ID",
                       "deckhand plan 'deploy v1.0.0' --format yaml > p.yml && "
                       "deckhand policy explain --plan p.yml --requested-by alice --user bob"],
    "policy diff": ["git show main:deckhand.yml > /tmp/old.yml && deckhand policy diff "
                    "/tmp/old.yml deckhand.yml",
                    "deckhand policy diff /tmp/old.yml    # NEW: the config in use (--config)",
                    "deckhand policy diff live/ proposed/ --json"],
    "completion": ['eval "$(deckhand completion bash)"   # in ~/.bashrc',
                   "deckhand completion zsh > ~/.zfunc/_deckhand"],
}

TOP = """\
examples:
  deckhand init                          write a commented, working ./deckhand.yml
  deckhand plan "deploy v1.0.0"          show the plan, run nothing
  deckhand run "deploy v1.0.0"           plan, approve here, run
  deckhand run "status of production"    read-only: runs at once and prints the output
  deckhand demo                          the sample app deployed twice, no servers needed

The config is --config PATH, else $DECKHAND_CONFIG, else ./deckhand.yml.
`deckhand COMMAND --help` shows each command's options and examples."""


def version() -> str:
    """The installed distribution's version (or "unknown" when run from a bare tree)."""
    try:
        return metadata.version("deckhand")
    except metadata.PackageNotFoundError:
        return "unknown"


def add_examples(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """Give every subcommand (``hosts check`` too) an ``examples:`` epilog, kept verbatim
    by the formatter; EXAMPLES wins over an epilog set where the command is defined."""
    for action in parser._subparsers._group_actions if parser._subparsers else []:
        choices = getattr(action, "choices", None) or {}
        for name, sub in choices.items():
            key = f"{prefix}{name}"
            if key in EXAMPLES:
                sub.epilog = "examples:\n" + "\n".join(f"  {e}" for e in EXAMPLES[key])
                sub.formatter_class = argparse.RawDescriptionHelpFormatter
            add_examples(sub, prefix=f"{key} ")
