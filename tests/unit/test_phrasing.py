"""Issue 33: requests in people's words plan without a model, on the config `deckhand init`
writes; typed captures keep their type and case; aliases are declared once, checked, and
resolve to the canonical environment before policy."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from agents.config import Config, load_config
from agents.errors import NoPlanFound
from agents.requests.phrasing import Phrasing, normalize, version
from agents.requests.playbooks import PlaybookPlanner
from bot.cli import main
from bot.cli.init import template_text
from tests.fixtures.builders import BASE


@pytest.fixture
def init_config(tmp_path: Path) -> Config:
    path = tmp_path / "deckhand.yml"
    path.write_text(template_text())
    return load_config(path)


def planner_for(config: Config) -> PlaybookPlanner:
    return PlaybookPlanner(config.playbooks, phrasing=Phrasing.of(config.inventory.environments))


# The ten phrasings of the issue that planned 0 of 10 on main, with the plan each must be.
ISSUE_PHRASINGS = [
    ("please deploy v1.0.3 to prod", "deploy", {"deploy_production": "production"}),
    ("rollback prod", "rollback", {"rollback": "production"}),
    ("status", "status-live", {"status": "production"}),
    ("undo the last deploy", "rollback", {"rollback": "production"}),
    ("push v1.0.3 to staging", "deploy-staging", {"deploy_staging": "staging"}),
    ("can you roll back staging now", "rollback", {"rollback": "staging"}),
    ("what's live?", "status-live", {"status": "production"}),
    ("status of prod", "status", {"status": "production"}),
    ("could you revert live please", "rollback", {"rollback": "production"}),
    ("Deploy release 1.0.3 to live", "deploy", {"deploy_production": "production"}),
]


@pytest.mark.parametrize(("request_", "playbook", "environments"), ISSUE_PHRASINGS)
def test_natural_phrasings_plan_with_the_init_config(
        init_config: Config, request_: str, playbook: str, environments: dict[str, str]) -> None:
    plan = planner_for(init_config).plan(request_, requested_by="alice")
    assert plan.planner.name == f"playbook {playbook}"
    by_id = {s.id: s for s in plan.steps}
    assert {k: by_id[k].params["environment"] for k in environments} == environments


@pytest.mark.parametrize(("said", "meant"), [
    ("please deploy 1.0.3 now", "deploy v1.0.3"), ("Can you, please, ship V2.0.0?", "ship v2.0.0"),
    ("deploy release 1.0.3 thanks", "deploy v1.0.3"), ("release 1.0.3", "release v1.0.3"),
    ("hey deckhand, status!", "status"), ("please", "please")])
def test_filler_and_version_forms(said: str, meant: str) -> None:
    assert normalize(said) == meant


def test_version_forms() -> None:
    assert [version(v) for v in ("1.0.3", "V1.0.3", "release 1.0.3", "v1.0.3-RC1", "latest")] \
        == ["v1.0.3", "v1.0.3", "v1.0.3", "v1.0.3-rc1", "latest"]


def test_an_alias_plans_what_the_canonical_name_plans(init_config: Config) -> None:
    planner = planner_for(init_config)
    via_alias = planner.plan("deploy v1.0.3 to live", requested_by="a")
    direct = planner.plan("deploy v1.0.3 to production", requested_by="a")
    assert via_alias.hash == direct.hash  # same steps, same policy: nothing is weakened


def test_unknown_environment_names_the_known_ones_and_aliases(init_config: Config) -> None:
    with pytest.raises(NoPlanFound) as refused:
        planner_for(init_config).plan("roll back mars please", requested_by="a")
    assert "unknown environment 'mars'" in str(refused.value)
    assert "production (also prod, live)" in str(refused.value)


# Issue 43.2: the words of the bots people come from, and typos, with the init config.
OTHER_BOTS = [
    (".deploy v1.2.3 to prod", "deploy", ""),
    ("!deploy v1.2.3 staging", "deploy-staging", ""),
    ("deploy! v1.2.3", "deploy", ""),
    ("deploy v1.2.3 to prod 🚀", "deploy", ""),
    ("deploy v1.2.3 to prod :rocket:", "deploy", ""),
    ("deploy v1.2.3 to staging and prod", "deploy", ""),
    ("hey @deckhand can u push v1.2.3 pls", "deploy", ""),
    ("<@U0BOT> ship v1.2.3 to production", "deploy", ""),
    ("depoly v1.2.3 to staging", "deploy-staging", "read 'depoly' as 'deploy'"),
    ("deploy v1.2.3 to stagign", "deploy-staging", "read 'stagign' as 'staging'"),
    ("roll back prodution please", "rollback", "read 'prodution' as 'production'"),
]


@pytest.mark.parametrize(("request_", "playbook", "note"), OTHER_BOTS)
def test_other_bots_words_and_typos_plan_and_say_what_was_read(
        init_config: Config, request_: str, playbook: str, note: str) -> None:
    plan = planner_for(init_config).plan(request_, requested_by="a")
    assert plan.planner.name == f"playbook {playbook}"
    assert plan.planner.note == note
    assert (note in plan.planner.footer()) if note else True


def test_a_typo_is_corrected_only_when_nothing_plans_as_typed_and_one_word_is_close(
        init_config: Config) -> None:
    phrasing = Phrasing.of(init_config.inventory.environments)
    assert phrasing.corrected("deploy v1.2.3 to mars") == ("deploy v1.2.3 to mars", [])
    assert phrasing.corrected("status") == ("status", [])
    with pytest.raises(NoPlanFound, match="I don't know how to plan"):
        planner_for(init_config).plan("dplx v1.2.3", requested_by="a")


@pytest.mark.parametrize(("said", "answer"), [
    ("cancel", "`deckhand stop RUN_ID`"), ("stop it", "`deckhand stop RUN_ID`"),
    ("pause the deploy", "`deckhand pause RUN_ID`"), ("resume", "`deckhand resume RUN_ID`"),
    ("don't deploy v1.2.3 to prod", "Nothing was planned")])
def test_controls_and_negations_suggest_no_plan(init_config: Config, said: str,
                                                answer: str) -> None:
    """'cancel' once suggested `undo the last release` (a production rollback); "don't
    deploy" suggested a rollback. Neither is asked for: say what is."""
    with pytest.raises(NoPlanFound) as refused:
        planner_for(init_config).plan(said, requested_by="a")
    assert answer in str(refused.value)
    assert "roll back" not in str(refused.value) and "undo" not in str(refused.value)


