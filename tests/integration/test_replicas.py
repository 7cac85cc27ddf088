"""Two `serve` replicas on one Redis behave as one bot: any replica may take any request."""

from __future__ import annotations

from agents.config import Config
from agents.run.record import RunStatus
from agents.store import Store
from bot.cli.demo import probe
from bot.slack import blocks as bk
from tests.fixtures.slack_standin import SlackStandin
from tests.fixtures.slack_world import button, start_world


def test_requests_alternate_between_two_replicas(sample_config: Config, store: Store,
                                                 slack_standin: SlackStandin) -> None:
    a = start_world(sample_config, store, slack_standin)
    b = start_world(sample_config, store, slack_standin)
    try:
        a.deploy("v2.3.1 to staging", trigger="T-1")
        b.deploy("v2.3.1 to staging", trigger="T-1")  # Slack's retry, to the other replica
        value = button(a.plan_message(), "approve")
        run_id = bk.parse_button_value(value)[0]
        b.click("approve", value, user="UBOB")
        a.click("approve", value, user="UCAROL")  # a double click, on the first replica
        run = b.wait_run(run_id)
        assert run.status is RunStatus.SUCCEEDED and [x.user for x in run.approvals] == ["UBOB"]
        assert len(store.runs.recent()) == 1  # the retry was recognised across replicas
        started = [e for e in store.audit.entries(run_id=run_id) if e.action == "started"]
        assert len(started) == 1  # executed once, by one of the two replicas' workers
        assert {p.body for p in probe(sample_config) if p.host == "staging-1"} == {"v2.3.1"}
        b.open_home("UBOB")
        a.open_home("UBOB")
        homes = slack_standin.wait_for(lambda: slack_standin.of("views.publish")[1:],
                                       what="both replicas' Home tabs")
        assert all(run_id[:12] in str(h.payload) for h in homes[-2:])
        assert slack_standin.violations == []
    finally:
        a.runtime.stop()
        b.runtime.stop()
