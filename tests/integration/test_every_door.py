"""Issue 41, "one answer at every door": one table of cases crosses every door — CLI
`approve` (or `run`, for a plan), a signed Slack click (or `/deploy`), MCP (`plan`,
`run_status`), an unattended schedule, and `policy explain --user` — and each gives the same
verdict, for a per-hour limit, a hosts limit, a plan no one can complete, an approver and an
outsider. Real Redis; the Slack bot runs on loopback against the stand-in. The expensive
parts (the bot, the services, the config) are shared by the whole module.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis
import yaml

from agents.config import load_config
from agents.engine.desk import RunDesk
from agents.engine.occurrences import Outcome, run_occurrence
from agents.faces import Face
from agents.policy.approvals import policy_version
from agents.run.record import Run, RunStatus
from agents.services import Services, build_services
from agents.store import Store
from bot.cli import main
from bot.mcp.desk import Desk
from bot.schedule_commands import handle_schedule_command
from bot.slack import blocks as bk
from tests.fixtures.slack_standin import SlackStandin
from tests.fixtures.slack_world import SlackWorld, actions_of, button, start_world

CONFIG = """
inventory:
  hosts:
    web-1: {connection: local}
    web-2: {connection: local}
    web-3: {connection: local}
    web-4: {connection: local}
    web-5: {connection: local}
    web-6: {connection: local}
  environments:
    staging: {hosts: [web-1]}
    qa: {hosts: [web-2]}
    wide: {hosts: [web-3, web-4]}
    production: {hosts: [web-5]}
    ops: {hosts: [web-6]}
tools:
  deploy:
    description: say a version for every host of an environment
    command: "echo {version}"
    target: environment
    params: {version: {pattern: '^v\\d+\\.\\d+\\.\\d+$'}}
    mutates: true
    rollback: undo
  undo:
    description: undo
    command: "true"
    target: environment
    mutates: true
playbooks:
  - name: env
    match: ['^(?:deploy )?(?P<env>staging|qa|wide|production|ops) (?P<version>v\\S+)$']
    goal: "{env} {version}"
    steps: [{id: ship, tool: deploy, params: {environment: "{env}", version: "{version}"}}]
    rollback: [{id: undo, tool: undo, params: {environment: "{env}"}}]
policy:
  environments:
    staging: {approvers: {users: [UALICE, UBOB]}, unattended: true, lock: wait}
    qa: {approvers: {users: [UALICE, UBOB]}, unattended: true, lock: wait}
    wide: {approvers: {users: [UALICE, UBOB]}, unattended: true, lock: wait}
    production: {approvers: {users: [UALICE, UBOB]}, min_approvals: 2, self_approval: false}
    ops: {approvers: {users: [UALICE], groups: [SOPS]}, unattended: true, lock: wait}
  limits:
    staging: {runs_per_hour: 1}
    wide: {hosts_per_run: 1}
"""


@dataclass(frozen=True)
class Case:
    name: str
    request: str
    requester: str
    user: str
    allowed: bool
    said: str = ""
    """Words every refusing door says (the rule that refuses)."""
    plan_refused: bool = False
    """Refused before anyone may approve: the plan is never stored."""
    schedule_said: str | None = None
    """What a schedule says instead (it is the requester there, so another rule speaks)."""
    slack_allowed: bool | None = None
    """Slack's verdict where it differs: only Slack knows who is in a group (§8)."""


CASES = [
    Case("approver", "qa v1.0.0", "UCAROL", "UBOB", True),
    Case("outsider", "qa v1.0.0", "UCAROL", "UMALLORY", False,
         "you are not allowed to approve this plan",
         schedule_said="UMALLORY is not allowed to approve plans for qa"),
    Case("per-hour limit", "staging v1.0.0", "UCAROL", "UALICE", False,
         "limit: 1 staging run(s) per hour per person"),
    Case("hosts limit", "wide v1.0.0", "UCAROL", "UALICE", False,
         "limit: 1 wide host(s) per run (policy.limits.wide.hosts_per_run); this run touches 2",
         plan_refused=True),
    Case("too few people", "production v1.0.0", "UALICE", "UBOB", False,
         "needs 2 more approval(s) from distinct people, and only 1 may still give one (UBOB",
         plan_refused=True, schedule_said="policy does not allow unattended runs in production"),
    Case("group member", "ops v1.0.0", "UBOB", "UDAVE", False,
         "group membership (SOPS) is known only to Slack", slack_allowed=True,
         schedule_said="UDAVE is not allowed to approve plans for ops"),
]


