"""Shared fixtures. Each fixture module under tests/fixtures/ is registered here."""

pytest_plugins = [
    "tests.fixtures.sshd",
    "tests.fixtures.sample",
    "tests.fixtures.openai_standin",
]
