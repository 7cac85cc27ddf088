"""Shared fixtures. Each fixture module under tests/fixtures/ is registered here."""

import logging
import os
from collections.abc import Iterator

import pytest

from bot.logs import HANDLER_NAME

# Without REDIS_URL, deckhand starts a Redis server for the state directory (it outlives the
# command, until idle). The suite's commands keep the in-process store, as they always did;
# the tests of that server (test_local_server.py) ask for it.
os.environ.setdefault("DECKHAND_EMBEDDED_STORE", "memory")

pytest_plugins = [
    "tests.fixtures.sample",
    "tests.fixtures.sshd",
    "tests.fixtures.redis_server",
    "tests.fixtures.otlp",
    "tests.fixtures.redis_sentinel",
    "tests.fixtures.redis_tls",
    "tests.fixtures.slack_standin",
    "tests.fixtures.slack_world",
    "tests.fixtures.openai_standin",
    "tests.fixtures.siem_standin",
    "tests.fixtures.rsyslog",
    "tests.fixtures.prometheus",
    "tests.fixtures.topology",
]


@pytest.fixture(autouse=True)
def _logging_left_as_found() -> Iterator[None]:
    """A test whose code configures deckhand's logging (serve, worker, main) must not leave
    its handler on the root logger: later tests would see log lines in captured output."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in root.handlers:
        if handler not in handlers and handler.get_name() == HANDLER_NAME:
            root.removeHandler(handler)
    root.setLevel(level)
