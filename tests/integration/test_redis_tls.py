"""Redis over TLS with an ACL user: certificates always verified, failures one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from agents.errors import StoreError
from agents.ids import short_id
from agents.run.record import Run
from agents.store import Store
from agents.store.connect import connect_client, parse_sentinel_url
from bot.cli import main
from tests.fixtures.builders import NO_TARGETS, make_plan
from tests.fixtures.redis_tls import PASSWORD, USER, TlsRedis
from tests.fixtures.sample import EXAMPLES

CONFIG = str(EXAMPLES / "deckhand.yml")


def test_a_run_is_stored_and_read_back_over_tls_as_the_acl_user(
        tls_redis: TlsRedis, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    store = Store.connect(tls_redis.url())
    plan = store.plans.save(make_plan([{"id": "s", "tool": "log", "params": {"line": "x"}}]))
    run = store.runs.create(Run.for_plan(plan, NO_TARGETS))
    assert store.r.acl_whoami() == USER

    monkeypatch.setenv("REDIS_URL", tls_redis.url())
    assert main(["runs", "show", run.id, "--config", CONFIG]) == 0
    out = capsys.readouterr().out
    assert short_id(run.id) in out and "awaiting_approval" in out
    plain = redis.Redis(port=tls_redis.port, username=USER, password=PASSWORD,
                        socket_timeout=2)
    with pytest.raises(redis.ConnectionError):
        plain.ping()  # the server speaks TLS only


@pytest.mark.parametrize(("bad", "message"), [
    ("password", "refused the user and password in REDIS_URL"),
    ("ca", "presented a certificate that is not trusted (self-signed certificate in "
           "certificate chain)"),
])
def test_a_wrong_password_or_ca_is_one_clear_line(
        tls_redis: TlsRedis, bad: str, message: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    url = (tls_redis.url(password="wrong-pass-7f3") if bad == "password"
           else tls_redis.url(ca=tls_redis.wrong_ca))
    monkeypatch.setenv("REDIS_URL", url)
    assert main(["runs", "--config", CONFIG]) == 2
    out = capsys.readouterr()
    text = out.out + out.err
    assert message in text and "Traceback" not in text and "wrong-pass-7f3" not in text
    assert len([line for line in text.splitlines() if line.strip()]) <= 3  # one wrapped line


@pytest.mark.parametrize(("query", "message"), [
    ("ssl_cert_reqs=none", "would turn off certificate verification"),
    ("ssl_check_hostname=false", "would turn off certificate verification"),
    ("ssl_ca_certs=/nonexistent/ca.pem", "is not a readable file"),
])
def test_tls_options_never_turn_verification_off(query: str, message: str) -> None:
    with pytest.raises(StoreError, match=message):
        connect_client(f"rediss://:hunter2@127.0.0.1:6380/0?{query}")
    with pytest.raises(StoreError, match=message):
        connect_client(f"rediss+sentinel://:hunter2@127.0.0.1:26379/main?{query}")


def test_tls_options_need_a_tls_url(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    with pytest.raises(StoreError, match="need a TLS URL: use rediss://"):
        connect_client(f"redis://127.0.0.1:6379/0?ssl_ca_certs={ca}")
    target = parse_sentinel_url(f"rediss+sentinel://s1:26379/main/0?ssl_ca_certs={ca}")
    assert target.tls and target.tls_files == {"ssl_ca_certs": str(ca)}
