"""The first commands a new user types: --version, help, config discovery, init, completion."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.cli import main


@pytest.fixture
def empty_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DECKHAND_CONFIG", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    return tmp_path


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("deckhand ")


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["init", "--help"],
                                  ["runs", "--help"], ["completion", "--help"],
                                  ["eval", "--help"]])
def test_help_has_examples(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "deckhand " in out.split("examples:")[1]


def test_no_config_says_where_it_looked(empty_dir: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "deploy v1.0.0"]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "--config not given" in out and "$DECKHAND_CONFIG not set" in out
    assert f"{empty_dir / 'deckhand.yml'} no such file" in out and "deckhand init" in out


def test_init_writes_a_working_config_and_names_next_commands(
        empty_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init"]) == 0
    out = capsys.readouterr().out
    assert 'deckhand run "deploy v1.0.0"' in out and out.count("deckhand ") >= 3
    text = (empty_dir / "deckhand.yml").read_text()
    assert "connection: ssh" in text and text.count("# ") > 20  # commented, SSH example
    assert main(["check", "deckhand.yml"]) == 0
    assert main(["check"]) == 0  # found as ./deckhand.yml
    assert main(["run", "deploy v1.0.0", "--yes"]) == 0
    assert (empty_dir / ".deckhand/hosts/prod-2/current").read_text().strip() == "v1.0.0"
    assert main(["init"]) == 1  # never overwrites silently


@pytest.mark.parametrize("request_", [
    "deploy v1.0.0", "ship v1.0.0 to production", "deploy v1.0.0 to staging only",
    "ship v1.0.0 to staging", "roll back production",
    "revert staging to the previous release", "what's running in production?",
    "status of production", "DEPLOY V1.0.0"])
def test_init_playbooks_understand_phrasings(request_: str, empty_dir: Path) -> None:
    assert main(["init"]) == 0
    assert main(["plan", request_, "--format", "yaml"]) == 0


def test_config_from_environment_and_subdirectory(
        empty_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["init", "ops"]) == 0
    sub = empty_dir / "elsewhere"
    sub.mkdir()
    monkeypatch.chdir(sub)
    monkeypatch.setenv("DECKHAND_CONFIG", str(empty_dir / "ops" / "deckhand.yml"))
    assert main(["plan", "deploy v1.0.0"]) == 0


@pytest.mark.parametrize("argv", [["runs"], ["audit"], ["cancel", "run-x"],
                                  ["approve", "run-x"]])
def test_embedded_store_is_explained(argv: list[str], empty_dir: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    main(["init"])
    capsys.readouterr()
    main(argv)
    err = " ".join(capsys.readouterr().err.split())
    assert "lives only for this one process" in err and "REDIS_URL=redis://" in err


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_script(shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", shell]) == 0
    out = capsys.readouterr().out
    assert "deckhand" in out and "init" in out and "--config" in out


def test_readme_starts_with_venv_and_explains_test_prerequisites_first() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    first_block = readme.split("```sh\n", 1)[1].split("```", 1)[0]
    assert "python3 -m venv" in first_block and "pip install" in first_block
    assert first_block.index("venv") < first_block.index("pip install")
    test_command = readme.index("python3 -m pytest -q")
    assert readme.index("redis-server") < test_command and readme.index("sshd") < test_command
    troubles = readme.split("### Troubleshooting", 1)[1].split("\n## ", 1)[0]
    assert troubles.count("\n* **") == 5


def test_each_command_loads_only_the_module_that_registers_it() -> None:
    """Issue 43.7: `deckhand runs` imports bot.cli.runs, not eval, mcp or schedules — and the
    table that says so names the module that really registers each command."""
    import argparse

    from bot.cli import CORE, EXTRA, _extra_commands, build_parser

    registered = {}
    for register in _extra_commands():
        parser = argparse.ArgumentParser()
        commands = parser.add_subparsers()
        register(commands)
        registered.update(dict.fromkeys(commands.choices, register.__module__))
    assert {word: f"bot.cli.{module}" for word, module in EXTRA.items()} == {
        word: module for word, module in registered.items() if word != "completion"}
    for word in [*EXTRA, *CORE]:
        sub = next(a for a in build_parser(word)._actions
                   if isinstance(a, argparse._SubParsersAction))
        assert word in sub.choices
    assert {"runs", "eval", "mcp", "completion"} <= set(next(
        a for a in build_parser("completion")._actions
        if isinstance(a, argparse._SubParsersAction)).choices)