@dataclass
class Doors:
    path: Path
    services: Services
    world: SlackWorld
    seeded: set[str] = field(default_factory=set)

    @property
    def store(self) -> Store:
        return self.services.store


@pytest.fixture(scope="module")
def doors(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Doors]:
    redis.Redis.from_url(redis_url).flushdb()
    path = tmp_path_factory.mktemp("doors") / "deckhand.yml"
    path.write_text(textwrap.dedent(CONFIG))
    store = Store.connect(redis_url)
    standin = SlackStandin()
    world = start_world(load_config(path), store, standin, policy=None)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("REDIS_URL", redis_url)  # the CLI's processes share the bot's Redis
        env.delenv("DECKHAND_CONFIG", raising=False)
        yield Doors(path, build_services(load_config(path), store=store), world)
    world.runtime.stop()
    standin.close()
    redis.Redis.from_url(redis_url).flushdb()


def waiting(doors: Doors, case: Case) -> Run:
    """A fresh run of the case's request, awaiting approval (one per door)."""
    plan = doors.services.make_plan(case.request, requested_by=case.requester, face="cli")
    return RunDesk(doors.services).propose(plan, user=case.requester, face=Face.CLI)


def seed(doors: Doors, case: Case) -> None:
    """Once per case: the user's earlier approval that a per-hour limit counts."""
    if "per-hour" in case.name and case.name not in doors.seeded:
        doors.seeded.add(case.name)
        run = waiting(doors, case)
        assert RunDesk(doors.services).approve(run.id, user=case.user,
                                               face=Face.CLI).status is RunStatus.QUEUED


# -- the doors: each returns (allowed, what it said) ------------------------------------


def cli(doors: Doors, case: Case, capsys: pytest.CaptureFixture[str]) -> tuple[bool, str]:
    if case.plan_refused:  # `deckhand run` plans first: refused before any prompt
        code = main(["run", case.request, "--user", case.requester, "--yes",
                     "--config", str(doors.path)])
        out = capsys.readouterr()
        assert code == 2, out
        return False, " ".join((out.out + out.err).split())
    run = waiting(doors, case)
    code = main(["approve", run.id, "--user", case.user, "--config", str(doors.path)])
    out = capsys.readouterr()
    assert code in (0, 3), out
    stored = doors.store.runs.get(run.id)
    assert (case.user in [a.user for a in stored.approvals]) == (code == 0)  # the end state
    return code == 0, " ".join((out.out + out.err).split())


def slack(doors: Doors, case: Case, capsys: pytest.CaptureFixture[str]) -> tuple[bool, str]:
    world = doors.world
    before = len(world.standin.of("chat.postMessage"))
    said_before = len(_said(world))
    assert world.deploy(case.request, user=case.requester)[0] == 200
    if case.plan_refused:
        said = world.standin.wait_for(lambda: [t for t in _said(world)[said_before:]
                                               if case.said[:20] in t],
                                      what="the refusal of the plan")
        assert not _approvable(world, before)  # no plan was posted for approval
        return False, " ".join(said)
    value = world.standin.wait_for(lambda: _approvable(world, before), what="the plan")[0]
    run_id = bk.parse_button_value(value)[0]
    told = len(world.told(case.user))
    assert world.click("approve", value, user=case.user)[0] == 200

    def decided() -> list[str] | bool:
        approved = any(a.user == case.user for a in doors.store.runs.get(run_id).approvals)
        return approved or world.told(case.user)[told:]

    result = world.standin.wait_for(decided, what="the click's answer")
    if result is True:
        return True, "approved"
    return False, " ".join(str(t) for t in result).replace("&lt;", "<").replace("&gt;", ">")


