"""Where each placeholder of a command template stands, as /bin/sh and bash read it.

One pass over the template with each placeholder replaced by a mark character. It follows
quoting ('…', "…", $'…', backslashes), expansions ($( ), ${ }, $(( )), $[ ], backticks),
comments, heredocs (quoted or not, <<-), here-strings, subshells, groups and compound
commands, and the words of each simple command — enough to know, for every mark, whether a
variable reference there is expanded once as data (``SAFE``) or whether the shell, or a
program it starts, would read the value as code, as an expression or as a name.

bashlex was considered: it raises NotImplementedError on arithmetic expansion and on
arithmetic commands, which are exactly contexts this scanner must find.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache


class Context(StrEnum):
    """Where a placeholder stands. WORD, DOUBLE and HEREDOC are safe for a reference."""

    WORD = "in an unquoted word"
    DOUBLE = 'inside "…" double quotes'
    HEREDOC = "in an unquoted heredoc body"
    SINGLE = "inside '…' single quotes"
    QUOTED_HEREDOC = "in a quoted heredoc body (<<'EOF')"
    COMMENT = "in a comment"
    EVAL = "in an argument of eval / trap / alias"
    PROGRAM = "in the program of sh -c / bash -c / python -c / perl -e / awk / sed"
    REMOTE = "in an ssh / su / watch command line"
    FED_TO_SHELL = "in text piped or fed to a shell or interpreter"
    ARITHMETIC = "in arithmetic ($(( )), (( )), $[ ], let)"
    TEST_ARITHMETIC = "in a [[ … -eq / -lt / -v … ]] test"
    NAME = "in a variable name or array subscript (declare, export, read, unset, printf -v, a[…]=)"
    EXPANSION = "inside ${…}"
    BACKTICK = "inside `…` backticks"
    COMMAND = "as the command name"
    FORMAT = "as printf's format"
    INNER = "as an argument the inner script of sh -c / bash -c uses unsafely"
    DELIMITER = "in a heredoc delimiter"
    UNREAD = "in an unterminated quote or construct"


SAFE = frozenset({Context.WORD, Context.DOUBLE, Context.HEREDOC})

WHY = {
    Context.SINGLE: "single quotes are never expanded, so the value would not arrive; "
                    "drop the quotes (deckhand quotes it)",
    Context.QUOTED_HEREDOC: "a quoted heredoc is never expanded, so the value would not "
                            "arrive; use an unquoted delimiter (<<EOF)",
    Context.COMMENT: "a comment is never run, so the value would never be used; remove it",
    Context.EVAL: "the shell parses the value again as code",
    Context.PROGRAM: "the program text is code for the inner shell or interpreter; pass "
                     "the value as an argument instead: sh -c '… \"$1\"' sh {x}, "
                     "awk -v x={x} '…'",
    Context.REMOTE: "the remote or inner shell parses the whole command line again",
    Context.FED_TO_SHELL: "the shell or interpreter reading it runs the value as code",
    Context.ARITHMETIC: "bash evaluates a variable's contents as an expression "
                        "(a[$(cmd)] runs cmd)",
    Context.TEST_ARITHMETIC: "bash evaluates the operands of -eq/-lt/-v as expressions "
                             "(a[$(cmd)] runs cmd); use [ … -eq … ] instead",
    Context.NAME: "a variable name's subscript is evaluated as an expression "
                  "(a[$(cmd)] runs cmd)",
    Context.EXPANSION: "inside ${…} a value is a pattern or a name, not data",
    Context.BACKTICK: "backticks re-read backslashes and quotes; use $(…)",
    Context.COMMAND: "the value would choose the program that runs",
    Context.FORMAT: "printf reads % and \\ sequences in its format, and a leading - as an "
                    "option (printf -v a[$(cmd)] runs cmd); use printf '%s' {x}",
    Context.INNER: "the inner script reads that positional parameter as code, an "
                   "expression, a name or a format; use it only as \"$1\" in a plain "
                   "argument",
    Context.DELIMITER: "a delimiter must be literal",
    Context.UNREAD: "close the quote, heredoc, $( or ${ it is in",
}

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "busybox"})
INTERPRETERS = {  # the option whose argument is a program
    **{s: ("-c",) for s in SHELLS},
    **{p: ("-c",) for p in ("python", "python2", "python3", "pypy3")},
    "perl": ("-e", "-E"), "ruby": ("-e",), "node": ("-e", "-p", "--eval", "--print"),
    "php": ("-r",), "lua": ("-e",), "Rscript": ("-e",),
}
SCRIPTED = frozenset({"awk", "gawk", "mawk", "nawk", "sed", "gsed"})
"""Their first operand is a program (unless -e / -f name one)."""
REMOTE = frozenset({"ssh", "su", "runuser", "watch"})
EVAL = frozenset({"eval", "trap", "alias"})
DECLARE = frozenset({"declare", "typeset", "local", "export", "readonly"})
NAMES = frozenset({"read", "unset", "mapfile", "readarray", "getopts"})
PREFIXES = frozenset({"sudo", "env", "nohup", "exec", "command", "builtin", "nice", "time",
                      "xargs", "stdbuf", "setsid", "doas", "chroot"})
OPENERS = {"{": "}", "if": "fi", "while": "done", "until": "done", "for": "done",
           "select": "done", "case": "esac"}
RESERVED = frozenset({*OPENERS, *OPENERS.values(), "then", "else", "elif", "do", "in", "!",
                      "function"})
TEST_ARITHMETIC = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge", "-v", "-R"})
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
SUBSCRIPT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\[")


def contexts_of(source: str, mark: str) -> list[Context]:
    """The context of every ``mark`` in ``source``, in order (INNER where an inner script
    uses the argument unsafely)."""
    found = scan(source, mark)
    return [Context.INNER if detail else context
            for context, detail in zip(found.contexts, found.details, strict=True)]


@dataclass(frozen=True)
class Scan:
    """What the scanner found for each mark, in order."""

    contexts: list[Context]
    leading: list[bool]
    """The mark begins an argument a program may read as an option: the start of a word
    after the command name, with no ``--`` before it (or, for an argument of ``sh -c``,
    where the inner script puts it)."""
    details: list[str]
    """Non-empty where the mark is an argument an inner ``sh -c`` script uses unsafely
    (INNER): which positional parameter, and how. ``contexts`` has the outer context."""


def scan(source: str, mark: str) -> Scan:
    """Every ``mark``'s context, whether it leads an argument, and details."""
    scanner = _Scanner(source, mark)
    contexts = scanner.contexts()
    return Scan(contexts, [m in scanner.leading for m in scanner.marks],
                [scanner.details.get(m, "") for m in scanner.marks])


