"""``stale_after`` judges the samples' own time, against a real Prometheus: once its scrape
stops, the data it had stays in the lookback and an instant query still answers it, stamped
with the evaluation time; the gate asks how old the newest sample of each series its query
reads is (``timestamp()``) and refuses the data once that is past ``stale_after``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.fixtures.polling import wait_until
from tests.fixtures.prometheus import Metrics, Prometheus, expose
from tools.runners.gate import GateRunner


def _gate(server: Prometheus, query: str) -> str:
    return json.dumps({"kind": "prometheus", "url": server.url, "query": query,
                       "max": 0.1, "stale_after": 1, "interval": 0})


def test_data_left_in_the_lookback_after_the_scrape_stopped_is_refused_as_stale(
        tmp_path: Path) -> None:
    metrics = Metrics()
    server = Prometheus(tmp_path / "prom", {"app": (metrics.port, "test")})
    try:
        expose(metrics, server, a="0.01")
        query = 'max(ratio{series="a"}) / 1'
        fresh = GateRunner().run(_gate(server, query), timeout=10)
        assert fresh.exit_code == 0, fresh.tail
        server.stop_scraping()
        last = float(server.query('timestamp(ratio{series="a"})')[0]["value"][1])
        # the data is still answered (within the 5 minute lookback), ever older
        wait_until(lambda: time.time() - last > 1.5, timeout=20, what="the data to age past 1s")
        assert server.query(query)[0]["value"][1] == "0.01"
        stale = GateRunner().run(_gate(server, query), timeout=10)
        assert stale.exit_code == 1, stale.tail
        reason = stale.gate.reason or ""
        assert 'stale: the newest sample of ratio{series="a"} is' in reason, reason
        assert "(stale_after: 1s)" in reason
        [sample] = stale.gate.samples
        assert sample.at == last and not sample.ok  # the data's own time, not the query's
    finally:
        server.stop()
        metrics.close()
