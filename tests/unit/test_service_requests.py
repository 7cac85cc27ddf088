"""Which service a request names (docs/services.md 2.1): every phrasing of the table, and
every refusal — two services, a near miss, an unknown or disagreeing option, none at all."""

from __future__ import annotations

import pytest

from agents.errors import ServiceNotChosen, WhichService
from agents.requests.services import Picked, ServiceNames, choose, pick

NAMES = ServiceNames.of(["api", "web", "billing"], ["staging", "production", "prod", "live"])


@pytest.mark.parametrize(("said", "service", "rest", "how"), [
    ("deploy api v2.3.1", "api", "deploy v2.3.1", "word"),
    ("deploy api/v2.3.1 to production", "api", "deploy v2.3.1 to production", "slash"),
    ("deploy v2.3.1 of web to staging", "web", "deploy v2.3.1 to staging", "of"),
    ("status of api in prod", "api", "status in prod", "of"),
    ("roll back web", "web", "roll back", "trailing"),
    ("where can I deploy api", "api", "where can I deploy api", "where"),
    # normalised first: filler, versions and case as phrasing reads them
    ("please deploy 2.3.1 for billing now", "billing", "deploy v2.3.1", "of"),
    ("Deploy API release 2.3.1 to live", "api", "Deploy v2.3.1 to live", "word"),
    ("ship Web/V2.3.1", "web", "ship v2.3.1", "slash"),
    ("roll back web?", "web", "roll back", "trailing"),
    ("deploy api api/v1.0.0", "api", "deploy v1.0.0", "word"),  # one service, said twice
])
def test_each_phrasing_names_its_service_and_leaves_the_request(
        said: str, service: str, rest: str, how: str) -> None:
    picked = pick(said, NAMES)
    assert (picked.service, picked.rest, picked.how) == (service, rest, how)


def test_a_request_naming_no_service_is_left_as_typed() -> None:
    picked = pick("please deploy 1.0.3 to prod", NAMES)
    assert picked == Picked(None, "deploy v1.0.3 to prod", "deploy v1.0.3 to prod", "none")
    assert picked.wordings == ["deploy v1.0.3 to prod"]
    assert pick("where can we deploy?", NAMES) == Picked(None, "where can we deploy",
                                                         "where can we deploy", "where")


def test_the_request_is_tried_as_typed_before_without_the_name() -> None:
    assert pick("restart api", NAMES).wordings == ["restart api", "restart"]


def test_two_services_in_one_request_are_refused() -> None:
    with pytest.raises(ServiceNotChosen, match=r"names 2 services \(api, web\): name one"):
        pick("deploy api and web/v1.0.0", NAMES)


@pytest.mark.parametrize(("said", "word", "meant"), [
    ("deploy webb v1.0.0", "webb", "web"),
    ("deploy v1.0.0 of biling", "biling", "billing"),
    ("deploy bilING/v1.0.0", "biling", "billing"),
])
def test_a_near_miss_is_refused_with_the_known_names(said: str, word: str, meant: str) -> None:
    with pytest.raises(ServiceNotChosen) as caught:
        pick(said, NAMES)
    assert str(caught.value) == (f"{word!r} is not a service (did you mean {meant}?); "
                                 f"known services: api, billing, web")


def test_environment_and_request_words_are_never_near_misses() -> None:
    names = ServiceNames.of(["stage", "lives"], ["staging", "live"])
    assert pick("deploy v1.0.0 to staging", names).service is None  # close to "stage"
    assert pick("what's live", names).service is None
    assert pick("deploy v1.0.0", ServiceNames.of(["deployer", "web"])).service is None


def test_with_one_service_a_near_miss_plans_as_before() -> None:
    assert pick("deploy webb v1.0.0", ServiceNames.of(["web"])).service is None


def test_an_unknown_service_in_the_question_is_refused() -> None:
    with pytest.raises(ServiceNotChosen, match=r"'wbe' is not a service; known services: api"):
        pick("where can I deploy wbe", NAMES)


def test_choose_takes_the_request_then_the_option_then_the_only_service() -> None:
    assert choose(pick("roll back web", NAMES), NAMES) == "web"
    assert choose(pick("roll back web", NAMES), NAMES, given="WEB") == "web"
    assert choose(pick("roll back", NAMES), NAMES, given="api") == "api"
    only = ServiceNames.of(["api"])
    assert choose(pick("roll back", only), only) == "api"


def test_choose_refuses_an_unknown_or_disagreeing_option() -> None:
    with pytest.raises(ServiceNotChosen) as caught:
        choose(pick("roll back", NAMES), NAMES, given="wbe", given_by="DECKHAND_SERVICE")
    assert str(caught.value) == ("DECKHAND_SERVICE names unknown service 'wbe'; known "
                                 "services: api, billing, web")
    with pytest.raises(ServiceNotChosen, match="names service web but --service says api"):
        choose(pick("roll back web", NAMES), NAMES, given="api")


def test_choose_asks_which_service_when_nothing_chooses_one() -> None:
    with pytest.raises(WhichService) as caught:
        choose(pick("please roll back", NAMES), NAMES)
    assert caught.value.names == ["api", "billing", "web"]
    assert caught.value.request == "roll back"
    assert str(caught.value).startswith("which service? This organisation has api, billing, "
                                        "web: name one")
