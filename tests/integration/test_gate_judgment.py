"""Gates with go/no-go and pause between rollout batches: the go/no-go holds only after the
batch's gates passed and shows every series they measured; a pause between batches skips no
gate; the last batch is gated though no go/no-go may follow it; a gate that fails rolls back
without asking anyone. Real sshd hosts (marker files), a real Redis and worker, a real
Prometheus scraping a loopback endpoint whose series the test sets.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agents.config import load_config
from agents.run.record import Run, RunStatus, Verdict
from agents.services import build_services
from agents.store import Store
from bot.cli import main
from bot.slack.judgment_blocks import judgment_blocks
from tests.fixtures.polling import wait_until
from tests.fixtures.prometheus import Metrics, Prometheus, expose
from tests.fixtures.sshd import SSHFleet
from tests.integration.test_go_no_go import HOSTS, PLAYBOOKS, POLICY, TOOLS, Clock, Deploy


@pytest.fixture
def start(tmp_path: Path, sshd_hosts: SSHFleet, redis_url: str,
          scraped: tuple[Metrics, Prometheus],
          monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Starts `ship v1.2.3` on prod-1..3 in batches of one, gate ``ratio`` (every series
    ≥ 0.99) after each batch, go/no-go after batches 1 and 2."""
    monkeypatch.setenv("REDIS_URL", redis_url)  # `deckhand runs show` reads it
    store = Store.connect(redis_url)
    store.r.flushdb()
    started: list[Deploy] = []

    def begin(**judgment: Any) -> Deploy:
        hosts = {n: sshd_hosts.inventory_host(n, vars={"dir": str(tmp_path / "hosts" / n)})
                 for n in HOSTS}
        gate = {"description": "every series of the success ratio is at least 0.99",
                "gate": {"kind": "prometheus", "url": scraped[1].url, "query": "ratio",
                         "min": 0.99, "interval": 0}, "timeout": 10}
        rollout = {"batch_size": 1, "after_each_batch": ["ratio"],
                   "judgment": {"after_batches": [1, 2], "timeout": "30m", **judgment}}
        doc = {"tools": {**TOOLS, "ratio": gate}, "playbooks": PLAYBOOKS, "policy": POLICY,
               "inventory": {"known_hosts": str(sshd_hosts.known_hosts), "hosts": hosts,
                             "environments": {"production": {"hosts": list(HOSTS),
                                                             "rollout": rollout}}}}
        (tmp_path / "deckhand.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
        services = build_services(load_config(tmp_path / "deckhand.yml"), store=store)
        services.executor.deps.clock = Clock(1_800_000_000.0)
        started.append(Deploy(tmp_path, services, services.executor.deps.clock))
        return started[-1]

    yield begin
    for deploy in started:
        if deploy.thread.is_alive():  # a failed test: let the worker roll back and go
            store.runs.request_cancel(deploy.run_id, user="test")
            deploy.thread.join(timeout=60)
        deploy.services.close()


def _judged(run: Run) -> list[tuple[int | None, bool]]:
    return [(c.after_batch, c.ok) for c in run.gates]


def _held_after(deploy: Deploy, batch: int) -> Run:
    held: Run = wait_until(lambda: (r := deploy.store.runs.get(deploy.run_id)).awaiting
                           and r.awaiting.after_batch == batch and r,
                           what=f"the hold after {batch}")
    return held


def _decide(deploy: Deploy, run: Run) -> None:
    assert run.awaiting is not None
    deploy.store.judgments.decide(run.id, Verdict.CONTINUE, user="carol", via="cli",
                                  hold=run.awaiting.hold, policy=deploy.services.config.policy)


def test_each_batch_is_gated_before_its_go_no_go_and_the_last_one_too(
        start: Any, scraped: tuple[Metrics, Prometheus],
        capsys: pytest.CaptureFixture[str]) -> None:
    expose(scraped[0], scraped[1], a="1", b="0.995")
    deploy = start()
    run = _held_after(deploy, 1)
    assert _judged(run) == [(1, True)]  # the batch's gate was judged before the hold
    assert [deploy.marker(h) for h in HOSTS] == ["v1.2.3", None, None]
    # whoever decides sees every series the gate measured, against its bound
    assert run.awaiting is not None and len(run.awaiting.gates) == 1
    figure = run.awaiting.gates[0]
    for shown in ('series="a"} = 1,', 'series="b"} = 0.995', "(must be ≥ 0.99)",
                  "ratio after batch 1 of 3: passed"):
        assert shown in figure, figure
    slack = str(judgment_blocks(run.id, run.awaiting))
    assert 'series="b"} = 0.995' in slack, slack
    assert main(["runs", "show", run.id, "--config", str(deploy.tmp_path / "deckhand.yml")]) == 0
    assert 'series="b"} = 0.995' in capsys.readouterr().out
    assert main(["runs", "show", run.id, "--json",
                 "--config", str(deploy.tmp_path / "deckhand.yml")]) == 0
    shown = json.loads(capsys.readouterr().out)
    [gate] = shown["gates"]
    assert (gate["name"], gate["after_batch"], gate["batches"], gate["ok"]) == \
        ("ratio", 1, 3, True)
    assert {(s["series"].rsplit(", ", 1)[-1], s["value"]) for s in gate["samples"]} == {
        ('series="a"}', "1"), ('series="b"}', "0.995")}
    [hold] = shown["holds"]
    assert (hold["hold"], hold["awaiting"], hold["decision"], hold["hosts_done"]) == \
        ("ship/1", True, None, ["prod-1"])
    assert hold["deadline"] == hold["since"] + 1800 and 'series="b"} = 0.995' in hold["gates"][0]

    # a pause asked during the hold holds batch 2: no gate is skipped; Continue judged the
    # gate again before anything started (the figures seen at the hold do not carry it)
    deploy.store.runs.request_pause(run.id, user="alice", via="cli")
    _decide(deploy, run)
    paused = wait_until(lambda: (r := deploy.store.runs.get(run.id)).paused and r,
                        what="the run to be paused before batch 2")
    assert paused.paused is not None and paused.paused.before == "batch 2 of 3 of ship"
    assert _judged(paused) == [(1, True), (1, True)]
    assert [deploy.marker(h) for h in HOSTS] == ["v1.2.3", None, None]
    deploy.store.runs.request_resume(run.id)

    run = _held_after(deploy, 2)
    assert _judged(run) == [(1, True), (1, True), (2, True)]
    deploy.store.runs.request_pause(run.id, user="alice", via="cli")
    _decide(deploy, run)  # Continue judges the gate again: still good
    wait_until(lambda: (r := deploy.store.runs.get(run.id)).paused and r,
               what="the run to be paused before batch 3")
    expose(scraped[0], scraped[1], a="1", b="0.5")  # what the last host's deploy breaks
    deploy.store.runs.request_resume(run.id)
    final = deploy.finished()
    assert final.status is RunStatus.ROLLED_BACK  # no go/no-go after the last batch: its gate
    assert _judged(final) == [(1, True), (1, True), (2, True), (2, True), (3, False)]
    error = final.steps["ship"].error or ""
    assert "gate ratio failed after batch 3 of 3 (the last)" in error
    assert 'series="b"} = 0.5 (must be ≥ 0.99)' in error  # the worst sample, named
    assert [deploy.marker(h, "undo") for h in HOSTS] == ["undone"] * 3
    assert len(final.judgments) == 2
    assert [e.details["gate"]["after_batch"] for e in deploy.audited("gate_judged")] == \
        [1, 1, 2, 2, 3]
    # the audit alone explains each decision: what the decider was shown, and who decided
    awaited = deploy.audited("judgment_awaited")
    assert [e.details["judgment"]["after_batch"] for e in awaited] == [1, 2]
    assert 'series="b"} = 0.995' in awaited[0].details["judgment"]["gates"][0]
    assert [(e.details["batch"], e.details["decision"]) for e in deploy.audited("judged")] == \
        [(1, "continue"), (2, "continue")]


def test_a_failed_gate_rolls_back_without_a_go_no_go(
        start: Any, scraped: tuple[Metrics, Prometheus]) -> None:
    expose(scraped[0], scraped[1], a="1", b="0.5")
    deploy = start()
    final = deploy.finished()
    assert final.status is RunStatus.ROLLED_BACK
    assert _judged(final) == [(1, False)]
    assert final.judgments == [] and deploy.audited("judgment_awaited") == []
    assert final.changed_hosts == ["prod-1"]
    assert [deploy.marker(h) for h in HOSTS] == ["v1.2.3", None, None]
    assert [deploy.marker(h, "undo") for h in HOSTS] == ["undone", None, None]


def _showing(deploy: Deploy, text: str) -> Run:
    """The run once its hold's figures (re-judged while holding) show ``text``."""
    run: Run = wait_until(lambda: (r := deploy.store.runs.get(deploy.run_id)).awaiting
                          and any(text in g for g in r.awaiting.gates) and r,
                          what=f"the hold to show {text}")
    return run


def test_a_metric_that_turns_bad_during_a_hold_ends_it_in_a_rollback(
        start: Any, scraped: tuple[Metrics, Prometheus],
        capsys: pytest.CaptureFixture[str]) -> None:
    expose(scraped[0], scraped[1], a="1", b="0.995")
    deploy = start(recheck="0.3s")
    run = _held_after(deploy, 1)
    assert run.awaiting is not None and run.awaiting.recheck == 0.3
    expose(scraped[0], scraped[1], a="1", b="0.5")  # nobody decides: the gate does
    final = deploy.finished()
    assert final.status is RunStatus.ROLLED_BACK
    assert [deploy.marker(h) for h in HOSTS] == ["v1.2.3", None, None]  # batch 2 never began
    assert [deploy.marker(h, "undo") for h in HOSTS] == ["undone", None, None]
    held = final.judgments[0]
    assert held.decision is not None and held.decision.via == "gate"
    assert held.decision.verdict is Verdict.ROLLBACK
    assert 'series="b"} = 0.5 ✗' in held.gates[0]  # what it showed: the figures that failed
    assert held.measured_at is not None
    assert _judged(final)[0] == (1, True) and (1, False) in _judged(final)
    assert "gate ratio failed after batch 1 of 3" in (final.steps["ship"].error or "")
    judged = deploy.audited("judged")  # the gate's decision, audited like a click
    assert [(e.details["via"], e.details["decision"]) for e in judged] == [("gate", "rollback")]
    assert main(["runs", "show", final.id, "--json",
                 "--config", str(deploy.tmp_path / "deckhand.yml")]) == 0
    [hold] = json.loads(capsys.readouterr().out)["holds"]
    assert (hold["awaiting"], hold["decision"]["via"], hold["recheck"]) == (False, "gate", 0.3)
    assert hold["measured_at"] is not None and 'series="b"} = 0.5 ✗' in hold["gates"][0]


def test_a_hold_shows_current_figures_and_continue_judges_again(
        start: Any, scraped: tuple[Metrics, Prometheus]) -> None:
    expose(scraped[0], scraped[1], a="1", b="0.995")
    deploy = start(recheck="0.3s", on_gate_failure="decide")
    run = _held_after(deploy, 1)
    expose(scraped[0], scraped[1], a="1", b="0.5")
    run = _showing(deploy, 'series="b"} = 0.5 ✗')  # left to the people: still holding
    assert run.awaiting is not None and run.awaiting.decision is None
    assert "judged again every 0.3s while holding" in str(judgment_blocks(run.id, run.awaiting))
    # the newest figures reach the thread through the run's feed, whichever process relays
    fed = [e.data for e in deploy.store.run_feed.read(run.id, after="0-0", count=1000)]
    assert any('series="b"} = 0.5' in str(d) and "judgment_awaited" in str(d) for d in fed)
    expose(scraped[0], scraped[1], a="1", b="0.97")
    _showing(deploy, 'series="b"} = 0.97 ✗')
    _decide(deploy, deploy.store.runs.get(run.id))  # Continue, on a gate still failing
    final = deploy.finished()
    assert final.status is RunStatus.ROLLED_BACK
    assert [deploy.marker(h) for h in HOSTS] == ["v1.2.3", None, None]
    error = final.steps["ship"].error or ""
    assert "(judged again on Continue)" in error and 'series="b"} = 0.97' in error, error
    assert final.judgments[0].decision is not None
    assert final.judgments[0].decision.verdict is Verdict.CONTINUE
