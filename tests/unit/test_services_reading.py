"""Reading across services, without a store: a read command's ``[SERVICE] [ENV]`` words,
the organisation's DORA line, and the one line ``init --service`` inserts."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.history.deploys import DAY, ORG, Deploy, organisation
from agents.org import load_org
from agents.run.record import RunStatus
from bot.cli.common import split_scope
from bot.cli.init import with_service_line
from tests.fixtures.sample import EXAMPLES
from tools.errors import DeckhandError


def test_a_first_word_naming_a_service_is_one() -> None:
    org = load_org(EXAMPLES / "services" / "deckhand.yml")
    assert split_scope(org, [None, None]) == (["api", "web"], None)
    assert split_scope(org, ["production", None]) == (["api", "web"], "production")
    assert split_scope(org, ["WEB", None]) == (["web"], None)
    assert split_scope(org, ["api", "staging"]) == (["api"], "staging")
    with pytest.raises(DeckhandError, match=r"'db' is not a service .* \(known: api, web\)"):
        split_scope(org, ["db", "staging"])


def test_one_service_configs_read_a_word_as_an_environment_first() -> None:
    org = load_org(EXAMPLES / "deckhand.yml")  # the service is named "deckhand"
    assert split_scope(org, ["production", None]) == (["deckhand"], "production")
    assert split_scope(org, ["deckhand", "production"]) == (["deckhand"], "production")


def _deploy(run: str, at: float, outcome: RunStatus = RunStatus.SUCCEEDED) -> Deploy:
    return Deploy(run_id=run, environment="production", version="v1.0.0", outcome=outcome,
                  requested_by="U1", started_at=at - 1, finished_at=at, hosts={"h": "v1.0.0"})


def test_the_organisations_line_folds_each_timeline_on_its_own() -> None:
    now = 100 * DAY
    api = [_deploy("a1", now - 3 * DAY, RunStatus.FAILED), _deploy("a2", now - 2 * DAY)]
    web = [_deploy("w1", now - 2.5 * DAY, RunStatus.FAILED), _deploy("w2", now - DAY / 2)]
    line = organisation([(api, None, DAY), (web, None, DAY)], environment=ORG, now=now,
                        days=30)
    assert (line.deploys, line.failed, line.succeeded) == (4, 2, 2)
    assert line.change_failure_rate == 0.5
    # api restored after 1 day, web after 2: never web's failure "restored" by api's deploy
    assert line.time_to_restore == pytest.approx(1.5 * DAY)


def test_init_inserts_one_line_at_the_end_of_services(tmp_path: Path) -> None:
    main = tmp_path / "deckhand.yml"
    text = ("# the org\nservices:\n  # api first\n  api: api.yml\n  docs:\n    tools: {}\n"
            "\npolicy: {}  # kept\n")
    assert with_service_line(text, "web", main) == (
        "# the org\nservices:\n  # api first\n  api: api.yml\n  docs:\n    tools: {}\n"
        "  web: services/web.yml\n\npolicy: {}  # kept\n")
    assert with_service_line("services:\n    api: a.yml", "web", main) == (
        "services:\n    api: a.yml\n    web: services/web.yml\n")
    with pytest.raises(DeckhandError, match="has no `services:` block: it is one service"):
        with_service_line("tools: {}\n", "web", main)


def test_each_services_undo_window_judges_its_own_rollbacks() -> None:
    now = 100 * DAY
    undone = [_deploy("a1", now - 3 * DAY), _deploy("a2", now - 3 * DAY + 3600)]
    undone[1].rollback_of_version = True
    kept = [d.model_copy(update={"run_id": "w" + d.run_id}) for d in undone]
    # a rollback an hour later undoes the deploy within api's day, not within web's minute
    line = organisation([(undone, None, DAY), (kept, None, 60)], environment=ORG, now=now,
                        days=30)
    assert (line.deploys, line.failed) == (4, 0)
    assert line.change_failure_rate == 1 / 4
