"""Connection setup is paced, and only setups the server dropped before login are retried."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

import pytest

from tests.fixtures.polling import wait_until
from tools.errors import HostKeyError, SSHAuthError, SSHSetupDropped
from tools.inventory import SSHSettings
from tools.runners.pacing import HandshakePacer


def pacer(**settings: object) -> tuple[HandshakePacer, list[float]]:
    slept: list[float] = []
    made = HandshakePacer(SSHSettings.model_validate(settings), sleep=slept.append,
                          rng=random.Random(7))
    return made, slept


def flaky(drops: int) -> tuple[list[int], Callable[[], str]]:
    calls: list[int] = []

    def setup() -> str:
        calls.append(1)
        if len(calls) <= drops:
            raise SSHSetupDropped("connecting to h failed: Error reading SSH protocol banner")
        return "transport"
    return calls, setup


def test_a_dropped_setup_is_retried_with_growing_jittered_backoff() -> None:
    paced, slept = pacer(connect_attempts=4, retry_backoff=1.0)
    calls, setup = flaky(drops=3)
    assert paced.open("127.0.0.1:22", setup) == "transport"
    assert len(calls) == 4
    first, second, third = slept  # half of each step is random: [step/2, step]
    assert 0.5 <= first <= 1.0 and 1.0 <= second <= 2.0 and 2.0 <= third <= 4.0
    stats = paced.stats
    assert (stats.attempts, stats.retries, stats.connections, stats.failures) == (4, 3, 1, 0)


def test_a_host_fails_only_after_its_attempts_and_says_how_many() -> None:
    paced, slept = pacer(connect_attempts=3)
    calls, setup = flaky(drops=10)
    with pytest.raises(SSHSetupDropped, match=r"protocol banner \(gave up after 3 attempts\)"):
        paced.open("127.0.0.1:22", setup)
    assert len(calls) == 3 and len(slept) == 2
    assert (paced.stats.retries, paced.stats.failures) == (2, 1)


@pytest.mark.parametrize("error", [SSHAuthError("refused our key"),
                                   HostKeyError("HOST KEY CHANGED")])
def test_login_and_host_key_failures_are_never_retried(error: Exception) -> None:
    paced, slept = pacer()
    calls: list[int] = []

    def setup() -> None:
        calls.append(1)
        raise error

    with pytest.raises(type(error)):
        paced.open("127.0.0.1:22", setup)
    assert calls == [1] and slept == []
    assert (paced.stats.attempts, paced.stats.retries) == (1, 0)


def test_setups_to_one_server_are_bounded_and_a_nested_setup_reuses_the_slot() -> None:
    paced, _ = pacer(max_handshakes=8, max_handshakes_per_server=2)
    inside, most = [0], [0]
    lock, release = threading.Lock(), threading.Event()

    def setup() -> None:
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        release.wait(30)
        paced.open("jump:22", lambda: None)  # a jump host reconnecting from inside a slot
        with lock:
            inside[0] -= 1

    threads = [threading.Thread(target=paced.open, args=("host:22", setup)) for _ in range(6)]
    for thread in threads:
        thread.start()
    wait_until(lambda: inside[0] == 2, timeout=10, what="two setups in their slots")
    release.set()
    for thread in threads:
        thread.join(30)
    assert most[0] == 2 and paced.stats.connections == 12