@dataclass(frozen=True)
class _Heredoc:
    delimiter: str
    quoted: bool
    strip: bool
    owner: list[str]
    """The words of the command whose input it is."""


@dataclass
class _Simple:
    """The simple command being read in one command list, and what that list has seen."""

    words: list[str] = field(default_factory=list)
    word: str = ""
    start: int = 0
    """Where the word being read began in the source."""
    """The word being read, quotes removed (enough to recognise ``eval``, ``-c``, ``x=``)."""
    in_word: bool = False
    redirect: bool = False
    """The word being read is a redirection target, not an argument."""
    herestring: bool = False
    """The word being read follows ``<<<``: data for the command's input."""
    case_subject: bool = False
    dbracket: bool = False
    dbracket_marks: list[int] = field(default_factory=list)
    dbracket_arith: bool = False
    pipe_marks: list[int] = field(default_factory=list)
    """Safe marks in the pipeline so far: refused if it flows into a shell."""
    piped: bool = False
    line_fed: bool = False
    """A pipeline on this line flows into a shell: this line's heredocs are fed to it."""
    seen: list[int] = field(default_factory=list)
    """Every safe mark of this command list, nested lists and heredocs included."""
    groups: list[int] = field(default_factory=list)
    """``len(seen)`` where each open compound command ({ }, if, while…) began."""
    case_depth: int = 0