def test_no_match_says_what_was_understood_and_asks_for_the_missing_piece(
        init_config: Config) -> None:
    planner = planner_for(init_config)
    with pytest.raises(NoPlanFound) as refused:
        planner.plan("please deploy to prod", requested_by="a")
    lines = str(refused.value).splitlines()
    assert "I understood: environment production (you said 'prod')" in lines[0]
    first = lines[2].removeprefix("  • ").split(" — ")[0]
    assert first == "deploy v1.0.0" and "which version? v1.0.0 is only an example" in lines[2]
    # every suggestion runs exactly as typed
    for line in lines[2:]:
        assert planner.match(line.removeprefix("  • ").split(" — ")[0]) is not None, line


def test_a_suggestion_keeps_the_version_the_request_gave(init_config: Config) -> None:
    with pytest.raises(NoPlanFound) as refused:
        planner_for(init_config).plan("deploy v1.0.3 to qa", requested_by="a")
    text = str(refused.value)
    assert "unknown environment 'qa'" in text and "I understood: version v1.0.3" in text
    assert "  • deploy v1.0.3 to staging — " in text


TYPED = BASE + """
tools:
  count:
    description: count to n
    command: "seq {n}"
    params: {n: {type: integer, minimum: 1, maximum: 100}}
  say:
    description: say something
    command: "echo {text}"
    params: {text: {type: string}, loud: {type: boolean}}
playbooks:
  - name: count
    match: ['^count (?:to )?(?P<n>\\w+)$']
    types: {n: integer}
    examples: ["count 3"]
    goal: "Count to {n}"
    steps: [{id: count, tool: count, params: {n: "{n}"}}]
  - name: say
    match: ['^say (?P<text>.+?)(?: loudly (?P<loud>\\w+))?$']
    types: {loud: boolean}
    defaults: {loud: "no"}
    examples: ["say Hello World"]
    goal: "Say {text}"
    steps: [{id: say, tool: say, params: {text: "{text}", loud: "{loud}"}}]
"""


@pytest.fixture
def typed(tmp_path: Path) -> PlaybookPlanner:
    path = tmp_path / "deckhand.yml"
    path.write_text(textwrap.dedent(TYPED))
    return planner_for(load_config(path))


def test_typed_captures_reach_the_tool_as_their_type(typed: PlaybookPlanner) -> None:
    assert typed.plan("count 3", requested_by="a").steps[0].params == {"n": 3}
    assert typed.plan("please count to three", requested_by="a").steps[0].params == {"n": 3}
    said = typed.plan("say Hello World loudly yes", requested_by="a")
    assert said.steps[0].params == {"text": "Hello World", "loud": True}
    assert said.goal == "Say Hello World"  # case kept
    assert typed.plan("say Hi", requested_by="a").steps[0].params["loud"] is False


def test_a_capture_of_the_wrong_type_is_named(typed: PlaybookPlanner) -> None:
    with pytest.raises(NoPlanFound, match="n must be a whole number, like 3; got 'lots'"):
        typed.plan("count lots", requested_by="a")


def check(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    path = tmp_path / "deckhand.yml"
    path.write_text(textwrap.dedent(text))
    code = main(["check", str(path)])
    return code, capsys.readouterr().out


ALIASED = """
inventory:
  hosts:
    web-1: {connection: local}
    web-2: {connection: local}
  environments:
    staging: {hosts: [web-1], aliases: [stage, production]}
    production: {hosts: [web-2], aliases: [prod, stage, "two words"]}
policy:
  environments:
    prod: {min_approvals: 2}
"""


def test_alias_problems_are_reported_at_their_line(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, out = check(tmp_path, ALIASED, capsys)
    path = tmp_path / "deckhand.yml"
    lines = path.read_text().splitlines()
    at = {name: f"{path}:{n}" for n, line in enumerate(lines, start=1)
          for name in ("staging:", "production:", "prod:") if line.strip().startswith(name)}
    assert code == 2
    assert (f"{at['staging:']} inventory.environments.staging.aliases.1: alias 'production' of "
            f"staging is already environment production") in out
    assert f"{at['production:']} inventory.environments.production.aliases.1: alias 'stage' " \
           f"of production is already an alias of staging" in out
    assert "alias 'two words' must be one word" in out
    # a rule written for an alias would miss requests naming the environment: refused
    assert f"{at['prod:']} policy.environments.prod: 'prod' is an alias of production" in out


def test_the_init_config_checks_clean_with_its_aliases(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = check(tmp_path, template_text(), capsys)
    assert code == 0, out
