"""Issue 33: commands scripts can parse (`--json`, fields as docs/json.md lists them) and the
output of a step that succeeded (`runs show RUN --output`), through `python -m bot.cli` in
subprocesses sharing a real redis-server, on the config `deckhand init` writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

ROOT = Path(__file__).parents[2]
DB = 11
"""A database of the session's server of its own: the other tests flush db 0."""


class Cli:
    def __init__(self, directory: Path, redis_url: str):
        self.directory = directory
        self.env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT),
                    "COLUMNS": "200"}
        self.env.pop("OPENAI_API_KEY", None)
        self.env.pop("DECKHAND_CONFIG", None)

    def __call__(self, *argv: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-m", "bot.cli", *argv], cwd=self.directory,
                              env=self.env, capture_output=True, text=True, timeout=120)
        assert done.returncode == code, (argv, done.stdout, done.stderr)
        return done

    def json(self, *argv: str, code: int = 0) -> Any:
        return json.loads(self(*argv, "--json", code=code).stdout)


@pytest.fixture(scope="module")
def cli(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    url = redis_url.rsplit("/", 1)[0] + f"/{DB}"
    redis.Redis.from_url(url).flushdb()
    found = Cli(tmp_path_factory.mktemp("first-week"), url)
    found("init", ".")
    found("run", "please deploy 1.0.3 to stage", "--yes")
    yield found
    redis.Redis.from_url(url).flushdb()


def test_runs_and_runs_show_as_json(cli: Cli) -> None:
    [run] = cli.json("runs")
    assert {"id", "short_id", "status", "goal", "requested_by", "environments", "created_at",
            "started_at", "finished_at", "duration_s", "plan_id", "plan_version"} <= set(run)
    assert (run["status"], run["goal"], run["environments"]) == (
        "succeeded", "Deploy v1.0.3 to staging", ["staging"])
    shown = cli.json("runs", "show", run["short_id"])
    assert shown["id"] == run["id"] and shown["changed_hosts"] == ["staging-1"]
    steps = {s["id"]: s for s in shown["steps"]}
    assert steps["deploy_staging"]["tool"] == "deploy"
    assert steps["deploy_staging"]["hosts"] == [
        {"host": "staging-1", "status": "succeeded", "exit_code": 0, "attempts": 1}]
    assert [s["id"] for s in shown["rollback"]] == ["rollback_staging"]


def test_the_output_of_a_step_that_succeeded(cli: Cli) -> None:
    [run] = cli.json("runs")
    text = cli("runs", "show", run["id"], "--output").stdout
    assert "── deploy_staging on staging-1 (succeeded, exit 0)" in text
    assert "staging-1 now runs v1.0.3" in text and "tests passed" in text
    only = cli.json("runs", "show", run["id"], "--output", "deploy_staging", "--host",
                    "staging-1")
    assert [(o["step"], o["host"], o["exit_code"]) for o in only["outputs"]] == [
        ("deploy_staging", "staging-1", 0)]
    assert only["outputs"][0]["output"].strip().endswith("staging-1 now runs v1.0.3")
    # the host really is at that version: what the output says is what happened
    served = cli.directory / ".deckhand" / "hosts" / "staging-1" / "current"
    assert served.read_text().strip() == "v1.0.3"


def test_output_at_a_terminal_is_paged(cli: Cli, tmp_path: Path) -> None:
    """At a terminal the output goes through $PAGER (here one that keeps what it was given);
    piped, it is printed as is (the tests above)."""
    pexpect = pytest.importorskip("pexpect")
    [run] = cli.json("runs")
    paged = tmp_path / "paged.txt"
    env = {**cli.env, "PAGER": f"cat > {paged}", "MANPAGER": "", "TERM": "xterm"}
    child = pexpect.spawn(sys.executable, ["-m", "bot.cli", "runs", "show", run["id"],
                                           "--output", "deploy_staging"],
                          cwd=str(cli.directory), env=env, encoding="utf-8", timeout=60)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    text = paged.read_text()
    assert "deploy_staging on staging-1 (succeeded, exit 0)" in text
    assert "staging-1 now runs v1.0.3" in text
    assert "staging-1 now runs v1.0.3" not in (child.before or "")  # the pager had it


def test_an_unknown_step_or_host_is_one_line_naming_what_exists(cli: Cli) -> None:
    [run] = cli.json("runs")
    wrong = cli("runs", "show", run["id"], "--output", "deploy", code=2)
    assert wrong.stdout.strip() == ("error: run has no step 'deploy'; its steps: run_tests, "
                                    "build, deploy_staging, rollback_staging")
    wrong = cli("runs", "show", run["id"], "--output", "build", "--host", "prod-1", code=2)
    assert wrong.stdout.strip() == ("error: no output from host 'prod-1' here; hosts with "
                                    "output: local")


def test_output_is_redacted_with_the_configs_secrets(cli: Cli) -> None:
    [run] = cli.json("runs")
    config = cli.directory / "deckhand.yml"
    original = config.read_text()
    try:  # a secret added to the config after the run is still masked when shown
        config.write_text(original + "\nsecrets: [\"tests passed\"]\n")
        text = cli("runs", "show", run["id"], "--output", "run_tests").stdout
    finally:
        config.write_text(original)
    assert "tests passed" not in text and "running tests for v1.0.3" in text


def test_where_verify_works_on_the_init_config(cli: Cli) -> None:
    assert "v1.0.3" in cli("where", "--verify").stdout
    [staging, production] = cli.json("where", "--verify")
    assert (staging["environment"], staging["version"]) == ("staging", "v1.0.3")
    assert staging["hosts"] == [{"host": "staging-1", "version": "v1.0.3", "drift": False,
                                 "since": staging["since"], "run_id": staging["run_id"],
                                 "observed": {"version": "v1.0.3", "problem": None}}]
    assert production["hosts"] == [] and production["version"] is None


def test_where_verify_reports_an_answer_it_could_not_read(cli: Cli) -> None:
    config = cli.directory / "deckhand.yml"
    original = config.read_text()
    pattern = "  version_pattern: '^[\\w.-]+: (v\\S+)$'"
    assert pattern in original
    try:  # the host answers, but not in the form the pattern reads
        config.write_text(original.replace(pattern, "  version_pattern: '^version=(\\S+)$'"))
        [staging, _] = cli.json("where", "--verify", code=1)
    finally:
        config.write_text(original)
    [host] = staging["hosts"]
    observed = host["observed"]
    assert observed["version"] is None
    assert "status answered, but history.version_pattern '^version=(\\S+)$' found no " \
        "version in its output (its last line: 'staging-1: v1.0.3')" in observed["problem"]


def test_history_stats_hosts_and_schedules_as_json(cli: Cli) -> None:
    [deploy] = cli.json("history", "staging")
    assert (deploy["version"], deploy["outcome"], deploy["hosts"], deploy["rollback"]) == (
        "v1.0.3", "succeeded", {"staging-1": "v1.0.3"}, False)
    stats = {s["environment"]: s for s in cli.json("stats")}
    assert (stats["staging"]["deploys"], stats["staging"]["change_failure_rate"]) == (1, 0.0)
    assert stats["production"]["deploys"] == 0
    hosts = {h["host"]: h for h in cli.json("hosts")}
    assert hosts["prod-2"] == {"host": "prod-2", "connection": "local", "address": None,
                               "environments": ["production"], "groups": []}
    checks = cli.json("hosts", "check")
    assert {c["host"]: c["ok"] for c in checks} == {"staging-1": True, "prod-1": True,
                                                    "prod-2": True}
    assert cli.json("schedules", "list") == []
    cli("schedules", "add", "every 6h", "status", "of", "prod")
    [schedule] = cli.json("schedules", "list")
    assert (schedule["request"], schedule["environments"], len(schedule["next_fires"])) == (
        "status of prod", ["production"], 3)


def test_limit_narrows_a_run_within_policy(cli: Cli) -> None:
    hosts = cli.directory / ".deckhand" / "hosts"
    refused = cli("run", "deploy v1.0.4", "--limit", "prod-1", "--yes", code=2)
    assert "deploy_staging: --limit prod-1 leaves it no host" in refused.stdout
    assert not (hosts / "prod-1" / "current").exists()  # refused: nothing ran
    cli("run", "deploy v1.0.4", "--limit", "staging-1,prod-1", "--yes")
    current = {h: (hosts / h / "current").read_text().strip()
               for h in ("staging-1", "prod-1") if (hosts / h / "current").exists()}
    assert current == {"staging-1": "v1.0.4", "prod-1": "v1.0.4"}
    assert not (hosts / "prod-2" / "current").exists()  # outside the limit: untouched
    latest = cli.json("runs")[0]
    shown = cli.json("runs", "show", latest["id"])
    assert shown["changed_hosts"] == ["staging-1", "prod-1"]
    production = next(s for s in shown["steps"] if s["id"] == "deploy_production")
    assert [h["host"] for h in production["hosts"]] == ["prod-1"]
    unknown = cli("plan", "status", "--limit", "prod-9", code=2)
    assert "--limit 'prod-9': no host, group or environment has that name" in unknown.stdout


@pytest.mark.parametrize(("argv", "names"), [
    (("plan", "cancel", "--format", "json"), "cancel"),
    (("plan", "cancel", "--format", "yaml"), "cancel"),
    (("eval", "--cases", "no-such-cases.yml", "--json"), "no-such-cases.yml"),
    (("runs", "show", "run-nosuchrun", "--json"), "nosuchrun"),
    (("runs", "show", "run-nosuchrun", "--output", "--json"), "nosuchrun"),
    (("policy", "diff", "no-such-old.yml", "--json"), "no-such-old.yml"),
    (("where", "--json", "--config", "no-such.yml"), "no-such.yml"),
    (("history", "production", "--json", "--config", "no-such.yml"), "no-such.yml"),
    (("stats", "--json", "--config", "no-such.yml"), "no-such.yml"),
    (("schedules", "list", "--json", "--config", "no-such.yml"), "no-such.yml"),
    (("hosts", "--json", "--config", "no-such.yml"), "no-such.yml"),
])
def test_an_error_of_a_json_command_is_on_stderr_only(cli: Cli, argv: tuple[str, ...],
                                                      names: str) -> None:
    """Issue 43.4: `| jq` reads the answer alone, and `2>/dev/null` hides the error."""
    done = cli(*argv, code=2)
    assert done.stdout == ""
    assert names in done.stderr, done.stderr
