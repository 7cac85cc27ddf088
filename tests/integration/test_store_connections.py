"""One store client holds as many connections at once as a fan-out has host threads."""

from __future__ import annotations

import threading

import redis

from agents.store.connect import connect_client
from tests.fixtures.polling import wait_until

HOST_THREADS = 150
"""More than redis-py 7+'s default pool cap (100), as a fan-out to 150+ hosts has."""


def test_more_threads_than_redis_pys_default_pool_each_get_a_connection(
        client: redis.Redis) -> None:
    url = client.connection_pool.connection_kwargs
    store = connect_client(f"redis://{url['host']}:{url['port']}/{url.get('db', 0)}")
    failures: list[BaseException] = []
    got: list[bytes | str] = []

    def wait_for_item() -> None:  # BLPOP holds its connection until an item comes
        try:
            item = store.blpop(["dh:test:fanout"], timeout=30)
            got.append(item[1] if item else b"")
        except redis.RedisError as exc:
            failures.append(exc)

    threads = [threading.Thread(target=wait_for_item) for _ in range(HOST_THREADS)]
    for thread in threads:
        thread.start()
    wait_until(lambda: failures or client.info("clients")["blocked_clients"] >= HOST_THREADS,
               what=f"{HOST_THREADS} clients blocked at once")
    client.rpush("dh:test:fanout", *[b"x"] * HOST_THREADS)
    for thread in threads:
        thread.join(30)
    assert not failures, failures[:3]
    assert got == [b"x"] * HOST_THREADS