def _approvable(world: SlackWorld, after: int) -> list[str]:
    """The Approve buttons' values of the messages posted after the first ``after``."""
    posts = world.standin.of("chat.postMessage")[after:]
    return [button(c, "approve") for c in posts
            if any(e["action_id"] == "approve" for b in actions_of(c) for e in b["elements"])]


def _said(world: SlackWorld) -> list[str]:
    """Everything said privately or in answer to a command, unescaped, in order."""
    texts = [str(c.payload.get("text")) for c in world.standin.of("chat.postEphemeral")]
    texts += [str(r.get("text")) for r in list(world.standin.responses)]
    return [" ".join(t.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&").split())
            for t in texts]


def mcp(doors: Doors, case: Case, capsys: pytest.CaptureFixture[str]) -> tuple[bool, str] | None:
    """MCP never approves: it refuses a plan nobody could complete, and its run_status
    gives the answer's rules; it has no per-person verdict (None)."""
    view = Desk(doors.services).plan(case.request, requester=case.requester)
    if case.plan_refused:
        assert not view.accepted
        return False, " ".join(view.problems)
    assert view.accepted, view.problems
    return None


def schedule(doors: Doors, case: Case,
             capsys: pytest.CaptureFixture[str]) -> tuple[bool, str]:
    """The user creates an --auto schedule of the request; one occurrence fires now."""
    now = datetime.now(UTC)

    def cmd(args: str) -> object:
        return handle_schedule_command(args, user=case.user, user_groups=[], channel=None,
                                       services=doors.services, now=now)

    shown = cmd(f'add "every day at 03:00" {case.request} --auto')
    if not shown.ok or shown.confirm is None:  # type: ignore[attr-defined]
        return False, shown.text  # type: ignore[attr-defined]
    created = cmd(shown.confirm)  # type: ignore[attr-defined]
    assert created.ok, created.text  # type: ignore[attr-defined]
    occurrence = run_occurrence(doors.services, created.schedule, now,  # type: ignore[attr-defined]
                                manual=True)
    assert occurrence.run is not None
    stored = doors.store.runs.get(occurrence.run.id)
    queued = occurrence.outcome is Outcome.QUEUED
    assert (stored.status is not RunStatus.AWAITING_APPROVAL) == queued  # the end state
    return queued, occurrence.message


def explain(doors: Doors, case: Case,
            capsys: pytest.CaptureFixture[str]) -> tuple[bool, str]:
    if case.plan_refused:
        plan = doors.services.planner.plan(case.request, requested_by=case.requester)
        file = doors.path.parent / "plan.yml"
        file.write_text(yaml.safe_dump(plan.model_dump(mode="json", include={
            "goal", "steps", "rollback"})))
        args = ["--plan", str(file), "--requested-by", case.requester]
    else:
        args = [waiting(doors, case).id]
    assert main(["policy", "explain", *args, "--user", case.user,
                 "--config", str(doors.path)]) == 0
    out = capsys.readouterr().out
    verdict = next(line for line in out.splitlines() if " may approve: " in line)
    return verdict.endswith("may approve: yes (an environment approval)"), " ".join(out.split())


DOORS: dict[str, Callable[[Doors, Case, pytest.CaptureFixture[str]],
                          tuple[bool, str] | None]] = {
    "cli": cli, "slack": slack, "mcp": mcp, "schedule": schedule, "explain": explain}


@pytest.mark.parametrize("door", list(DOORS))
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_door_gives_the_same_verdict(doors: Doors, case: Case, door: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    seed(doors, case)
    answer = DOORS[door](doors, case, capsys)
    if answer is None:
        return  # this door has no such verdict (said in its docstring)
    allowed, said = answer
    if door == "slack" and case.slack_allowed is not None:
        assert allowed == case.slack_allowed, said
        return
    assert allowed == case.allowed, said
    wanted = case.schedule_said if door == "schedule" and case.schedule_said else case.said
    assert wanted in said, said


def test_unattended_counts_the_real_hosts_and_the_per_hour_limit(doors: Doors) -> None:
    """§1: an --auto schedule is approved as its creator would be: the second occurrence
    within the hour waits for a person (the limit), and nothing else was queued."""
    case = Case("unattended twice", "staging v1.0.1", "UCAROL", "UBOB", True)
    now = datetime.now(UTC)

    def cmd(args: str) -> object:
        return handle_schedule_command(args, user="UBOB", user_groups=[], channel=None,
                                       services=doors.services, now=now)

    shown = cmd(f'add "every day at 04:00" {case.request} --auto')
    created = cmd(shown.confirm)  # type: ignore[attr-defined]
    first = run_occurrence(doors.services, created.schedule, now,  # type: ignore[attr-defined]
                           manual=True)
    second = run_occurrence(doors.services, created.schedule, now,  # type: ignore[attr-defined]
                            manual=True)
    assert first.outcome is Outcome.QUEUED, first.message
    assert second.outcome is Outcome.AWAITING_APPROVAL, second.message
    assert "limit: 1 staging run(s) per hour per person" in second.message
    assert second.run is not None
    assert doors.store.runs.get(second.run.id).approvals == []
    refused = [e for e in doors.store.audit.entries(run_id=second.run.id)
               if e.action == "refused"]  # audited as any face's refusal (was not)
    assert [(e.actor, e.details["face"]) for e in refused] == [
        (created.schedule.approver_label, "schedule")]  # type: ignore[attr-defined]


def test_the_policy_version_is_on_the_run_its_approval_its_entries_and_explain(
        doors: Doors, capsys: pytest.CaptureFixture[str]) -> None:
    """§7: which rules a decision was made under is written down with it; explain names the
    version in force and any other one the run met."""
    case = Case("versioned", "qa v1.0.2", "UCAROL", "UBOB", True)
    run, version = waiting(doors, case), policy_version(doors.services.config.policy)
    approved = RunDesk(doors.services).approve(run.id, user="UBOB", face=Face.CLI)
    assert approved.meta["policy"] == version
    assert [a.policy for a in approved.approvals] == [version]
    entries = {e.action: e for e in doors.store.audit.entries(run_id=run.id)}
    assert entries["planned"].details["policy"] == entries["approved"].details["policy"] \
        == version
    assert main(["policy", "explain", run.id, "--config", str(doors.path)]) == 0
    assert f"[policy {version}]:" in capsys.readouterr().out.splitlines()[0]
    changed = doors.path.parent / "changed" / "deckhand.yml"
    changed.parent.mkdir(exist_ok=True)
    changed.write_text(doors.path.read_text().replace("runs_per_hour: 1", "runs_per_hour: 2"))
    now = policy_version(load_config(changed).policy)
    assert now != version
    assert main(["policy", "explain", run.id, "--config", str(changed)]) == 0
    assert f"[policy {now}; earlier under {version}]:" in capsys.readouterr().out


def test_a_lock_by_hand_is_the_same_no_at_explain_and_approve(
        doors: Doors, capsys: pytest.CaptureFixture[str]) -> None:
    """A person's lock taken after a plan was posted refuses its approval; explain --user
    says exactly that, not yes."""
    run = waiting(doors, Case("locked", "qa v1.0.3", "UCAROL", "UBOB", False))
    where = ["--config", str(doors.path)]
    assert main(["lock", "qa", "--reason", "db migration", "--user", "UALICE", *where]) == 0
    try:
        capsys.readouterr()
        assert main(["policy", "explain", run.id, "--user", "UBOB", *where]) == 0
        said = " ".join(capsys.readouterr().out.split())
        assert main(["approve", run.id, "--user", "UBOB", *where]) == 3
        out = capsys.readouterr()
        refused = " ".join((out.out + out.err).split())
        assert "UBOB may approve: no: " in said and "db migration" in said
        assert "db migration" in refused
        assert doors.store.runs.get(run.id).approvals == []
    finally:
        assert main(["unlock", "qa", "--user", "UALICE", *where]) == 0