class _Scanner:
    def __init__(self, source: str, mark: str):
        self.src, self.mark_char = source, mark
        self.marks = [i for i, c in enumerate(source) if c == mark]
        self.found: dict[int, Context] = {}
        self.commands: list[_Simple] = []
        """Enclosing command lists, outermost first ($( ) and ( ) nest a new one)."""
        self.as_word: list[bool] = []
        """For each of ``commands``: whether it sits inside a word of the one before it
        (``$( )``: its output is that word) rather than beside it (``( )``, ``<( )``)."""
        self.fed_heredoc = False
        """The heredoc body being read goes to a shell (``sh <<EOF``, ``cat <<EOF | sh``)."""
        self.leading: set[int] = set()
        self.details: dict[int, str] = {}

    def contexts(self) -> list[Context]:
        self.command_list(0, closer=None)
        # a mark the scan never reached (inside an unterminated construct) fails closed
        return [self.found.get(m, Context.UNREAD) for m in self.marks]

    def record(self, index: int, context: Context) -> None:
        if index in self.found and self.found[index] not in SAFE:
            return  # a stricter verdict already stands
        if context in (Context.WORD, Context.DOUBLE) and self.commands:
            context = self.as_argument(index, context, self.commands[-1])
        self.found[index] = context
        if context in SAFE and self.commands:
            simple = self.commands[-1]
            simple.seen.append(index)
            simple.pipe_marks.append(index)
            if simple.dbracket:
                simple.dbracket_marks.append(index)

    def as_argument(self, index: int, context: Context, simple: _Simple) -> Context:
        """A mark in a word of ``simple``: note whether it leads an option-like argument,
        and what the inner script makes of it when it is an argument of ``sh -c``."""
        if (not simple.in_word or simple.redirect or simple.herestring or simple.dbracket
                or simple.case_subject or not simple.words or "--" in simple.words):
            return context
        inner = _shell_program(simple.words)
        if inner is None:
            if not self.src[simple.start:index].strip("\"'"):
                self.leading.add(index)
            return context
        program, position = inner
        verdict, leading, detail = _inner_use(program, position)
        if leading:
            self.leading.add(index)
        if verdict is not None:  # said apart: a value declared code may still go here
            self.details[index] = detail
        return context

    def record_range(self, start: int, end: int, context: Context) -> None:
        for index in range(start, min(end, len(self.src))):
            if self.src[index] == self.mark_char:
                self.record(index, context)

    # -- command lists -------------------------------------------------------------------

    def command_list(self, i: int, *, closer: str | None, as_word: bool = False
                     ) -> tuple[int, list[int]]:
        """Read commands from ``i`` to ``closer`` (``)``) or the end: (next index, the
        safe marks seen in them)."""
        simple = _Simple()
        self.commands.append(simple)
        self.as_word.append(as_word)
        heredocs: list[_Heredoc] = []
        try:
            while i < len(self.src):
                if closer == ")" and self.src[i] == ")" and simple.case_depth == 0:
                    self.end_simple(simple, separator="")
                    return i + 1, simple.seen
                i = self.command_char(i, simple, heredocs)
            self.end_simple(simple, separator="")
            if closer is not None:  # never closed: sh would refuse it too
                self.record_all(simple.seen, Context.UNREAD)
            return i, simple.seen
        finally:
            self.commands.pop()
            self.as_word.pop()

    def command_char(self, i: int, simple: _Simple, heredocs: list[_Heredoc]) -> int:
        src, c = self.src, self.src[i]
        if c in " \t":
            self.end_word(simple)
            return i + 1
        if c == "\n":
            self.end_simple(simple, separator="\n")
            i = self.heredoc_bodies(i + 1, heredocs, fed=simple.line_fed)
            heredocs.clear()
            simple.line_fed = False
            return i
        if c == "#" and not simple.in_word:
            return self.comment(i)
        if c == "&" and src[i + 1:i + 2] == ">":  # &> file: a redirection, not a separator
            return self.redirection(i, simple, heredocs)
        if c in ";&|":
            double = src[i:i + 2] in ("||", "&&", ";;", ";&", "|&")
            piped = c == "|" and src[i:i + 2] != "||"  # |& pipes stderr too; || does not
            self.end_simple(simple, separator="|" if piped else ";")
            return i + (2 if double else 1)
        if c == ")" and simple.case_depth > 0:  # a case pattern's closing parenthesis
            self.end_simple(simple, separator=";")
            return i + 1
        if c == "(":
            return self.open_paren(i, simple)
        if c in "<>":
            return self.redirection(i, simple, heredocs)
        return self.word_part(i, simple)

    def nested(self, i: int, simple: _Simple, *, as_word: bool) -> int:
        """A nested command list from ``i`` (after its opening): what flows out of it
        (its output, its exit) belongs to the command around it."""
        i, seen = self.command_list(i, closer=")", as_word=as_word)
        simple.seen += seen
        simple.pipe_marks += seen
        return i

    def open_paren(self, i: int, simple: _Simple) -> int:
        if not simple.in_word and not simple.words and self.src.startswith("((", i):
            return self.arithmetic(i + 2, "))")
        self.end_word(simple)
        return self.nested(i + 1, simple, as_word=False)

    def redirection(self, i: int, simple: _Simple, heredocs: list[_Heredoc]) -> int:
        src = self.src
        if src.startswith("<<<", i):
            self.end_word(simple)
            simple.herestring = True
            return i + 3
        if src.startswith("<<", i):
            self.end_word(simple)
            strip = src.startswith("<<-", i)
            return self.heredoc_start(i + (3 if strip else 2), strip, simple, heredocs)
        if src[i + 1:i + 2] == "(":  # process substitution <( ) or >( )
            self.end_word(simple)
            return self.nested(i + 2, simple, as_word=False)
        if simple.in_word and not simple.word.isdigit():
            self.end_word(simple)
        simple.word, simple.in_word, simple.redirect = "", False, True  # 2>&1: drop the fd
        i += 1
        while i < len(src) and src[i] in "<>&|":
            i += 1
        return i

    def comment(self, i: int) -> int:
        end = self.src.find("\n", i)
        end = len(self.src) if end < 0 else end
        self.record_range(i, end, Context.COMMENT)
        return end

    # -- heredocs ------------------------------------------------------------------------

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
        self.record_range(start, i, Context.DELIMITER)
        delimiter = raw.replace("'", "").replace('"', "").replace("\\", "")
        quoted = delimiter != raw
        heredocs.append(_Heredoc(delimiter, quoted, strip, command_words(simple.words)))
        return i

    def heredoc_bodies(self, i: int, heredocs: list[_Heredoc], *, fed: bool) -> int:
        for doc in heredocs:
            self.fed_heredoc = fed or reads_code(doc.owner)
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
                self.record_range(i, end, Context.QUOTED_HEREDOC)
            else:
                self.expanding_text(i, end, Context.HEREDOC)
            i = end + 1
        return i

    # -- words ---------------------------------------------------------------------------

    def word_part(self, i: int, simple: _Simple) -> int:
        src, c = self.src, self.src[i]
        if not simple.in_word:
            simple.in_word, simple.start = True, i
        if c == "\\":
            if src[i + 1:i + 2] == "\n":
                return i + 2  # a line continuation
            simple.word += src[i + 1:i + 2]
            return i + 2
        if c == "'":
            end = src.find("'", i + 1)
            end = len(src) if end < 0 else end
            self.record_range(i + 1, end, Context.SINGLE if end < len(src) else Context.UNREAD)
            simple.word += src[i + 1:end]
            return end + 1
        if c == '"':
            end = self.double_quoted(i + 1)
            simple.word += src[i + 1:end - 1]
            return end
        if c == "`":
            return self.backticks(i + 1)
        if c == "$":
            return self.dollar(i, simple)
        if c == self.mark_char:
            self.record(i, self.in_command(Context.WORD))
        simple.word += c
        return i + 1

    def end_word(self, simple: _Simple) -> None:
        if not simple.in_word:
            return
        word, skip = simple.word, simple.redirect or simple.herestring
        simple.word, simple.in_word, simple.redirect, simple.herestring = "", False, False, False
        if skip:
            return
        if simple.case_subject:  # case WORD in: the subject is data
            simple.case_subject = False
            return
        if not simple.words and word in RESERVED:
            self.reserved(word, simple)
            return
        if not simple.words and word == "[[":
            simple.dbracket = True
            return
        if simple.dbracket and word == "]]":
            self.close_dbracket(simple)
            return
        if simple.dbracket and word in TEST_ARITHMETIC:
            simple.dbracket_arith = True
        simple.words.append(word)
        names = command_words(simple.words)
        if len(names) == 1 and simple.piped and reads_code(names):
            simple.line_fed = True
            self.record_all(simple.pipe_marks, Context.FED_TO_SHELL)

    def reserved(self, word: str, simple: _Simple) -> None:
        """A reserved word at command position: compound commands open and close here."""
        simple.case_subject = word == "case"
        simple.case_depth += {"case": 1, "esac": -1}.get(word, 0)
        if word in OPENERS:
            simple.groups.append(len(simple.seen))
        elif word in OPENERS.values() and simple.groups:
            # the whole compound command is one element of the pipeline it ends in
            simple.pipe_marks = simple.seen[simple.groups.pop():]

    def record_all(self, indexes: list[int], context: Context) -> None:
        for index in indexes:
            self.found[index] = context

    def close_dbracket(self, simple: _Simple) -> None:
        if simple.dbracket_arith:
            self.record_all(simple.dbracket_marks, Context.TEST_ARITHMETIC)
        simple.dbracket, simple.dbracket_arith, simple.dbracket_marks = False, False, []

    def end_simple(self, simple: _Simple, *, separator: str) -> None:
        self.end_word(simple)
        if simple.dbracket:
            self.close_dbracket(simple)
        simple.words = []
        simple.piped = separator == "|"
        if not simple.piped:
            simple.pipe_marks = []

    # -- what the commands around a mark make of it --------------------------------------

    def in_command(self, base: Context, *, own_word: bool = True) -> Context:
        """``base`` unless a command around the mark reads it as code, an expression, a
        name or a program to run: the command whose word holds the mark (``own_word``;
        not for a heredoc line), then each command whose word holds that list's output."""
        if self.fed_heredoc:
            return Context.FED_TO_SHELL
        depth = len(self.commands) - 1
        if own_word:
            verdict = argument_context(self.commands[depth], innermost=True)
            if verdict is not None:
                return verdict
        while depth > 0 and self.as_word[depth]:
            depth -= 1
            verdict = argument_context(self.commands[depth], innermost=False)
            if verdict is not None:
                return verdict
        return base

    # -- quoting and expansions ----------------------------------------------------------

    def double_quoted(self, i: int) -> int:
        """Scan the inside of "…" from ``i``; returns the index after the closing quote."""
        start = i
        while i < len(self.src):
            if self.src[i] == '"':
                return i + 1
            i = self.expanding_char(i, Context.DOUBLE)
        self.record_range(start, len(self.src), Context.UNREAD)  # never closed
        return i

    def expanding_text(self, i: int, end: int, context: Context) -> None:
        """An unquoted heredoc line: expansions run, quotes are plain characters."""
        while i < end:
            i = self.expanding_char(i, context)

    def expanding_char(self, i: int, context: Context) -> int:
        c = self.src[i]
        if c == "\\":
            return i + 2
        if c == "`":
            return self.backticks(i + 1)
        if c == "$":  # $( ) in "…" is part of the word; in a heredoc line, of the text
            return self.dollar(i, None, as_word=context is Context.DOUBLE)
        if c == self.mark_char:
            self.record(i, self.in_command(context, own_word=context is Context.DOUBLE))
        return i + 1

    def dollar(self, i: int, simple: _Simple | None, *, as_word: bool = True) -> int:
        src, nxt = self.src, self.src[i + 1:i + 2]
        if src.startswith("$((", i):
            return self.arithmetic(i + 3, "))")
        if nxt == "(":
            return self.nested(i + 2, simple or self.commands[-1], as_word=as_word)
        if nxt == "[":
            return self.arithmetic(i + 2, "]")
        if nxt == "{":
            return self.braced(i + 2)
        if nxt == "'":
            return self.ansi_quoted(i + 2)
        if nxt == '"':
            return self.double_quoted(i + 2)
        if simple is not None:
            simple.word += "$"
        return i + 1

    def ansi_quoted(self, i: int) -> int:
        end = i
        while end < len(self.src) and self.src[end] != "'":
            end += 2 if self.src[end] == "\\" else 1
        self.record_range(i, end, Context.SINGLE)
        return end + 1

    def arithmetic(self, i: int, closer: str) -> int:
        depth, src = 0, self.src
        while i < len(src):
            if depth == 0 and src.startswith(closer, i):
                return i + len(closer)
            if src[i] == self.mark_char:
                self.record(i, Context.ARITHMETIC)
            depth += {"(": 1, ")": -1}.get(src[i], 0)
            i += 1
        return i

    def braced(self, i: int) -> int:
        depth, src = 1, self.src
        while i < len(src):
            if src[i] == self.mark_char:
                self.record(i, Context.EXPANSION)
            if src[i] == "\\":
                i += 2
                continue
            depth += {"{": 1, "}": -1}.get(src[i], 0)
            if depth == 0:
                return i + 1
            i += 1
        return i

    def backticks(self, i: int) -> int:
        src = self.src
        while i < len(src) and src[i] != "`":
            if src[i] == self.mark_char:
                self.record(i, Context.BACKTICK)
            i += 2 if src[i] == "\\" else 1
        return i + 1


