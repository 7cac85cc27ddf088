"""What a container needs from the settings (issue 34.3, 34.5): state apart from a read-only
config, secrets from files, JSON for every line, pictures that say when they are off."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import generate_latest

from agents.config import load_config
from agents.errors import SettingsInvalid
from agents.settings import Settings
from bot import charts
from bot.cli import main
from bot.logs import HANDLER_NAME, configure_logging
from bot.metrics import Metrics
from bot.slack.timeline_upload import TimelineUploader
from tests.fixtures.sample import copy_examples


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("DECKHAND_STATE_DIR", "REDIS_URL", "SLACK_BOT_TOKEN", "SLACK_BOT_TOKEN_FILE",
                 "REDIS_URL_FILE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_state_goes_to_the_state_dir_not_next_to_the_config(
        tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    path = copy_examples(tmp_path / "config")
    default = load_config(path)
    assert default.state_dir == path.parent / ".deckhand" and default.uses_state_dir
    assert default.vars["artifacts"] == str(path.parent / ".deckhand" / "artifacts")

    path.write_text(path.read_text() + "\nstate_dir: ../state\n")
    relative = load_config(path)
    assert relative.state_dir == path.parent / "../state"

    clean_env.setenv("DECKHAND_STATE_DIR", str(tmp_path / "volume"))
    config = load_config(path)  # the environment wins: the image sets it to its volume
    assert config.state_dir == tmp_path / "volume"
    assert config.vars["artifacts"] == str(tmp_path / "volume" / "artifacts")
    assert config.inventory.hosts["prod-1"].vars["dir"] == str(tmp_path / "volume/hosts/prod-1")
    assert config.vars["app"] == str(path.parent / "app")  # code stays with the config


def test_init_template_writes_only_under_the_state_dir(
        tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    assert main(["init", str(tmp_path / "team")]) == 0
    text = (tmp_path / "team" / "deckhand.yml").read_text()
    assert "{config_dir}/.deckhand" not in text and "{state_dir}/" in text
    clean_env.setenv("DECKHAND_STATE_DIR", str(tmp_path / "state"))
    config = load_config(tmp_path / "team" / "deckhand.yml")
    dirs = [h.vars["dir"] for h in config.inventory.hosts.values()]
    assert dirs and all(d.startswith(str(tmp_path / "state")) for d in dirs)


def test_check_says_where_state_goes_and_fails_when_it_cannot_be_written(
        tmp_path: Path, clean_env: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = copy_examples(tmp_path / "config")
    clean_env.setenv("DECKHAND_STATE_DIR", str(tmp_path / "state"))
    assert main(["check", str(path)]) == 0
    assert f"state: {tmp_path / 'state'} (writable)" in capsys.readouterr().out
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    clean_env.setenv("DECKHAND_STATE_DIR", str(blocker / "state"))  # like a read-only mount
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"error: state directory {blocker / 'state'} is not writable" in out
    assert "DECKHAND_STATE_DIR" in out


def test_secrets_come_from_files_as_well(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    token = tmp_path / "token"
    token.write_text("xoxb-from-a-file\n")  # `echo` adds a newline: dropped
    clean_env.setenv("SLACK_BOT_TOKEN_FILE", str(token))
    settings = Settings()
    assert settings.slack_bot_token is not None
    assert settings.slack_bot_token.get_secret_value() == "xoxb-from-a-file"
    assert "xoxb-from-a-file" in settings.secret_values()  # redacted like any secret

    clean_env.setenv("SLACK_BOT_TOKEN", "xoxb-env")
    with pytest.raises(SettingsInvalid, match="SLACK_BOT_TOKEN and SLACK_BOT_TOKEN_FILE are "
                                              "both set"):
        Settings()
    clean_env.delenv("SLACK_BOT_TOKEN")
    clean_env.setenv("REDIS_URL_FILE", str(tmp_path / "missing"))
    with pytest.raises(SettingsInvalid, match=r"REDIS_URL_FILE: cannot read .*missing"):
        Settings()
    (tmp_path / "empty").write_text("\n")
    clean_env.setenv("REDIS_URL_FILE", str(tmp_path / "empty"))
    with pytest.raises(SettingsInvalid, match="REDIS_URL_FILE: .*empty is empty"):
        Settings()


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    configure_logging("json", stream=stream)
    yield stream
    root = logging.getLogger()
    for handler in [h for h in root.handlers if h.get_name() == HANDLER_NAME]:
        root.removeHandler(handler)


def test_a_fatal_error_is_a_json_line_under_json_logging(
        json_lines: io.StringIO, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "--config", str(tmp_path / "nowhere.yml")]) == 2
    assert capsys.readouterr().out == ""  # nothing plain on stdout
    lines = [json.loads(line) for line in json_lines.getvalue().splitlines()]
    assert lines and lines[-1]["level"] == "error" and "nowhere.yml" in lines[-1]["message"]


def test_without_matplotlib_each_picture_says_it_is_off(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert charts.missing() is None  # the dev install has it
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    assert "pip install 'deckhand[charts]'" in (charts.missing() or "")
    with pytest.raises(charts.ChartsUnavailable, match="--timeline needs a picture"):
        charts.require("--timeline")
    assert main(["check", str(copy_examples(tmp_path / "c"))]) == 0
    assert "note: pictures off (Slack timeline" in capsys.readouterr().out
    uploader = TimelineUploader(None, plans=None, channel="C1",  # type: ignore[arg-type]
                                thread_ts="1.2")
    assert uploader.upload(SimpleNamespace(id="r-1")) is None  # type: ignore[arg-type]
    metrics = Metrics()
    metrics.timeline_uploaded(None)
    exposition = generate_latest(metrics.registry).decode()
    assert 'deckhand_timeline_uploads_total{result="unavailable"} 1.0' in exposition
