"""Shell commands as a type: a template parsed once, values delivered as data.

A tool's command template (``cat <<EOF\\nnote: {text}\\nEOF``) is read once by a small
POSIX/bash scanner that knows, for every ``{placeholder}``, the shell context it stands in.
Values never enter shell source: the rendered command starts with one assignment per value
from a single-quoted literal (``DH_text='…'``) and each placeholder becomes a reference,
``"${DH_text}"`` in a plain word, ``${DH_text}`` where double quotes are already open or in an
unquoted heredoc body. A parameter expansion's result is never parsed again as code, so this
holds in every context where a reference is expanded once (GitHub Actions' hardening rule).

Where even a reference is unsafe or wrong the template is refused, with the line and the
context named: single quotes and quoted heredocs (never expanded: the value would not
arrive), comments (inert: a placeholder there is never used, so it is a mistake), eval,
``sh -c``/``bash -c`` scripts, ssh/su/watch command lines and text piped or fed to a shell
(re-parsed as code), arithmetic (``$(( ))``, ``(( ))``, ``let``, ``$[ ]``, ``[[ x -eq y ]]``:
bash evaluates a variable's contents as an expression, ``a[$(cmd)]`` included), variable
names (``declare``/``export``/``read``/``unset``/``printf -v``/``a[…]=``), ``${…}``, backticks,
heredoc delimiters and the command name itself (the value would choose the program).

bashlex is not used: it raises NotImplementedError on arithmetic expansion and arithmetic
commands, which are exactly contexts this scanner must find.
"""

from __future__ import annotations

import re
import shlex
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache

MAX_COMMAND_BYTES = 24 * 1024
"""A rendered command larger than this is refused. sshd runs it as one ``sh -c`` argument
(Linux caps one argument at 128 KiB) after deckhand's own wrapper quotes it again, which can
grow a quote-heavy value ~4x; large data belongs in a file or artifact, not a command line."""

_MARK = "\ue000"
"""Stands in for a placeholder while the template is scanned (refused in templates)."""


class Context(StrEnum):
    """Where a placeholder stands. The first three are safe for a reference."""

    WORD = "in an unquoted word"
    DOUBLE = 'inside "…" double quotes'
    HEREDOC = "in an unquoted heredoc body"
    SINGLE = "inside '…' single quotes"
    QUOTED_HEREDOC = "in a quoted heredoc body (<<'EOF')"
    COMMENT = "in a comment"
    EVAL = "in an argument of eval"
    SHELL_C = "in the script of sh -c / bash -c"
    REMOTE = "in an ssh / su / watch command line"
    FED_TO_SHELL = "in text piped or fed to a shell"
    ARITHMETIC = "in arithmetic ($(( )), (( )), $[ ], let)"
    TEST_ARITHMETIC = "in a [[ … -eq / -lt / -v … ]] test"
    NAME = "in a variable name or array subscript (declare, export, read, unset, printf -v, a[…]=)"
    EXPANSION = "inside ${…}"
    BACKTICK = "inside `…` backticks"
    COMMAND = "as the command name"
    DELIMITER = "in a heredoc delimiter"
    UNREAD = "in an unterminated quote or construct"


SAFE = {Context.WORD, Context.DOUBLE, Context.HEREDOC}

