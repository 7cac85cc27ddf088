"""Shared fixtures. Each fixture module under tests/fixtures/ is registered here."""

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
]
