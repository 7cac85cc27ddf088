import threading
from pathlib import Path
from typing import Any

from agents.config import Config
from agents.plan.model import Plan
from agents.plan.targets import resolve
from agents.run.executor import NotReplicated, ReplicaWaits
from agents.run.judgment import MemoryJudge, awaiting
from agents.run.record import (
    Decision,
    Event,
    EventKind,
    HostResult,
    Phase,
    Run,
    RunStatus,
    StepStatus,
    Verdict,
)
from tests.fixtures.builders import (
    SHELL_TOOLS,
    fan_out_events,
    fleet_config,
    make_config,
    make_executor,
    make_plan,
)
from tests.fixtures.polling import wait_until
from tools.inventory import LOCAL_HOST
from tools.inventory import Judgment as JudgmentConfig
from tools.runners.base import CancelToken

# Two steps that can only both succeed if they run at the same time: each announces it
# started, then waits (bounded) for the other's announcement.
RENDEZVOUS = ("touch {me}; for i in $(seq 1 200); do [ -e {other} ] && exit 0; "
              "sleep 0.02; done; exit 1")


def sh(step_id: str, script: str, **extra) -> dict:
    return {"id": step_id, "tool": "sh", "params": {"script": script}, **extra}


def test_independent_steps_overlap(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    plan = make_plan([sh("a", RENDEZVOUS.format(me=a, other=b)),
                      sh("b", RENDEZVOUS.format(me=b, other=a)),
                      sh("after", "true", depends_on=["a", "b"])])
    run = make_executor(make_config(tmp_path)).execute(plan)
    assert run.status is RunStatus.SUCCEEDED
    sa, sb, after = run.steps["a"], run.steps["b"], run.steps["after"]
    assert sa.started_at < sb.finished_at and sb.started_at < sa.finished_at  # overlapped
    assert after.started_at >= max(sa.finished_at, sb.finished_at)


def test_max_parallel_one_serialises(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    plan = make_plan([sh("a", RENDEZVOUS.format(me=a, other=b)),
                      sh("b", RENDEZVOUS.format(me=b, other=a))])
    config = make_config(tmp_path, tools=SHORT_RENDEZVOUS_TOOLS)
    run = make_executor(config, max_parallel=1).execute(plan)
    # the first to start waits for a partner that never starts, and times out alone
    first, second = sorted(("a", "b"), key=lambda s: run.steps[s].started_at or float("inf"))
    assert run.status is RunStatus.FAILED
    assert run.steps[first].status is StepStatus.FAILED
    assert "timed out" in (run.steps[first].error or "")
    partner = run.steps[second]
    assert partner.started_at is None or partner.started_at >= (run.steps[first].finished_at or 0)


SHORT_RENDEZVOUS_TOOLS = """
tools:
  sh:
    description: shell snippet, short deadline
    command: "sh -c 'eval \\"$1\\"' sh {script}"
    params: {script: {type: string, max_length: 4000, code: true}}
    timeout: 1
"""


def test_failure_skips_dependents_and_rolls_back_in_order(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    plan = make_plan(
        [{"id": "stage", "tool": "change", "params": {"environment": "staging", "label": "s"}},
         {"id": "prod", "tool": "change", "depends_on": ["stage"],
          "params": {"environment": "production", "label": "p", "script": "exit 7"}},
         {"id": "notify", "tool": "log", "params": {"line": "done"}, "depends_on": ["prod"]}],
        rollback=[{"id": "undo_prod", "tool": "undo", "params": {"environment": "production"}},
                  {"id": "undo_stage", "tool": "undo", "params": {"environment": "staging"}},
                  {"id": "tell", "tool": "log", "params": {"line": "rolled back"}}])
    events: list[Event] = []
    run = make_executor(config).execute(plan, listeners=[lambda e, r: events.append(e)])
    assert run.status is RunStatus.ROLLED_BACK
    assert run.steps["prod"].status is StepStatus.FAILED
    assert "exit code 7" in (run.steps["prod"].error or "")
    assert run.steps["notify"].status is StepStatus.SKIPPED
    # production rolls out one host per batch: web-2 failed, so web-3 was never changed
    assert run.changed_hosts == ["web-1", "web-2"]
    log = (tmp_path / "log.txt").read_text().splitlines()
    assert log == ["undo web-2", "undo web-1", "rolled back"]
    assert not (tmp_path / "web-3").exists()
    kinds = [e.kind for e in events if e.kind is not EventKind.STEP_OUTPUT]
    assert kinds.index(EventKind.ROLLBACK_STARTED) < kinds.index(EventKind.RUN_FINISHED)


def test_retries_until_success(tmp_path: Path) -> None:
    counter = tmp_path / "n"
    plan = make_plan([{"id": "f", "tool": "flaky",
                       "params": {"counter": str(counter), "succeed_on": 3}}])
    run = make_executor(make_config(tmp_path)).execute(plan)
    assert run.status is RunStatus.SUCCEEDED
    assert counter.read_text().strip() == "3"
    assert run.steps["f"].hosts["local"].attempts == 3


def test_retries_exhausted_fails(tmp_path: Path) -> None:
    plan = make_plan([{"id": "f", "tool": "flaky",
                       "params": {"counter": str(tmp_path / "n"), "succeed_on": 99}}])
    run = make_executor(make_config(tmp_path)).execute(plan)
    assert run.status is RunStatus.FAILED and run.steps["f"].hosts["local"].attempts == 4


def test_hanging_step_times_out_and_is_recorded(tmp_path: Path) -> None:
    plan = make_plan([{"id": "hang", "tool": "sh_fast_timeout", "params": {"script": "sleep 600"}}])
    run = make_executor(make_config(tmp_path)).execute(plan)
    assert run.status is RunStatus.FAILED
    assert "timed out after 0.5s" in (run.steps["hang"].error or "")


def test_injection_attempts_stay_inert(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    attempts = [f"x; touch {target}", f"$(touch {target})", f"`touch {target}`",
                f"x' ; touch '{target}", f"x\" && touch \"{target}"]
    plan = make_plan([{"id": f"l{i}", "tool": "log", "params": {"line": a}}
                      for i, a in enumerate(attempts)])
    run = make_executor(make_config(tmp_path)).execute(plan)
    assert run.status is RunStatus.SUCCEEDED
    assert not target.exists()
    assert sorted((tmp_path / "log.txt").read_text().splitlines()) == sorted(attempts)


def test_outputs_flow_into_later_steps(tmp_path: Path) -> None:
    tools = """
    tools:
      build:
        description: prints an artifact
        command: "echo artifact=/srv/app-1.tgz"
        outputs: {artifact: '^artifact=(\\S+)$'}
      use:
        description: writes the artifact path
        command: "echo {artifact} > {vars.out}"
        params: {artifact: {type: string, pattern: '^/[\\w./-]+$'}}
    vars: {out: "{config_dir}/out.txt"}
    """
    config = make_config(tmp_path, tools=tools)
    plan = make_plan([{"id": "b", "tool": "build"},
                      {"id": "u", "tool": "use", "params": {"artifact": "${steps.b.artifact}"},
                       "depends_on": ["b"]}])
    run = make_executor(config).execute(plan)
    assert run.status is RunStatus.SUCCEEDED
    assert (tmp_path / "out.txt").read_text().strip() == "/srv/app-1.tgz"


def test_cancel_stops_running_steps_then_rolls_back(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    marker = tmp_path / "started"
    plan = make_plan(
        [{"id": "stage", "tool": "change", "params": {
            "environment": "staging", "label": "s", "script": f"touch {marker}; sleep 300"}},
         {"id": "next", "tool": "log", "params": {"line": "never"}, "depends_on": ["stage"]}],
        rollback=[{"id": "undo_stage", "tool": "undo", "params": {"environment": "staging"}}])
    token = CancelToken()

    def cancel_when_started(event: Event, run: Run) -> None:
        if event.kind is EventKind.HOST_STARTED and event.phase is Phase.PLAN:
            threading.Thread(target=_cancel_after_marker, args=(marker, token)).start()

    run = make_executor(config).execute(plan, cancel=token, listeners=[cancel_when_started])
    assert run.status is RunStatus.CANCELLED
    assert run.steps["stage"].status is StepStatus.CANCELLED
    assert run.steps["next"].status is StepStatus.SKIPPED
    assert run.rollback["undo_stage"].status is StepStatus.SUCCEEDED


def _cancel_after_marker(marker: Path, token: CancelToken) -> None:
    try:
        wait_until(marker.exists, timeout=10, what="the step to start")
    finally:
        token.cancel("user pressed cancel")


def test_resume_skips_finished_steps_and_refuses_non_idempotent_rerun(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    plan = make_plan([{"id": "a", "tool": "log", "params": {"line": "a"}},
                      {"id": "b", "tool": "log", "params": {"line": "b"}, "depends_on": ["a"]}])
    run = Run.for_plan(plan, resolve(plan, config.catalog, config.inventory), status=RunStatus.RUNNING)
    run.steps["a"].status = StepStatus.SUCCEEDED
    resumed = make_executor(config).execute(plan, run)
    assert resumed.status is RunStatus.SUCCEEDED
    assert (tmp_path / "log.txt").read_text().splitlines() == ["b"]

    run = Run.for_plan(plan, resolve(plan, config.catalog, config.inventory), status=RunStatus.RUNNING)
    run.steps["a"].status = StepStatus.RUNNING  # its worker died mid-step; log is not idempotent
    run.steps["a"].hosts[LOCAL_HOST.name] = HostResult(host=LOCAL_HOST.name,
                                                       status=StepStatus.RUNNING)
    resumed = make_executor(config).execute(plan, run)
    assert resumed.status is RunStatus.FAILED
    assert "not idempotent" in (resumed.steps["a"].error or "")
    assert "died" not in (resumed.steps["a"].error or "").split("(")[0]  # not known

    run = Run.for_plan(plan, resolve(plan, config.catalog, config.inventory), status=RunStatus.RUNNING)
    run.steps["a"].status = StepStatus.RUNNING  # started, but no command of it had started
    (tmp_path / "log.txt").unlink()
    resumed = make_executor(config).execute(plan, run)
    assert resumed.status is RunStatus.SUCCEEDED, resumed.reason
    assert (tmp_path / "log.txt").read_text().splitlines() == ["a", "b"]


def _change_fleet(script: str = "true") -> dict:
    return {"id": "deploy", "tool": "change",
            "params": {"environment": "fleet", "label": "x", "script": script}}


def test_a_mutating_start_waits_for_its_batch_then_its_process_group(tmp_path: Path) -> None:
    asked: list[tuple[str, list[str]]] = []

    def durable(what: str, waits: object) -> str | None:  # what is on the hosts at each wait
        asked.append((what, sorted(h for h in ("web-1", "web-2", "web-3")
                                   if (tmp_path / h / "changes").exists())))
        return None

    plan = make_plan([_change_fleet(), {"id": "note", "tool": "log", "depends_on": ["deploy"],
                                        "params": {"line": "x"}}],
                     rollback=[{"id": "undo", "tool": "undo",
                                "params": {"environment": "fleet"}}])
    run = make_executor(fleet_config(tmp_path, 3)).execute(plan, durable=durable)
    assert run.status is RunStatus.SUCCEEDED
    # one wait for the batch, then one per host once its pid is recorded: each before that
    # host's command ran; none for the read-only step
    assert asked[0] == ("the start of deploy on 3 host(s)", [])
    groups = {what: before for what, before in asked[1:]}
    assert sorted(groups) == [f"the process group of deploy on web-{i}" for i in (1, 2, 3)]
    assert all(f"web-{i}" not in groups[f"the process group of deploy on web-{i}"]
               for i in (1, 2, 3))


def test_every_batch_and_the_rollback_wait_on_already_changed_hosts(tmp_path: Path) -> None:
    asked: list[str] = []

    def durable(what: str, waits: object) -> str | None:
        asked.append(what)
        return None

    plan = make_plan([_change_fleet(), {"id": "again", "tool": "change", "depends_on": ["deploy"],
                                        "params": {"environment": "fleet", "label": "y",
                                                   "script": "exit 1"}}],
                     rollback=[{"id": "undo", "tool": "undo",
                                "params": {"environment": "fleet"}}])
    run = make_executor(fleet_config(tmp_path, 1)).execute(plan, durable=durable)
    assert run.status is RunStatus.ROLLED_BACK
    batches = [w for w in asked if w.startswith("the start of")]
    # deploy: 3 batches of one; again on the changed web-1 (it fails there); undo: 3 more
    assert batches == ["the start of deploy on 1 host(s)"] * 3 + [
        "the start of again on 1 host(s)"] + ["the start of undo on 1 host(s)"] * 3
    assert [w for w in asked if w.startswith("the process group")] == [
        *(f"the process group of deploy on web-{i}" for i in (1, 2, 3)),
        "the process group of again on web-1",
        *(f"the process group of undo on web-{i}" for i in (1, 2, 3))]


def test_a_mutating_retry_waits_before_it_starts(tmp_path: Path) -> None:
    asked: list[str] = []

    def durable(what: str, waits: object) -> str | None:
        asked.append(what)
        return None

    counter = tmp_path / "n"
    config = make_config(tmp_path, tools=SHELL_TOOLS.replace(
        "    retries: 3\n", "    retries: 3\n    mutates: true\n"))
    plan = make_plan([{"id": "f", "tool": "flaky",
                       "params": {"counter": str(counter), "succeed_on": 2}}])
    run = make_executor(config).execute(plan, durable=durable)
    assert run.status is RunStatus.SUCCEEDED and counter.read_text().strip() == "2"
    assert asked == ["the start of f on 1 host(s)", "the process group of f on local",
                     "attempt 2 of f on local", "the process group of f on local"]


def test_a_batch_whose_start_is_not_durable_does_not_start(tmp_path: Path) -> None:
    def durable(what: str, waits: object) -> str | None:
        return "replication to a Redis replica timed out"

    plan = make_plan([_change_fleet()], rollback=[{"id": "undo", "tool": "undo",
                                                    "params": {"environment": "fleet"}}])
    run = make_executor(fleet_config(tmp_path, 3)).execute(plan, durable=durable)
    assert run.status is RunStatus.FAILED  # nothing was changed: "not started", no rollback
    assert (run.reason or "").startswith("not started, nothing to roll back: ")
    state = run.steps["deploy"]
    assert state.status is StepStatus.FAILED
    assert "not started: replication to a Redis replica timed out" in (state.error or "")
    assert {h.status for h in state.hosts.values()} == {StepStatus.FAILED}
    assert run.changed_hosts == []  # the start was withdrawn: no host ran it
    assert run.rollback["undo"].status is StepStatus.PENDING  # no rollback phase at all
    assert not any((tmp_path / h).exists() for h in ("web-1", "web-2", "web-3"))


def _deploy_then_fail() -> Plan:
    """deploy changes every fleet host; again fails on the first one: rollback undoes all."""
    return make_plan([_change_fleet(), {"id": "again", "tool": "change", "depends_on": ["deploy"],
                                        "params": {"environment": "fleet", "label": "y",
                                                   "script": "exit 1"}}],
                     rollback=[{"id": "undo", "tool": "undo", "params": {"environment": "fleet"}}])


def test_a_rollback_no_replica_confirmed_goes_ahead_and_the_record_says_so(
        tmp_path: Path) -> None:
    def durable(what: str, waits: object) -> str | None:  # forward starts are confirmed
        return NotReplicated("replication to a Redis replica timed out") if "undo" in what \
            else None

    run = make_executor(fleet_config(tmp_path)).execute(_deploy_then_fail(), durable=durable)
    assert run.status is RunStatus.ROLLED_BACK, run.reason
    assert {h: r.status for h, r in run.rollback["undo"].hosts.items()} == dict.fromkeys(
        ["web-1", "web-2", "web-3"], StepStatus.SUCCEEDED)
    assert all((tmp_path / h / "changes").read_text().splitlines()[-1] == "undo"
               for h in ("web-1", "web-2", "web-3"))
    first, *gates = run.meta["unreplicated"]  # the batch, then each host's start gate
    assert first == "rollback: the start of undo on 3 host(s)"
    assert sorted(gates) == [f"rollback: the process group of undo on web-{i}" for i in (1, 2, 3)]
    assert run.replica_wait is None


def test_a_rollback_refused_for_another_reason_than_a_replica_does_not_start(
        tmp_path: Path) -> None:
    def durable(what: str, waits: object) -> str | None:  # e.g. the store unreachable
        return "its start could not be recorded in Redis" if "undo" in what else None

    run = make_executor(fleet_config(tmp_path)).execute(_deploy_then_fail(), durable=durable)
    assert run.status is RunStatus.ROLLBACK_FAILED, run.reason
    assert "not started: its start could not be recorded" in (run.rollback["undo"].error or "")
    assert "unreplicated" not in run.meta


def test_starts_waiting_for_a_replica_are_one_wait_in_the_record(tmp_path: Path) -> None:
    seen: list[tuple[str, str | None, str | None]] = []

    def listener(event: Event, run: Run) -> None:
        if event.kind is EventKind.REPLICA_WAIT:
            wait = run.replica_wait
            seen.append((event.status or "", wait.what if wait else None,
                         (event.wait or {}).get("outcome")))

    def durable(what: str, waits: ReplicaWaits) -> str | None:
        if what.startswith("the process group of deploy"):  # three hosts wait at once
            waits.waiting(what, 30)
            waits.waited("confirmed")
        return None

    plan = make_plan([_change_fleet()])
    run = make_executor(fleet_config(tmp_path)).execute(plan, durable=durable,
                                                        listeners=[listener])
    assert run.status is RunStatus.SUCCEEDED and run.replica_wait is None
    statuses = [status for status, _, _ in seen]  # overlapping waits: one in the record
    assert statuses == ["waiting", "confirmed"] * (len(statuses) // 2) and statuses
    assert (seen[0][1] or "").startswith("the process group of deploy on web-")
    assert seen[-1] == ("confirmed", None, "confirmed")


def test_a_daemon_holding_the_output_open_is_named_in_the_timeout(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    plan = make_plan([{"id": "start", "tool": "sh_fast_timeout",
                       "params": {"script": "sleep 30 & echo started"}}])
    run = make_executor(config).execute(plan)
    error = run.steps["start"].error or ""
    assert "timed out after 0.5s" in error and ">/dev/null 2>&1 &" in error, error
def test_a_refused_process_group_record_keeps_the_command_from_running(
        tmp_path: Path) -> None:
    def durable(what: str, waits: object) -> str | None:
        return "no replica confirmed" if what.startswith("the process group") else None

    plan = make_plan([_change_fleet()], rollback=[{"id": "undo", "tool": "undo",
                                                    "params": {"environment": "fleet"}}])
    run = make_executor(fleet_config(tmp_path, 3)).execute(plan, durable=durable)
    assert run.status is RunStatus.FAILED, run.reason
    assert "web-1: not started: no replica confirmed" in (run.steps["deploy"].error or "")
    assert run.changed_hosts == []
    assert not any((tmp_path / h).exists() for h in ("web-1", "web-2", "web-3"))


def _running_staging_change(config: Config) -> tuple[Plan, Run]:
    """A one-step staging change with its undo, recorded as running (for a takeover)."""
    plan = make_plan([{"id": "deploy", "tool": "change",
                       "params": {"environment": "staging", "label": "x"}}],
                     rollback=[{"id": "undo", "tool": "undo",
                                "params": {"environment": "staging"}}])
    return plan, Run.for_plan(plan, resolve(plan, config.catalog, config.inventory),
                              status=RunStatus.RUNNING)


def test_a_takeover_fails_closed_on_a_running_host_with_no_process_group(
        tmp_path: Path) -> None:
    config = make_config(tmp_path, tools=SHELL_TOOLS.replace(
        "    rollback: undo\n", "    rollback: undo\n    idempotent: true\n"))
    plan, run = _running_staging_change(config)
    for event in fan_out_events(run.id, "deploy", ["web-1"], running=["web-1"]):
        run.apply(event)
    run.steps["deploy"].hosts["web-1"].pid = None  # its process group never reached the record
    resumed = make_executor(config).execute(plan, run)  # idempotent: it would be re-run
    assert resumed.status is RunStatus.ROLLED_BACK
    assert "no record of its process group" in (resumed.steps["deploy"].error or "")
    # never re-run there, only undone
    assert (tmp_path / "web-1" / "changes").read_text().splitlines() == ["undo"]


def test_a_takeover_mid_rollback_fails_closed_on_a_host_with_no_process_group(
        tmp_path: Path) -> None:
    config = make_config(tmp_path)
    plan, run = _running_staging_change(config)
    for event in [*fan_out_events(run.id, "deploy", ["web-1"]),
                  Event(kind=EventKind.STEP_FINISHED, run_id=run.id, step_id="deploy",
                        status="failed", error="boom"),
                  Event(kind=EventKind.ROLLBACK_STARTED, run_id=run.id, phase=Phase.ROLLBACK)]:
        run.apply(event)
    for event in fan_out_events(run.id, "undo", ["web-1"], running=["web-1"]):
        run.apply(event.model_copy(update={"phase": Phase.ROLLBACK}))
    run.rollback["undo"].hosts["web-1"].pid = None
    resumed = make_executor(config).execute(plan, run)
    assert resumed.status is RunStatus.ROLLBACK_FAILED
    assert "no record of its process group" in (resumed.rollback["undo"].error or "")
    assert not (tmp_path / "web-1" / "changes").exists()  # the undo was not run again


def _deploy_taken_over(config: Config, *, running: tuple[str, ...] = ()) -> tuple[Plan, Run]:
    """The fleet deploy (one host per batch) as a dead worker left it: web-1 done (and
    ``running`` hosts started, not ended), the step still marked running."""
    plan = make_plan([_change_fleet()], rollback=[{"id": "undo", "tool": "undo",
                                                    "params": {"environment": "fleet"}}])
    run = Run.for_plan(plan, resolve(plan, config.catalog, config.inventory),
                       status=RunStatus.RUNNING)
    run.apply(Event(kind=EventKind.RUN_STARTED, run_id=run.id))
    for event in fan_out_events(run.id, "deploy", ["web-1"]):
        run.apply(event)
    for host in running:
        for event in fan_out_events(run.id, "deploy", [host], running=[host])[1:]:
            run.apply(event)
    return plan, run


def _changes(tmp_path: Path) -> list[list[str]]:
    return [(p.read_text().split() if (p := tmp_path / h / "changes").exists() else [])
            for h in ("web-1", "web-2", "web-3")]


def test_a_takeover_between_batches_goes_on_with_the_pending_hosts_only(
        tmp_path: Path) -> None:
    """Issue 39.3: every started host's command had ended (a hold between batches): the
    not-idempotent step is not failed; the hosts done are not run again."""
    config = fleet_config(tmp_path, 1)
    plan, run = _deploy_taken_over(config)
    events: list[Event] = []
    resumed = make_executor(config).execute(plan, run, listeners=[
        lambda e, r: events.append(e)])
    assert resumed.status is RunStatus.SUCCEEDED, resumed.reason
    assert _changes(tmp_path) == [[], ["x"], ["x"]]  # web-1 was done before: not again
    announced = [e.hosts for e in events if e.kind is EventKind.HOSTS_STARTING]
    assert announced == [["web-2"], ["web-3"]]
    assert resumed.steps["deploy"].hosts["web-1"].status is StepStatus.SUCCEEDED
    assert resumed.changed_hosts == ["web-1", "web-2", "web-3"]


def test_a_takeover_fails_a_not_idempotent_step_only_for_a_command_still_running(
        tmp_path: Path) -> None:
    config = fleet_config(tmp_path, 1)
    plan, run = _deploy_taken_over(config, running=("web-2",))
    resumed = make_executor(config).execute(plan, run)
    assert resumed.status is RunStatus.ROLLED_BACK
    error = resumed.steps["deploy"].error or ""
    assert "was running on web-2 when its worker" in error and "not idempotent" in error
    assert _changes(tmp_path) == [["undo"], ["undo"], []]  # both undone, web-3 untouched


def test_a_go_no_go_hold_taken_over_is_the_same_hold(tmp_path: Path) -> None:
    """The hold the dead worker entered is waited for again — its name, its ``since`` and
    so its deadline — not announced anew; a decision made meanwhile decides it."""
    config = fleet_config(tmp_path, 1)
    config.inventory.environments["fleet"].rollout.judgment = JudgmentConfig(
        after_batches=[1], timeout=1800, on_timeout="rollback")
    plan, run = _deploy_taken_over(config)
    clock = [1_000_000.0]
    held = awaiting(run, "deploy", config.inventory.environments["fleet"].rollout.judgment,
                    1, 3, now=clock[0] - 600)  # entered ten minutes before the takeover
    run.apply(Event(kind=EventKind.JUDGMENT_AWAITED, run_id=run.id, step_id="deploy",
                    judgment=held.model_dump(mode="json")))
    judge = MemoryJudge()
    judge.settle(held.hold, Decision(verdict=Verdict.CONTINUE, actor="carol", via="cli"))
    executor = make_executor(config)
    executor.deps.clock = lambda: clock[0]
    events: list[Event] = []
    resumed = executor.execute(plan, run, judge=judge,
                               listeners=[lambda e, r: events.append(e)])
    assert resumed.status is RunStatus.SUCCEEDED, resumed.reason
    assert EventKind.JUDGMENT_AWAITED not in [e.kind for e in events]  # not a new hold
    (decided,) = resumed.judgments
    assert decided.since == held.since and decided.decision is not None
    assert decided.decision.actor == "carol"
    assert _changes(tmp_path) == [[], ["x"], ["x"]]


class _StoppedAfter:
    """A Hold whose store says "stopped" once ``after`` has appeared (as a Stop clicked
    then): its pause never holds."""

    def __init__(self, after: Path, token: CancelToken):
        self.after, self.token = after, token

    def paused(self) -> None:
        return None

    def stopped(self) -> str | None:
        if self.after.exists():
            self.token.cancel("cancelled by alice")
        return self.token.reason if self.token.cancelled else None

    def wait(self, until: Any) -> None:
        return None


def test_a_stop_read_in_the_start_gate_keeps_the_command_from_running(tmp_path: Path) -> None:
    """The last look before a command runs reads the stop: a host whose command was about
    to run does not run it, and is not counted as changed."""
    config = fleet_config(tmp_path, 3)
    plan = make_plan([_change_fleet()], rollback=[{"id": "undo", "tool": "undo",
                                                    "params": {"environment": "fleet"}}])
    token = CancelToken()
    (tmp_path / "web-1").mkdir()
    (tmp_path / "web-1" / "changes").write_text("before\n")  # there: "stopped" from now on
    run = make_executor(config).execute(plan, cancel=token,
                                        hold=_StoppedAfter(tmp_path / "web-1" / "changes", token))
    assert run.status is RunStatus.CANCELLED, run.reason
    assert "not started: cancelled by alice" in (run.steps["deploy"].hosts["web-2"].error or "")
    assert run.changed_hosts == []
    assert _changes(tmp_path) == [["before"], [], []]