# -- reading one simple command's words ------------------------------------------------


def command_words(words: list[str]) -> list[str]:
    """The words after leading assignments and prefix commands (sudo, env, nohup…), as
    plain names (``/usr/bin/python3`` → ``python3``)."""
    rest = list(words)
    while rest and (ASSIGNMENT.match(rest[0]) or _name(rest[0]) in PREFIXES):
        rest.pop(0)
    return [_name(w) for w in rest]


def _name(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def reads_code(names: list[str]) -> bool:
    """Whether a command reads its standard input as code (``sh``, ``python3 -``, ``ssh``)."""
    if not names:
        return False
    if names[0] in REMOTE or names[0] == "eval":
        return True
    if names[0] not in INTERPRETERS:
        return False
    flags = INTERPRETERS[names[0]]
    operands = [w for w in names[1:] if not w.startswith("-") or w == "-"]
    return not any(w in flags for w in names[1:]) and operands in ([], ["-"])


def argument_context(simple: _Simple, *, innermost: bool) -> Context | None:
    """What the command being read in ``simple`` makes of the word being read (the mark's
    word when ``innermost``, else the one holding the nested list); None: nothing."""
    names = command_words(simple.words)
    if innermost and simple.herestring:
        return Context.FED_TO_SHELL if reads_code(names) else None
    if innermost and (simple.redirect or simple.case_subject):
        return None
    if not names:
        return _first_word(simple)
    name = names[0]
    if name in EVAL or "eval" in names:
        return Context.EVAL
    if name in REMOTE:
        return Context.REMOTE
    if _program_follows(names):
        return Context.PROGRAM
    if name == "let":
        return Context.ARITHMETIC
    if name in NAMES or (name == "printf" and names[-1:] == ["-v"]):
        return Context.NAME
    if name in ("test", "[") and names[-1:] in (["-v"], ["-R"]):
        return Context.NAME  # bash evaluates a subscript: test -v 'a[$(cmd)]' runs cmd
    if name == "printf" and _format_next(names[1:]):
        return Context.FORMAT
    if name in DECLARE and innermost and "=" not in simple.word:
        return Context.NAME
    if name in DECLARE and innermost and "[" in simple.word.split("=", 1)[0]:
        return Context.NAME
    return None


def _first_word(simple: _Simple) -> Context | None:
    """A mark in the first word: an assignment's value is data; anything else names the
    program (or, before ``=``, a variable)."""
    if ASSIGNMENT.match(simple.word):
        return Context.NAME if "[" in simple.word.split("=", 1)[0] else None
    if SUBSCRIPT.match(simple.word):
        return Context.NAME
    if simple.dbracket:
        return None
    return Context.COMMAND


def _program_follows(names: list[str]) -> bool:
    """Whether the next word is the program of an interpreter (``sh -c``, ``python3 -c``,
    ``perl -e``, ``awk``'s or ``sed``'s first operand). Words after it are arguments."""
    for k, name in enumerate(names):
        if name in INTERPRETERS:
            return _after_flag(names[k + 1:], INTERPRETERS[name])
        if name in SCRIPTED:
            return _scripted_program(names[k + 1:])
    return False


def _after_flag(rest: list[str], flags: tuple[str, ...]) -> bool:
    flag = next((j for j, w in enumerate(rest) if w in flags or _combined(w, flags)), None)
    if flag is None:
        return False
    return not [w for w in rest[flag + 1:] if not w.startswith("-") or w == "-"]


def _combined(word: str, flags: tuple[str, ...]) -> bool:
    """``-lc``, ``-ec``: short options run together, ending in the program flag."""
    return any(len(f) == 2 and re.fullmatch(rf"-[A-Za-z]*{f[1]}", word) for f in flags)


def _scripted_program(rest: list[str]) -> bool:
    """awk / sed: the program is the argument of -e (sed) or the first operand, unless
    -f names a file. Options that take an argument (-v, -F, -i with a suffix) are skipped."""
    if "-f" in rest:
        return False
    if rest[-1:] == ["-e"] or "-e" in rest:
        return rest[-1:] == ["-e"]
    skip = False
    for word in rest:
        if skip:
            skip = False
        elif word in ("-v", "-F"):
            skip = True
        elif not word.startswith("-"):
            return False  # the program is already given: the mark is an argument
    return not skip  # the mark is the argument of -v / -F, or the program


def _format_next(rest: list[str]) -> bool:
    """Whether printf's next word is its format (only options, ``-v NAME``, ``--`` before)."""
    skip = False
    for word in rest:
        if skip:
            skip = False
        elif word == "-v":
            skip = True
        elif not word.startswith("-"):
            return False
    return not skip


def _shell_program(words: list[str]) -> tuple[str, int] | None:
    """For ``sh -c PROGRAM a0 a1 …``: the program and the positional number (``$N``) the
    word being read will have; None when the words are not a shell running a program."""
    names = command_words(words)
    first = len(words) - len(names)
    shell = next((k for k, name in enumerate(names) if name in SHELLS), None)
    if shell is None or names[shell] != names[0]:
        return None
    flag = next((j for j in range(shell + 1, len(names))
                 if names[j] == "-c" or _combined(names[j], ("-c",))), None)
    if flag is None:
        return None
    program = next((j for j in range(flag + 1, len(names))
                    if not names[j].startswith("-") or names[j] == "-"), None)
    if program is None:
        return None
    return words[first + program], len(words) - (first + program) - 1


_POSITIONAL = re.compile(r"\$([0-9@*])|\$\{([0-9@*])\}")
_INNER_MARK = "\ue001"
_NOT_ARRIVING = frozenset({Context.SINGLE, Context.QUOTED_HEREDOC, Context.COMMENT})


def _inner_use(program: str, position: int) -> tuple[Context | None, bool, str]:
    """How ``program`` uses ``$position`` (and ``$@``/``$*``): an unsafe context (or None),
    whether it leads an option-like argument, and words for the refusal."""
    uses = _positional_uses(program)
    names = [str(position)] + (["@", "*"] if position > 0 else [])
    found = [(name, context, leading) for name, context, leading in uses if name in names]
    for name, context, _ in found:
        if context not in SAFE and context not in _NOT_ARRIVING:
            return Context.INNER, False, f"the script uses ${name} {context.value}"
    return None, any(leading for _, _, leading in found), ""


@lru_cache(maxsize=256)
def _positional_uses(program: str) -> tuple[tuple[str, Context, bool], ...]:
    """(positional name, context, leads an argument) for every ``$N``/``$@`` in a script."""
    names: list[str] = []

    def mark(match: re.Match[str]) -> str:
        names.append(match.group(1) or match.group(2))
        return _INNER_MARK
    found = scan(_POSITIONAL.sub(mark, program.replace(_INNER_MARK, "")), _INNER_MARK)
    return tuple(zip(names, found.contexts, found.leading, strict=True))