_WHY = {
    Context.SINGLE: "single quotes are never expanded, so the value would not arrive; "
                    "drop the quotes (deckhand quotes it)",
    Context.QUOTED_HEREDOC: "a quoted heredoc is never expanded, so the value would not "
                            "arrive; use an unquoted delimiter (<<EOF)",
    Context.COMMENT: "a comment is never run, so the value would never be used; remove it",
    Context.EVAL: "eval parses the value again as shell code",
    Context.SHELL_C: "the inner shell parses the value again as code; pass it as a "
                     "positional argument instead: sh -c '… \"$1\"' sh {x}",
    Context.REMOTE: "the remote or inner shell parses the whole command line again",
    Context.FED_TO_SHELL: "the shell reading it runs the value as code",
    Context.ARITHMETIC: "bash evaluates a variable's contents as an expression "
                        "(a[$(cmd)] runs cmd)",
    Context.TEST_ARITHMETIC: "bash evaluates the operands of -eq/-lt/-v as expressions "
                             "(a[$(cmd)] runs cmd); use [ … -eq … ] instead",
    Context.NAME: "a variable name's subscript is evaluated as an expression "
                  "(a[$(cmd)] runs cmd)",
    Context.EXPANSION: "inside ${…} a value is a pattern or a name, not data",
    Context.BACKTICK: "backticks re-read backslashes and quotes; use $(…)",
    Context.COMMAND: "the value would choose the program that runs",
    Context.DELIMITER: "a delimiter must be literal",
    Context.UNREAD: "close the quote, heredoc, $( or ${ it is in",
}

_SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "busybox"}
_REMOTE = {"ssh", "su", "runuser", "watch"}
_DECLARE = {"declare", "typeset", "local", "export", "readonly"}
_NAMES = {"read", "unset", "mapfile", "readarray", "getopts"}
_PREFIXES = {"sudo", "env", "nohup", "exec", "command", "builtin", "nice", "time", "xargs",
             "stdbuf", "setsid", "doas", "chroot"}
_RESERVED = {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "for", "in",
             "!", "{", "}", "case", "esac", "function", "select"}
