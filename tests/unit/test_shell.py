"""tools.shell: the context of every placeholder, as /bin/sh and bash would read it.

The integration test (tests/integration/test_shell_contexts.py) runs the safe contexts on a
real sshd host; this table pins the scanner's verdict for the many shapes around them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tools.runners.local import LocalRunner
from tools.shell import MAX_COMMAND_BYTES, Context, ShellRefused, ValueRefused, parse

C = Context

VERDICTS: list[tuple[str, list[Context]]] = [
    ("echo {t}", [C.WORD]),
    ('echo "note: {t}"', [C.DOUBLE]),
    ("cat <<EOF\nnote: {t}\nEOF\necho {t}", [C.HEREDOC, C.WORD]),
    ("cat <<-EOF\n\tnote: {t}\n\tEOF", [C.HEREDOC]),
    ("echo a#{t}", [C.WORD]),  # a # inside a word does not start a comment
    ("sh -c 'echo \"$1\"' sh {t}", [C.WORD]),  # a positional argument is data
    ("[[ {t} == x ]] && echo", [C.WORD]),
    ("[ {t} -eq 1 ]", [C.WORD]),  # test/[ never evaluates its operands
    ("export V={t}", [C.WORD]),
    ("printf '%s\\n' {t}", [C.WORD]),
    ("V={t} ./deploy.sh", [C.WORD]),
    ("echo {t} | grep x", [C.WORD]),
    ("cat <<< {t}", [C.WORD]),
    ('echo "$(echo "{t}")"', [C.DOUBLE]),
    ("case {t} in a) echo {t};; esac", [C.WORD, C.WORD]),
    ("for x in {t}; do echo $x {t}; done", [C.WORD, C.WORD]),
    ("if [ -n {t} ]; then echo {t}; fi", [C.WORD, C.WORD]),
    ("echo hi > /tmp/{t}", [C.WORD]),
    ("{vars.app}/bin/run.sh {t}", [C.WORD, C.WORD]),  # the operator's value may
    ("cat <<EOF\n$(echo {t})\nEOF", [C.WORD]),
    ("( echo {t} )", [C.WORD]),  # a subshell is not a word of anything
    ("diff <(cat {t}) f", [C.WORD]),
    ('x=$(cat {t}); echo "$x"', [C.WORD]),
    ("{{ echo {t}; }} > f; echo x | sh", [C.WORD]),  # the group is not in the pipeline
    ("bash ./deploy.sh {t} < input", [C.WORD]),  # a script file: arguments are data
    ("awk -v v={t} '{{print v}}' f", [C.WORD]),
    ("awk '{{print}}' {t}", [C.WORD]),  # after the program: a file name
    ("sed -e 's/a/b/' {t}", [C.WORD]),
    ("python3 -c 'import sys; print(sys.argv[1])' {t}", [C.WORD]),
    ("echo {t} 2>&1 | tee f", [C.WORD]),
    ("./deploy.sh &>/dev/null {t}", [C.WORD]),
    ("echo {t} || sh", [C.WORD]),  # || runs sh after echo, it does not feed it
    ("printf %s {t}", [C.WORD]),  # after the format: an argument
    ("printf -v x %s {t}", [C.WORD]),
]

REFUSED: list[tuple[str, Context]] = [
    ("echo '{t}'", C.SINGLE),
    ("echo $'{t}'", C.SINGLE),
    ("cat <<'EOF'\nnote: {t}\nEOF", C.QUOTED_HEREDOC),
    ('cat <<"EOF"\n{t}\nEOF', C.QUOTED_HEREDOC),
    ("echo hi # {t}", C.COMMENT),
    ("eval echo {t}", C.EVAL),
    ('eval "echo {t}"', C.EVAL),
    ('eval "$(echo {t})"', C.EVAL),
    ("( eval {t} )", C.EVAL),
    ('sh -c "echo {t}"', C.PROGRAM),
    ('bash -lc "x {t}"', C.PROGRAM),
    ("echo $(( {t} + 1 ))", C.ARITHMETIC),
    ("(( {t} > 1 )) && echo", C.ARITHMETIC),
    ("echo $[ {t} ]", C.ARITHMETIC),
    ("let x={t}", C.ARITHMETIC),
    ("cat <<EOF\n$(( {t} ))\nEOF", C.ARITHMETIC),
    ("[[ {t} -eq 1 ]] && echo", C.TEST_ARITHMETIC),
    ("[[ -v {t} ]]", C.TEST_ARITHMETIC),
    ("export {t}", C.NAME),
    ("declare a[{t}]=1", C.NAME),
    ("a[{t}]=1", C.NAME),
    ("read {t}", C.NAME),
    ("printf -v {t} %s 1", C.NAME),
    ("{t} --version", C.COMMAND),
    ("sudo {t}", C.COMMAND),
    ("ssh host echo {t}", C.REMOTE),
    ("watch -n1 ls {t}", C.REMOTE),
    ("echo {t} | sh", C.FED_TO_SHELL),
    ("sh <<EOF\necho {t}\nEOF", C.FED_TO_SHELL),
    ("cat <<EOF | bash\necho {t}\nEOF", C.FED_TO_SHELL),
    ("bash <<< {t}", C.FED_TO_SHELL),
    ("echo ${{x:-{t}}}", C.EXPANSION),
    ("{{ echo {t}; }} | sh", C.FED_TO_SHELL),
    ("( echo {t} ) | bash", C.FED_TO_SHELL),
    ("if true; then echo {t}; fi | sh", C.FED_TO_SHELL),
    ("echo $(echo {t}) | python3", C.FED_TO_SHELL),
    ("$(echo {t})", C.COMMAND),  # its output, split into words, would be the command
    ("sh -c \"$(echo {t})\"", C.PROGRAM),
    ("python3 -c \"print({t})\"", C.PROGRAM),
    ("perl -e \"print {t}\"", C.PROGRAM),
    ("awk \"{{print {t}}}\" f", C.PROGRAM),
    ("sed -i \"s/^V=.*/V={t}/\" .env", C.PROGRAM),  # GNU sed's e flag runs commands
    ("sed -e \"s/a/{t}/\" f", C.PROGRAM),
    ("trap \"echo {t}\" EXIT", C.EVAL),
    ("alias x=\"echo {t}\"", C.EVAL),
    ("echo \"$(cat {t}\"", C.UNREAD),
    ("echo `echo {t}`", C.BACKTICK),
    ("cat <<{t}\nx\n", C.DELIMITER),
    ('echo "{t}', C.UNREAD),
    ("printf {t}", C.FORMAT),
    ("printf -- {t}", C.FORMAT),
    ("printf -v x {t}", C.FORMAT),
    ('printf "$(cat {t})"', C.FORMAT),
    ("test -v {t}", C.NAME),
    ("[ -v {t} ]", C.NAME),
    # an argument of sh -c, used unsafely by the inner script (issue 41.4)
    ("bash -c 'printf \"$1\"' sh {t}", C.INNER),
    ("sh -c 'test -v \"$1\"' sh {t}", C.INNER),
    ("bash -c 'echo $(( $1 + 1 ))' sh {t}", C.INNER),
    ("sh -c 'eval \"$@\"' sh {t}", C.INNER),
    ("sh -c 'echo \"$1\"; eval \"$2\"' sh a {t}", C.INNER),
]

# template → whether each placeholder begins an argument a program may read as an option
LEADING: list[tuple[str, list[bool]]] = [
    ("tar -cf {o}.tar {v} dir", [True, True]),
    ("tar -cf x.tar -- {v}", [False]),
    ('echo "{v}"', [True]),
    ('echo "a{v}"', [False]),
    ("X={v} ./run", [False]),
    ("echo hi > {v}", [False]),
    ("[[ {v} == x ]]", [False]),
    ("case {v} in a) ;; esac", [False]),
    ("sh -c 'tar -cf x.tar \"$1\"' sh {v}", [True]),  # where the inner script puts it
    ("sh -c 'tar -cf x.tar -- \"$1\"' sh {v}", [False]),
    ("sh -c 'echo hi > \"$1\"; cat -- \"$2\"' sh {a} {b}", [False, False]),
    ("sh -c 'echo \"x$1\"; ls \"$2\"' sh {a} {b}", [False, True]),
]


@pytest.mark.parametrize(("template", "contexts"), VERDICTS)
def test_safe_contexts(template: str, contexts: list[Context]) -> None:
    assert [s.context for s in parse(template).slots] == contexts


@pytest.mark.parametrize(("template", "context"), REFUSED)
def test_unsafe_contexts_are_refused_naming_the_context(template: str,
                                                        context: Context) -> None:
    with pytest.raises(ShellRefused) as caught:
        parse(template)
    assert caught.value.refusals[0].context is context
    assert context.value in str(caught.value)


@pytest.mark.parametrize(("template", "leading"), LEADING)
def test_where_a_value_would_begin_an_argument(template: str, leading: list[bool]) -> None:
    assert [s.leading for s in parse(template).slots] == leading


def test_a_value_that_would_be_an_option_is_refused_unless_allowed(tmp_path: Path) -> None:
    """tar -cf x.tar {v} with --use-compress-program=… would run a command (issue 41.4)."""
    marker = tmp_path / "M"
    template = parse(f"cd {tmp_path} && tar -cf x.tar {{v}} 2>/dev/null; true")
    value = f"--use-compress-program=touch {marker}"
    with pytest.raises(ValueRefused, match="starts with '-'.*pattern.*--"):
        template.fill({"v": value})
    allowed = template.fill({"v": "-v"}, options=frozenset({"v"}))
    assert "DH_v='-v'" in allowed.source
    safe = parse(f"cd {tmp_path} && tar -cf x.tar -- {{v}} 2>/dev/null; true")
    assert LocalRunner().run(safe.fill({"v": value}).source, timeout=10).ok
    assert not marker.exists()


def test_a_parameter_declared_code_may_run_in_an_inner_script() -> None:
    """The operator's explicit escape (tests' snippet tools): only ``code: true`` fields."""
    template = "sh -c 'eval \"$1\"' sh {t}"
    with pytest.raises(ShellRefused):
        parse(template)
    slot = parse(template, code=frozenset({"t"})).slots[0]
    assert slot.context is C.WORD
    assert parse(template, code=frozenset({"t"})).fill({"t": "echo hi"}).source.endswith(
        'sh -c \'eval "$1"\' sh "${DH_t}"')


def test_the_refusal_names_the_line() -> None:
    with pytest.raises(ShellRefused, match="on line 3 of the command"):
        parse("set -e\ncat <<'EOF'\n{t}\nEOF")


def test_rendered_values_are_data_for_sh(tmp_path: Path) -> None:
    marker = tmp_path / "M"
    value = f"$(touch {marker}) `touch {marker}` '\"; touch {marker}\nEOF\n\x1b[2J"
    command = parse("cat <<EOF\n{t}\nEOF\nprintf %s {t} \"[{t}]\"").fill({"t": value})
    result = LocalRunner().run(command.source, timeout=10)
    assert result.ok and not marker.exists()
    assert result.tail == f"{value}\n{value}[{value}]"


def test_nul_and_oversized_commands_are_refused() -> None:
    with pytest.raises(ValueRefused, match="NUL"):
        parse("echo {t}").fill({"t": "a\0b"})
    with pytest.raises(ValueRefused, match=str(MAX_COMMAND_BYTES)):
        parse("echo {t}").fill({"t": "x" * MAX_COMMAND_BYTES})


def test_shown_is_readable_and_masks_secrets() -> None:
    command = parse('curl -H "Authorization: {key}" {url}').fill(
        {"key": "s3cret", "url": "https://x/a b"}, secret=frozenset({"key"}))
    assert command.shown() == "curl -H \"Authorization: ***\" 'https://x/a b'"
    assert "s3cret" not in str(command) and "s3cret" in command.source


def test_every_field_gets_its_own_valid_variable(tmp_path: Path) -> None:
    command = parse("printf '%s|' {host.app-dir} {host.app_dir} {host.dé}").fill(
        {"host.app-dir": "a", "host.app_dir": "b", "host.dé": "c"})
    assert LocalRunner().run(command.source, timeout=10).tail == "a|b|c|"


def test_a_check_command_is_held_to_the_same_rules(tmp_path: Path) -> None:
    from agents.config import load_config
    from tools.errors import ConfigError

    path = tmp_path / "deckhand.yml"
    path.write_text(
        "inventory:\n  hosts: {box: {connection: local}}\n"
        "tools:\n"
        "  deploy:\n"
        "    description: d\n"
        "    command: ./deploy.sh {version}\n"
        "    check: |\n"
        "      ./deploy.sh --check {version}\n"
        "      eval \"echo {version}\"\n"
        "    params: {version: {}}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    [problem] = caught.value.problems
    assert problem.where == f"{path}:9 tools.deploy.check"
    assert Context.EVAL.value in problem.message and "line 2 of the command" in problem.message


@settings(max_examples=60, deadline=None)
# lone surrogates (Cs) cannot be sent as UTF-8 at all
@given(st.text(alphabet=st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)),
               max_size=200))
def test_any_text_arrives_byte_exact_in_every_safe_context(value: str) -> None:
    """Whatever the text (quotes, $( ), backticks, newlines, EOF lines, escapes, non-ASCII),
    /bin/sh prints it back unchanged as a word, inside "…" and in a heredoc body."""
    # a leading '-' is admitted here (as a pattern would): printf's operands after the
    # format are never options, and the refusal has tests of its own
    command = parse("printf '%s|' {t} \"<{t}>\"\ncat <<EOF\n{t}\nEOF").fill(
        {"t": value}, options=frozenset({"t"}))
    result = subprocess.run(["/bin/sh", "-c", command.source], capture_output=True,
                            timeout=10, check=False)
    expected = f"{value}|<{value}>|{value}\n".encode("utf-8", "surrogatepass")
    assert (result.returncode, result.stdout) == (0, expected)
