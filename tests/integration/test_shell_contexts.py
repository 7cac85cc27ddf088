"""Issue 29.1: a value never becomes shell code, in any shell context, on a real sshd host.

Hostile values cross every shell context a template can put a placeholder in. Where a
variable reference is safe (a plain word, "…", an unquoted heredoc body, a positional
argument of sh -c, an assignment) each value runs through the real path — plan → executor →
catalog → SSH runner → OpenSSH sshd → /bin/sh — and must arrive byte-exact, with no marker
file created. Where no value is safe ('…', a quoted heredoc, a comment, eval, the script of
sh -c, arithmetic, [[ -eq ]], ssh, a pipe into sh) the template is refused when the config is
loaded (``deckhand check`` included), at file:line with the context named. The same for a
gantz-style tool file. Values that validation refuses (newline, NUL, 1 MB) are also given to
the renderer directly: the border holds without validation.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agents.config import Config, load_config
from agents.plan.model import Plan
from agents.run.executor import Executor, ExecutorDeps
from agents.run.record import RunStatus
from bot.cli import main
from tests.fixtures.sshd import SSHFleet
from tools.errors import ConfigError, ParamError
from tools.runners.pool import RunnerPool
from tools.shell import Context, ValueRefused, parse

HOST = "prod-1"

# context name → (template writing the value to {out}/NAME, what the file then holds)
SAFE_CONTEXTS: dict[str, tuple[str, str]] = {
    "plain": ("printf %s {v} > {out}/{n}", "{}"),
    "double": ('printf %s "v=[{v}]" > {out}/{n}', "v=[{}]"),
    "heredoc": ("cat > {out}/{n} <<EOF\nnote: {v}\nEOF", "note: {}\n"),
    "sh_c_positional": ("sh -c 'printf %s \"$1\" > \"$2\"' sh {v} {out}/{n}", "{}"),
    "assignment": ('V={v}; printf %s "$V" > {out}/{n}', "{}"),
}

# context name → (template, the context the refusal must name)
REFUSED_CONTEXTS: dict[str, tuple[str, Context]] = {
    "single": ("printf %s '{v}'", Context.SINGLE),
    "quoted_heredoc": ("cat <<'EOF'\nnote: {v}\nEOF", Context.QUOTED_HEREDOC),
    "comment": ("true\n# note: {v}", Context.COMMENT),
    "eval": ("eval printf %s {v}", Context.EVAL),
    "sh_c": ('sh -c "printf %s {v}"', Context.PROGRAM),
    "arithmetic": ("echo $(( {v} + 1 ))", Context.ARITHMETIC),
    "arithmetic_command": ("(( {v} > 1 )) || true", Context.ARITHMETIC),
    "double_bracket": ("[[ {v} -eq 1 ]] || true", Context.TEST_ARITHMETIC),
    "ssh": ("ssh backup printf %s {v}", Context.REMOTE),
    "piped_to_sh": ("echo {v} | sh", Context.FED_TO_SHELL),
}


def hostile(marker: Path) -> dict[str, str]:
    """Each value would create ``marker`` if it ever became code."""
    return {
        "command_substitution": f"$(touch {marker})",
        "backticks": f"`touch {marker}`",
        "semicolon": f"x; touch {marker}",
        "quotes": f"'\"; touch {marker}; echo '\"",
        "ifs": f"a$IFS$(touch${{IFS}}{marker})",
        "newline": f"x\ntouch {marker}",
        "heredoc_end": f"EOF\ntouch {marker}\ncat <<EOF",
        "nul": f"x\0$(touch {marker})",
        "megabyte": f"$(touch {marker})" + "x" * 1_000_000,
    }


REFUSED_BY_VALIDATION = {"newline", "heredoc_end", "nul", "megabyte"}


@pytest.fixture
def pool(sshd_hosts: SSHFleet) -> Iterator[RunnerPool]:
    pool = RunnerPool(inventory=sshd_hosts.inventory())
    yield pool
    pool.close()


def _config(tmp_path: Path, fleet: SSHFleet, tools_file: str, tools_text: str) -> Path:
    (tmp_path / tools_file).write_text(tools_text)
    data: dict[str, Any] = {
        "inventory": {"known_hosts": str(fleet.known_hosts),
                      "hosts": {HOST: fleet.inventory_host(HOST)},
                      "groups": {HOST: [HOST]}},
        "tools": tools_file}
    path = tmp_path / "deckhand.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _block(template: str, indent: int = 6) -> str:
    return "|\n" + textwrap.indent(template, " " * indent)


def _tools_yml(contexts: dict[str, str], out: Path) -> str:
    lines = ["tools:"]
    for name, template in contexts.items():
        lines += [f"  {name}:", "    description: writes its value to a file",
                  f"    target: group:{HOST}",
                  "    params: {v: {max_length: 4000}, n: {pattern: '^[a-z_]+$'}}",
                  f"    command: {_block(template.replace('{out}', str(out)))}"]
    return "\n".join(lines) + "\n"


def _gantz_yml(contexts: dict[str, str], out: Path) -> str:
    lines = ["tools:"]
    for name, template in contexts.items():
        shell = template.replace("{out}", str(out)).replace("{v}", "{{v}}")
        lines += [f"  - name: {name}", "    description: writes its value to a file",
                  f"    target: group:{HOST}",
                  "    parameters: [{name: v}, {name: n, pattern: '^[a-z_]+$'}]",
                  "    script:", f"      shell: {_block(shell.replace('{n}', '{{n}}'), 8)}"]
    return "\n".join(lines) + "\n"


def _run_matrix(config: Config, pool: RunnerPool, out: Path, values: dict[str, str]
                ) -> dict[str, str]:
    """Every safe context × every value validation accepts, as one plan over SSH."""
    steps, expected = [], {}
    for context, (_, shape) in SAFE_CONTEXTS.items():
        for kind, value in values.items():
            if kind in REFUSED_BY_VALIDATION:
                continue
            name = f"{context}__{kind}"
            steps.append({"id": name, "tool": context, "params": {"v": value, "n": name}})
            expected[name] = shape.replace("{}", value)
    plan = Plan.model_validate({"goal": "hostile values", "steps": steps})
    deps = ExecutorDeps(config.catalog, config.inventory, pool.for_host, config.vars)
    run = Executor(deps).execute(plan)
    assert run.status is RunStatus.SUCCEEDED, run.reason
    return expected


def _assert_arrived(out: Path, expected: dict[str, str]) -> None:
    for name, content in expected.items():
        assert (out / name).read_bytes() == content.encode(), name


@pytest.mark.parametrize("kind", ["tools.yml", "gantz"])
def test_hostile_values_arrive_byte_exact_in_every_safe_context(
        kind: str, sshd_hosts: SSHFleet, pool: RunnerPool, tmp_path: Path) -> None:
    out, marker = tmp_path / "out", tmp_path / "M"
    out.mkdir()
    templates = {name: t for name, (t, _) in SAFE_CONTEXTS.items()}
    text = _tools_yml(templates, out) if kind == "tools.yml" else _gantz_yml(templates, out)
    config = load_config(_config(tmp_path, sshd_hosts, "tools.yml", text))
    values = hostile(marker)
    expected = _run_matrix(config, pool, out, values)
    _assert_arrived(out, expected)
    assert len(expected) == len(SAFE_CONTEXTS) * (len(values) - len(REFUSED_BY_VALIDATION))
    assert not marker.exists()


def test_values_validation_refuses_still_cannot_become_code(
        sshd_hosts: SSHFleet, pool: RunnerPool, tmp_path: Path) -> None:
    """Validation refuses control characters and overlong values first; the renderer on its
    own delivers a newline byte-exact, and refuses NUL and 1 MB with a clear reason."""
    out, marker = tmp_path / "out", tmp_path / "M"
    out.mkdir()
    templates = {name: t for name, (t, _) in SAFE_CONTEXTS.items()}
    config = load_config(_config(tmp_path, sshd_hosts, "tools.yml", _tools_yml(templates, out)))
    runner = pool.for_host(config.inventory.hosts[HOST])
    values = hostile(marker)
    for context, (template, shape) in SAFE_CONTEXTS.items():
        tool = config.catalog.get(context)
        for kind in sorted(REFUSED_BY_VALIDATION):
            with pytest.raises(ParamError, match="control characters|longer than"):
                config.catalog.render(tool, {"v": values[kind], "n": "x"}, host_vars={},
                                      config_vars={})
            direct = parse(template.replace("{out}", str(out)))
            name = f"{context}__{kind}"
            if kind in ("nul", "megabyte"):
                with pytest.raises(ValueRefused, match="NUL byte|over the"):
                    direct.fill({"v": values[kind], "n": name})
                continue
            result = runner.run(direct.fill({"v": values[kind], "n": name}).source, timeout=30)
            assert result.ok, result.tail
            assert (out / name).read_bytes() == shape.replace("{}", values[kind]).encode()
    assert not marker.exists()


def _refusal_lines(text: str, names: list[str], shell_key: str) -> dict[str, int]:
    """The file line of the ``{v}`` placeholder of each tool, counted from the text."""
    lines = text.splitlines()
    found = {}
    for name in names:
        start = next(i for i, line in enumerate(lines) if name in line.split(":")[-1]
                     or line.strip() in (f"{name}:", f"- name: {name}"))
        key = next(i for i in range(start, len(lines)) if f"{shell_key}: |" in lines[i])
        found[name] = next(i for i in range(key, len(lines)) if "{v}" in lines[i]) + 1
    return found


@pytest.mark.parametrize("kind", ["tools.yml", "gantz"])
def test_unsafe_contexts_are_refused_at_load_and_check_with_file_line_and_context(
        kind: str, sshd_hosts: SSHFleet, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    templates = {name: t for name, (t, _) in REFUSED_CONTEXTS.items()}
    text = (_tools_yml(templates, tmp_path) if kind == "tools.yml"
            else _gantz_yml(templates, tmp_path))
    path = _config(tmp_path, sshd_hosts, "tools.yml", text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    problems = caught.value.problems
    lines = _refusal_lines(text, list(REFUSED_CONTEXTS), "command" if kind == "tools.yml"
                           else "shell")
    for index, (name, (_, context)) in enumerate(REFUSED_CONTEXTS.items()):
        key = f"tools.{name}.command" if kind == "tools.yml" else f"tools.{index}.script.shell"
        mine = [p for p in problems if p.where.endswith(key)]
        assert len(mine) == 1, (name, problems)
        assert mine[0].where.startswith(f"{tmp_path / 'tools.yml'}:{lines[name]} "), \
            (name, mine[0].where, lines[name])
        assert context.value in mine[0].message, (name, mine[0].message)
    assert main(["check", str(path)]) == 2
    printed = capsys.readouterr().out
    assert f"tools.yml:{lines['quoted_heredoc']}" in printed and "quoted heredoc" in printed


def test_a_hostile_step_output_is_data_in_the_next_steps_heredoc(
        sshd_hosts: SSHFleet, pool: RunnerPool, tmp_path: Path) -> None:
    """A host prints `$(touch M)`; the next step gets it as ${steps.emit.value} inside an
    unquoted heredoc (the issue's `note` tool) and writes it out unchanged."""
    out, marker = tmp_path / "out", tmp_path / "M"
    out.mkdir()
    payload = f"$(touch {marker}) `touch {marker}` '\"; touch {marker}"
    tools = {
        "emit": {"description": "prints a value a host chose",
                 "command": "printf 'value=%s\\n' {v}", "target": f"group:{HOST}",
                 "params": {"v": {"max_length": 4000}}, "outputs": {"value": "^value=(.*)$"}},
        "note": {"description": "writes a note", "target": f"group:{HOST}",
                 "command": f"cat > {out}/note <<EOF\nnote: {{text}}\nEOF",
                 "params": {"text": {"max_length": 1000}}, "approval": "none"},
    }
    config = load_config(_config(tmp_path, sshd_hosts, "tools.yml",
                                 yaml.safe_dump({"tools": tools})))
    plan = Plan.model_validate({"goal": "relay", "steps": [
        {"id": "emit", "tool": "emit", "params": {"v": payload}},
        {"id": "note", "tool": "note", "depends_on": ["emit"],
         "params": {"text": "${steps.emit.value}"}}]})
    deps = ExecutorDeps(config.catalog, config.inventory, pool.for_host, config.vars)
    run = Executor(deps).execute(plan)
    assert run.status is RunStatus.SUCCEEDED, run.reason
    assert run.steps["emit"].outputs == {"value": payload}
    assert (out / "note").read_bytes() == f"note: {payload}\n".encode()
    assert not marker.exists()


ISSUE_CONFIG = """
inventory:
  hosts: {box: {connection: local}}
tools:
  note:
    description: print a note
    command: |
      cat <<EOF
      note: {text}
      EOF
    params: {text: {max_length: 200}}
    approval: none
playbooks:
  - name: note
    description: print a note
    match: ['^note (?P<text>.+)$']
    examples: ["note hello"]
    goal: "Note"
    steps: [{id: note, tool: note, params: {text: "{text}"}}]
"""


def test_the_issue_reproduction_through_deckhand_run(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    """`deckhand run 'note $(touch pwned)' --yes` with the issue's read-only heredoc tool."""
    path = tmp_path / "deckhand.yml"
    path.write_text(textwrap.dedent(ISSUE_CONFIG))
    marker = tmp_path / "pwned"
    for attack in (f"$(touch {marker})", f"`touch {marker}`"):
        assert main(["run", f"note {attack}", "--yes", "--config", str(path)]) == 0
        printed = "".join(capsys.readouterr().out.split())  # rich wraps long lines
        assert "".join(f"note: {attack}".split()) in printed
    assert not marker.exists()


def test_the_largest_quote_heavy_value_fits_one_ssh_command(
        sshd_hosts: SSHFleet, pool: RunnerPool, tmp_path: Path) -> None:
    """4000 single quotes (max_length's ceiling) grow ~5x through two layers of quoting;
    they still fit the 128 KiB argument sshd's shell gets, and arrive byte-exact."""
    out = tmp_path / "out"
    out.mkdir()
    template = SAFE_CONTEXTS["heredoc"][0].replace("{out}", str(out))
    value = "'" * 4000
    command = parse(template).fill({"v": value, "n": "quotes"})
    runner = pool.for_host(sshd_hosts.inventory().hosts[HOST])
    assert runner.run(command.source, timeout=30).ok
    assert (out / "quotes").read_text() == f"note: {value}\n"


# Issue 41.4: a value must not become an option, nor code inside the program it is given to.
# tool name → template; {v} begins an argument of a program that reads options.
OPTION_POSITIONS: dict[str, str] = {
    "tar": "cd {out} && tar -cf {n}.tar {v} 2>/dev/null; true",
    "tar_after_name": "cd {out} && tar -cf {v}.tar {n} 2>/dev/null; true",
    "find": "find {out} -name {v} 2>/dev/null; true",
    "sort": "sort {v} /dev/null 2>/dev/null; true",
    "git": "git -C {out} log {v} 2>/dev/null; true",
    "quoted": 'cd {out} && tar -cf {n}.tar "{v}" 2>/dev/null; true',
    "inner_tar": "sh -c 'cd \"$2\" && tar -cf x.tar \"$1\" 2>/dev/null; true' sh {v} {out}",
    "inner_printf_arg": "bash -c 'printf %s \"$1\" > \"$2\"' sh {v} {out}/{n}",
}
# Where the value may start with '-': after `--`, it is an operand and arrives as it is.
AFTER_DASHDASH = "set -- {v}; printf %s \"$1\" > {out}/{n}"
# Inner scripts that read a positional parameter as a format, a name or an expression.
INNER_UNSAFE: dict[str, str] = {
    "printf_format": "bash -c 'printf \"$1\"' sh {v}",
    "test_v": "bash -c 'test -v \"$1\" || true' sh {v}",
    "bracket_v": "bash -c '[ -v \"$1\" ] || true' sh {v}",
    "arithmetic": "bash -c 'echo $(( $1 + 1 ))' sh {v}",
    "declare": "bash -c 'declare \"$1\"=1' sh {v}",
    "eval_all": "sh -c 'eval \"$@\"' sh {v}",
}


def option_values(marker: Path) -> dict[str, str]:
    """Each value would create ``marker`` (or read a file) if a program took it as an
    option or as an expression."""
    return {
        "compress_program": f"--use-compress-program=touch {marker}",
        "checkpoint_exec": f"--checkpoint=1 --checkpoint-action=exec=touch {marker}",
        "to_command": f"--to-command=touch {marker}",
        "printf_v": f"-va[$(touch {marker})]",
        "subscript": f"a[$(touch {marker})]",
        "find_exec": "-newer",
        "sort_compress": f"--compress-program=touch {marker}",
        "git_output": f"--output={marker}",
    }


def test_values_never_become_options_or_inner_code_over_ssh(
        sshd_hosts: SSHFleet, pool: RunnerPool, tmp_path: Path) -> None:
    """Every hostile and option-like value × every argument position: a value that would
    begin an argument with '-' is refused before anything runs; everything else runs over
    SSH; after `--` every value arrives byte-exact; no marker file appears."""
    out, marker = tmp_path / "out", tmp_path / "M"
    out.mkdir()
    templates = {**OPTION_POSITIONS, "after_dashdash": AFTER_DASHDASH}
    config = load_config(_config(tmp_path, sshd_hosts, "tools.yml",
                                 _tools_yml(templates, out)))
    values = {**hostile(marker), **option_values(marker)}
    steps, refused = [], 0
    for tool_name in templates:
        tool = config.catalog.get(tool_name)
        for kind, value in values.items():
            if kind in REFUSED_BY_VALIDATION:
                continue
            name = f"{tool_name}__{kind}"
            problems = config.catalog.param_problems(tool, {"v": value, "n": name})
            if value.startswith("-") and tool_name != "after_dashdash":
                assert problems and "starts with '-'" in problems[0], (name, problems)
                with pytest.raises(ValueRefused, match="starts with '-'"):
                    parse(tool.command or "").fill({"v": value, "n": name, "out": str(out)})
                refused += 1
                continue
            assert problems == [], (name, problems)
            steps.append({"id": name, "tool": tool_name, "params": {"v": value, "n": name}})
    deps = ExecutorDeps(config.catalog, config.inventory, pool.for_host, config.vars)
    for start in range(0, len(steps), 40):  # a plan holds at most 60 steps
        plan = Plan.model_validate({"goal": "option values", "steps": steps[start:start + 40]})
        run = Executor(deps).execute(plan)
        assert run.status is RunStatus.SUCCEEDED, run.reason
    for kind, value in values.items():
        if kind not in REFUSED_BY_VALIDATION:
            assert (out / f"after_dashdash__{kind}").read_text() == value, kind
    assert refused == len(OPTION_POSITIONS) * sum(
        v.startswith("-") for v in option_values(marker).values())
    assert not marker.exists()


def test_inner_scripts_that_read_an_argument_as_code_are_refused_at_load(
        sshd_hosts: SSHFleet, tmp_path: Path) -> None:
    text = _tools_yml(INNER_UNSAFE, tmp_path)
    with pytest.raises(ConfigError) as caught:
        load_config(_config(tmp_path, sshd_hosts, "tools.yml", text))
    for name in INNER_UNSAFE:
        mine = [p for p in caught.value.problems if p.where.endswith(f"tools.{name}.command")]
        assert len(mine) == 1 and Context.INNER.value in mine[0].message, (name, mine)


def test_a_pattern_lets_the_operator_admit_option_values(
        sshd_hosts: SSHFleet, tmp_path: Path) -> None:
    tools = {"compress": {"description": "tar with a chosen flag", "target": f"group:{HOST}",
                          "command": "tar {flag} -cf x.tar .",
                          "params": {"flag": {"pattern": "^-[zj]$"}}}}
    config = load_config(_config(tmp_path, sshd_hosts, "tools.yml",
                                 yaml.safe_dump({"tools": tools})))
    tool = config.catalog.get("compress")
    assert config.catalog.param_problems(tool, {"flag": "-z"}) == []
    assert "does not match" in config.catalog.param_problems(
        tool, {"flag": "--use-compress-program=x"})[0]