_TEST_ARITH = {"-eq", "-ne", "-lt", "-le", "-gt", "-ge", "-v", "-R"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
_SUBSCRIPT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\[")
_SHELL_C_FLAG = re.compile(r"^-[A-Za-z]*c[A-Za-z]*$")


@dataclass(frozen=True)
class Refusal:
    """One placeholder in a context where a value must not go."""

    field: str
    line: int
    """1-based line within the template."""
    context: Context

    def __str__(self) -> str:
        return self.describe("command")

    def describe(self, text: str) -> str:
        """Say what is wrong; ``text`` names what the line counts in (command, script)."""
        return (f"{{{self.field}}} on line {self.line} of the {text} stands "
                f"{self.context.value}: {_WHY[self.context]}")


class ShellRefused(ValueError):
    """A template puts placeholders where no value is safe (every such place listed)."""

    def __init__(self, refusals: list[Refusal]):
        self.refusals = refusals
        super().__init__("; ".join(map(str, refusals)))


def refusals_in(exc: Exception) -> list[tuple[tuple[str | int, ...], Refusal]]:
    """(field path, refusal) for every ShellRefused inside a pydantic ValidationError."""
    errors = getattr(exc, "errors", None)
    found = []
    for err in errors() if callable(errors) else []:
        inner = (err.get("ctx") or {}).get("error")
        if isinstance(inner, ShellRefused):
            found += [(tuple(err["loc"]), r) for r in inner.refusals]
    return found


class ValueRefused(ValueError):
    """A value no shell can carry (a NUL byte), or a command too large to send."""


@dataclass(frozen=True)
class Slot:
    field: str
    variable: str
    context: Context


@dataclass(frozen=True)
class ShellTemplate:
    """A parsed command template: literal shell text between placeholder slots."""

    literals: tuple[str, ...]
    slots: tuple[Slot, ...]

    @property
    def fields(self) -> list[str]:
        return list(dict.fromkeys(s.field for s in self.slots))

    def fill(self, values: Mapping[str, object], *, secret: frozenset[str] = frozenset()
             ) -> ShellCommand:
        """The command with ``values`` (by field name) delivered as variables."""
        assigned: dict[str, str] = {}
        for slot in self.slots:
            text = _text(values[slot.field])
            if "\0" in text:
                raise ValueRefused(f"{{{slot.field}}} contains a NUL byte, which no shell "
                                   f"can carry")
            assigned[slot.variable] = text
        hidden = frozenset(s.variable for s in self.slots if s.field in secret)
        command = ShellCommand(self, tuple(assigned.items()), hidden)
        size = len(command.source.encode("utf-8", "surrogatepass"))
        if size > MAX_COMMAND_BYTES:
            raise ValueRefused(f"the command would be {size} bytes, over the "
                               f"{MAX_COMMAND_BYTES}-byte limit for one SSH command; pass "
                               f"large data as a file or artifact instead")
        return command


@dataclass(frozen=True)
class ShellCommand:
    """What a shell runs: assignments from quoted literals, then the template's body."""

    template: ShellTemplate
    assignments: tuple[tuple[str, str], ...]
    """(variable, value) for every value, in the order they are assigned."""
    secret: frozenset[str] = field(default_factory=frozenset)
    """Variables whose values ``shown`` masks."""

    @property
    def source(self) -> str:
        """The exact text handed to the shell."""
        prelude = "".join(f"{name}={_single(value)}\n" for name, value in self.assignments)
        return prelude + self._body(_reference)

    def shown(self, mask: str = "***") -> str:
        """For people: the template with each value in place (quoted where the template
        left it unquoted), secrets masked. Never run this text: it is for reading."""
        values = {name: mask if name in self.secret else value
                  for name, value in self.assignments}

        def inline(slot: Slot) -> str:
            value = values[slot.variable]
            return shlex.quote(value) if slot.context is Context.WORD else value
        return self._body(inline)

    def _body(self, piece: Callable[[Slot], str]) -> str:
        slots: list[Slot | None] = [*self.template.slots, None]
        return "".join(lit + (piece(s) if s else "")
                       for lit, s in zip(self.template.literals, slots, strict=True))

    def __str__(self) -> str:
        return self.shown()


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _single(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def _reference(slot: Slot) -> str:
    if slot.context is Context.WORD:
        return f'"${{{slot.variable}}}"'
    return f"${{{slot.variable}}}"


def variable_for(field_name: str) -> str:
    """``version`` → ``DH_version``; ``host.dir`` → ``DH_HOST_dir``; ``vars.x`` → ``DH_VAR_x``."""
    scope, _, key = field_name.partition(".")
    if key:
        prefix = {"host": "DH_HOST_", "vars": "DH_VAR_"}.get(scope, f"DH_{scope.upper()}_")
        return prefix + re.sub(r"\W", "_", key)
    return "DH_" + re.sub(r"\W", "_", field_name)


@lru_cache(maxsize=2048)
def parse(template: str) -> ShellTemplate:
    """Parse ``template`` (``str.format`` syntax); ShellRefused lists every unsafe slot."""
    literals: list[str] = []
    fields: list[str] = []
    pending = ""
    for literal, name, _, _ in string.Formatter().parse(template):
        pending += literal
        if name is not None:
            literals.append(pending)
            fields.append(name)
            pending = ""
    literals.append(pending)
    if any(_MARK in lit for lit in literals):
        raise ValueRefused("the command contains U+E000, which deckhand reserves")
    source = _MARK.join(literals)
    contexts = _Scanner(source).contexts()
    slots = tuple(Slot(f, variable_for(f), _operator_may_choose(f, contexts[i]))
                  for i, f in enumerate(fields))
    refused = [Refusal(s.field, source[:_nth_mark(source, i)].count("\n") + 1, s.context)
               for i, s in enumerate(slots) if s.context not in SAFE]
    if refused:
        raise ShellRefused(refused)
    return ShellTemplate(tuple(literals), slots)


def _operator_may_choose(field_name: str, context: Context) -> Context:
    """``{vars.app}/bin/x`` may choose the program: the operator wrote that value. A plan's
    parameter (or a step output) may not."""
    return Context.WORD if context is Context.COMMAND and "." in field_name else context


def _nth_mark(source: str, n: int) -> int:
    index = -1
    for _ in range(n + 1):
        index = source.index(_MARK, index + 1)
    return index


@dataclass(frozen=True)
class _Heredoc:
    delimiter: str
    quoted: bool
    strip: bool
    owner: list[str]
    """The words of the command whose input it is."""


@dataclass
class _Simple:
    """The simple command being read: its words so far and what they imply."""

    words: list[str] = field(default_factory=list)
    word: str = ""
    in_word: bool = False
    redirect: bool = False
    """The word being read is a redirection target, not an argument."""
    dbracket: bool = False
    dbracket_marks: list[int] = field(default_factory=list)
    dbracket_arith: bool = False
    pipe_marks: list[int] = field(default_factory=list)
    """Marks in the pipeline so far: refused if it flows into a shell."""
    piped: bool = False
    herestring: bool = False
    """The word being read follows ``<<<``: data for the command's input."""
    case_subject: bool = False
    line_fed: bool = False
    """A pipeline on this line flows into a shell: this line's heredocs are fed to it."""


class _Scanner:
    """One pass over the template: every mark (placeholder) gets its context."""

    def __init__(self, source: str):
        self.src = source
        self.marks = [i for i, c in enumerate(source) if c == _MARK]
        self.found: dict[int, Context] = {}
        self.commands: list[_Simple] = []
        """Enclosing simple commands, outermost first ($( ) nests a new one)."""
        self.current_mark = -1
        self.fed_heredoc = False
        """The heredoc body being read goes to a shell (``sh <<EOF``, ``cat <<EOF | sh``)."""

    def contexts(self) -> list[Context]:
        self.command_list(0, closer=None)
        # a mark the scan never reached (unterminated construct) is refused, fail closed
        return [self.found.get(m, Context.UNREAD) for m in self.marks]

    def mark(self, index: int, context: Context) -> None:
        if index in self.found and self.found[index] not in SAFE:
            return  # a stricter verdict already stands
        self.found[index] = context

    # -- command lists -------------------------------------------------------------------

    def command_list(self, i: int, *, closer: str | None) -> int:
        """Read commands from ``i`` until ``closer`` (``)`` or backquote) or the end."""
        simple = _Simple()
        self.commands.append(simple)
        heredocs: list[_Heredoc] = []
        case_depth = 0
        src = self.src
        try:
            while i < len(src):
                c = src[i]
                if closer == ")" and c == ")" and case_depth == 0:
                    self.end_simple(simple, separator="")
                    return i + 1
                if c in " \t":
                    case_depth += self.end_word(simple)
                    i += 1
                elif c == "\n":
                    case_depth += self.end_word(simple)
                    self.end_simple(simple, separator="\n")
                    i = self.heredoc_bodies(i + 1, heredocs, fed=simple.line_fed)
                    heredocs, simple.line_fed = [], False
                elif c == "#" and not simple.in_word:
                    i = self.comment(i)
                elif c in ";&|":
                    case_depth += self.end_word(simple)
                    double = src[i:i + 2] in ("||", "&&", ";;", ";&", "|&")
                    self.end_simple(simple, separator="|" if c == "|" and not double else c)
                    i += 2 if double else 1
                elif c == ")" and case_depth > 0:
                    self.end_word(simple)  # a case pattern's closing parenthesis
                    self.end_simple(simple, separator=";")
                    i += 1
                elif c == "(":
                    i = self.open_paren(i, simple)
                elif c in "<>":
                    i = self.redirection(i, simple, heredocs)
                else:
                    i = self.word_part(i, simple)
            case_depth += self.end_word(simple)
            self.end_simple(simple, separator="")
            return i
        finally:
            self.commands.pop()

    def open_paren(self, i: int, simple: _Simple) -> int:
        at_start = not simple.in_word and not self.command_words(simple)
        if at_start and self.src.startswith("((", i):
            return self.arithmetic(i + 2, "))")
        self.end_word(simple)
        return self.command_list(i + 1, closer=")")

    def redirection(self, i: int, simple: _Simple, heredocs: list[_Heredoc]) -> int:
        src = self.src
        if src.startswith("<<<", i):
            self.end_word(simple)
            simple.herestring = True  # data for the command's input, not an argument
            return i + 3
        if src.startswith("<<", i) and src[i + 2:i + 3] != "<":
            self.end_word(simple)
            start = i + (3 if src.startswith("<<-", i) else 2)
            return self.heredoc_start(start, src.startswith("<<-", i), simple, heredocs)
        if src[i] == "<" and src[i + 1:i + 2] == "(" or src[i] == ">" and \
                src[i + 1:i + 2] == "(":
            self.end_word(simple)
            return self.command_list(i + 2, closer=")")  # process substitution
        if simple.in_word and not simple.word.isdigit():
            self.end_word(simple)
        simple.word, simple.in_word = "", False
        simple.redirect = True
        i += 1
        while i < len(src) and src[i] in "<>&|":
            i += 1
        return i

    def heredoc_start(self, i: int, strip: bool, simple: _Simple,
                      heredocs: list[_Heredoc]) -> int:
        src = self.src
        while i < len(src) and src[i] in " \t":
            i += 1
        start = i
        while i < len(src) and src[i] not in " \t\n;&|<>()":
            if src[i] in "'\"":
                end = src.find(src[i], i + 1)
                i = len(src) if end < 0 else end + 1
            else:
                i += 1
        raw = src[start:i]
        for index in range(start, i):
            if src[index] == _MARK:
                self.mark(index, Context.DELIMITER)
        quoted = any(q in raw for q in "'\"\\")
        delimiter = raw.replace("'", "").replace('"', "").replace("\\", "")
        heredocs.append(_Heredoc(delimiter, quoted, strip, self.command_words(simple)))
        return i

    def heredoc_bodies(self, i: int, heredocs: list[_Heredoc], *, fed: bool) -> int:
        for doc in heredocs:
            self.fed_heredoc = fed or self.reads_code(doc.owner)
            try:
                i = self.heredoc_body(i, doc)
            finally:
                self.fed_heredoc = False
        return i

    def heredoc_body(self, i: int, doc: _Heredoc) -> int:
        src = self.src
        while i < len(src):
            end = src.find("\n", i)
            end = len(src) if end < 0 else end
            line = src[i:end]
            if (line.lstrip("\t") if doc.strip else line) == doc.delimiter:
                return end + 1
            if doc.quoted:
                self.mark_range(i, end, Context.QUOTED_HEREDOC)
            else:
                self.expanding_text(i, end, Context.HEREDOC)
            i = end + 1
        return i

    def comment(self, i: int) -> int:
        end = self.src.find("\n", i)
        end = len(self.src) if end < 0 else end
        for index in range(i, end):
            if self.src[index] == _MARK:
                self.mark(index, Context.COMMENT)
        return end

    # -- words ---------------------------------------------------------------------------

    def word_part(self, i: int, simple: _Simple) -> int:
        src, c = self.src, self.src[i]
        simple.in_word = True
        if c == "\\":
            if src[i + 1:i + 2] == "\n":
                return i + 2  # line continuation
            simple.word += src[i + 1:i + 2]
            return i + 2
        if c == "'":
            end = src.find("'", i + 1)
            end = len(src) if end < 0 else end
            self.mark_range(i + 1, end, Context.SINGLE)
            simple.word += src[i + 1:end]
            return end + 1
        if c == '"':
            start = i + 1
            i = self.double_quoted(start)
            simple.word += src[start:i - 1]
            return i
        if c == "`":
            return self.backticks(i + 1)
        if c == "$":
            return self.dollar(i, simple)
        if c == _MARK:
            self.current_mark = i
            self.mark(i, self.in_command(simple, Context.WORD))
        simple.word += c
        return i + 1

    def end_word(self, simple: _Simple) -> int:
        """Close the word being read; returns +1 on ``case``, -1 on ``esac``."""
        if not simple.in_word:
            return 0
        word, redirect = simple.word, simple.redirect or simple.herestring
        simple.word, simple.in_word, simple.redirect, simple.herestring = "", False, False, False
        if redirect:
            return 0
        if simple.case_subject:
            simple.case_subject = False
            return 0
        first = not simple.words
        if first and word in _RESERVED:
            simple.case_subject = word == "case"
            return {"case": 1, "esac": -1}.get(word, 0)
        if first and word == "[[":
            simple.dbracket = True
            return 0
        if simple.dbracket and word == "]]":
            self.close_dbracket(simple)
            return 0
        if simple.dbracket and word in _TEST_ARITH:
            simple.dbracket_arith = True
        simple.words.append(word)
        if len(self.command_words(simple)) == 1 and simple.piped \
                and self.reads_code(self.command_words(simple)):
            simple.line_fed = True
            for index in simple.pipe_marks:
                self.mark(index, Context.FED_TO_SHELL)
        return 0

    def close_dbracket(self, simple: _Simple) -> None:
        if simple.dbracket_arith:
            for index in simple.dbracket_marks:
                self.mark(index, Context.TEST_ARITHMETIC)
        simple.dbracket, simple.dbracket_arith, simple.dbracket_marks = False, False, []

    def end_simple(self, simple: _Simple, *, separator: str) -> None:
        self.end_word(simple)
        if simple.dbracket:
            self.close_dbracket(simple)
        simple.words = []
        simple.piped = separator == "|"
        if not simple.piped:
            simple.pipe_marks = []

    @staticmethod
    def command_words(simple: _Simple) -> list[str]:
        """The words after leading assignments, as plain names (``/bin/sh`` → ``sh``)."""
        words = list(simple.words)
        while words and _ASSIGNMENT.match(words[0]):
            words.pop(0)
        return [w.rsplit("/", 1)[-1] if w.startswith("/") else w for w in words]

    @staticmethod
    def reads_code(words: list[str]) -> bool:
        """Whether a command with ``words`` reads its input (or arguments) as shell code."""
        names = [w for w in words if w not in _PREFIXES]
        return bool(names) and (names[0] in _SHELLS or names[0] in _REMOTE
                                or names[0] == "eval")

    def in_command(self, simple: _Simple, base: Context) -> Context:
        """``base`` unless the commands around the mark make a value unsafe there."""
        index = self.current_mark
        if self.fed_heredoc:
            return Context.FED_TO_SHELL
        for outer in self.commands:
            context = self.argument_context(outer, outer is simple)
            if context is not None:
                return context
        simple.pipe_marks.append(index)
        if simple.dbracket:
            simple.dbracket_marks.append(index)
        return base

    def argument_context(self, simple: _Simple, innermost: bool) -> Context | None:
        words = self.command_words(simple)
        prefix_free = [w for w in words if w not in _PREFIXES]
        if innermost and simple.herestring and self.reads_code(words):
            return Context.FED_TO_SHELL
        if innermost and (simple.redirect or simple.herestring or simple.case_subject):
            return None
        if not prefix_free:
            if innermost and not words and _ASSIGNMENT.match(simple.word):
                return Context.NAME if "[" in simple.word.split("=", 1)[0] else None
            if innermost and not words and _SUBSCRIPT.match(simple.word):
                return Context.NAME
            if innermost and not simple.words and "=" not in simple.word and not simple.dbracket:
                return Context.COMMAND
            if innermost and words and not prefix_free:
                return Context.COMMAND
            return None
        name = prefix_free[0]
        if name == "eval" or any(w == "eval" for w in prefix_free):
            return Context.EVAL
        if name in _REMOTE:
            return Context.REMOTE
        if self.shell_script(prefix_free):
            return Context.SHELL_C
        if name == "let":
            return Context.ARITHMETIC
        if name in _NAMES or (name == "printf" and words[-1:] == ["-v"]):
            return Context.NAME
        if name in _DECLARE and innermost and "=" not in simple.word:
            return Context.NAME
        if name in _DECLARE and innermost and "[" in simple.word.split("=", 1)[0]:
            return Context.NAME
        return None

    @staticmethod
    def shell_script(words: list[str]) -> bool:
        """A shell with ``-c`` whose script word (the first operand after it) is not
        complete yet: the mark is in the script. Later words are positional: safe."""
        shell = next((k for k, w in enumerate(words) if w in _SHELLS), None)
        if shell is None:
            return False
        flag = next((k for k, w in enumerate(words) if k > shell
                     and _SHELL_C_FLAG.match(w)), None)
        if flag is None:
            return False
        operands = [w for w in words[flag + 1:] if not w.startswith("-") or w == "-"]
        return not operands

    # -- quoting and expansions ----------------------------------------------------------

    def mark_range(self, start: int, end: int, context: Context) -> None:
        for index in range(start, end):
            if self.src[index] == _MARK:
                self.mark(index, context)

    def double_quoted(self, i: int) -> int:
        """Scan the inside of "…" from ``i``; returns the index after the closing quote."""
        src, start = self.src, i
        while i < len(src):
            c = src[i]
            if c == '"':
                return i + 1
            i = self.expanding_char(i, Context.DOUBLE)
        self.mark_range(start, len(src), Context.UNREAD)  # never closed: sh refuses it too
        return i

    def expanding_text(self, i: int, end: int, context: Context) -> int:
        """An unquoted heredoc line: expansions run, quotes are plain characters."""
        while i < end:
            i = self.expanding_char(i, context)
        return i

    def expanding_char(self, i: int, context: Context) -> int:
        c = self.src[i]
        if c == "\\":
            return i + 2
        if c == "`":
            return self.backticks(i + 1)
        if c == "$":
            return self.dollar(i, None)
        if c == _MARK:
            simple = self.commands[-1] if self.commands else _Simple()
            self.current_mark = i
            verdict = self.in_command(simple, context) if context is Context.DOUBLE \
                else self.heredoc_context(context)
            self.mark(i, verdict)
        return i + 1

    def heredoc_context(self, context: Context) -> Context:
        if self.fed_heredoc:
            return Context.FED_TO_SHELL
        for outer in self.commands:
            verdict = self.argument_context(outer, False)
            if verdict is not None:
                return verdict
        return context

    def dollar(self, i: int, simple: _Simple | None) -> int:
        src = self.src
        nxt = src[i + 1:i + 2]
        if src.startswith("$((", i):
            return self.arithmetic(i + 3, "))")
        if nxt == "(":
            return self.command_list(i + 2, closer=")")
        if nxt == "[":
            return self.arithmetic(i + 2, "]")
        if nxt == "{":
            return self.braced(i + 2)
        if nxt == "'":
            end = i + 2
            while end < len(src) and src[end] != "'":
                end += 2 if src[end] == "\\" else 1
            self.mark_range(i + 2, min(end, len(src)), Context.SINGLE)
            return end + 1
        if nxt == '"':
            return self.double_quoted(i + 2)
        if simple is not None:
            simple.word += "$"
        return i + 1

    def arithmetic(self, i: int, closer: str) -> int:
        depth, src = 0, self.src
        while i < len(src):
            if depth == 0 and src.startswith(closer, i):
                return i + len(closer)
            c = src[i]
            if c == _MARK:
                self.mark(i, Context.ARITHMETIC)
            depth += {"(": 1, ")": -1}.get(c, 0)
            i += 1
        return i

    def braced(self, i: int) -> int:
        depth, src = 1, self.src
        while i < len(src):
            c = src[i]
            if c == _MARK:
                self.mark(i, Context.EXPANSION)
            if c == "\\":
                i += 2
                continue
            depth += {"{": 1, "}": -1}.get(c, 0)
            if depth == 0:
                return i + 1
            i += 1
        return i

    def backticks(self, i: int) -> int:
        src = self.src
        while i < len(src) and src[i] != "`":
            if src[i] == _MARK:
                self.mark(i, Context.BACKTICK)
            i += 2 if src[i] == "\\" else 1
        return i + 1
