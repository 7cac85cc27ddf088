"""Shell commands as a type: a template parsed once, values delivered as data.

A tool's command template (``cat <<EOF\\nnote: {text}\\nEOF``) is read once by a small
POSIX/bash scanner (``tools.shell_scan``) that knows, for every ``{placeholder}``, the shell
context it stands in. Values never enter shell source: the rendered command starts with one
assignment per value from a single-quoted literal (``DH_text='…'``) and each placeholder
becomes a reference, ``"${DH_text}"`` in a plain word, ``${DH_text}`` where double quotes are
already open or in an unquoted heredoc body. A parameter expansion's result is never parsed
again as code, so this holds in every context where a reference is expanded once (GitHub
Actions' hardening rule: untrusted input travels as a variable, not as script text).

Where even a reference is unsafe or wrong the template is refused, with the line and the
context named (``tools.shell_scan.Context``): single quotes and quoted heredocs (never
expanded: the value would not arrive), comments (never run: a placeholder there is a
mistake), eval/trap/alias, programs of ``sh -c``/``python -c``/``awk``/``sed``, ssh/su/watch
command lines and text piped or fed to a shell (read again as code), arithmetic (bash
evaluates ``a[$(cmd)]`` in a variable's contents), variable names, ``${…}``, backticks,
heredoc delimiters, and the command name (the value would choose the program).
"""

from __future__ import annotations

import re
import shlex
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from tools.shell_scan import SAFE, WHY, Context, scan

MAX_COMMAND_BYTES = 24 * 1024
"""A rendered command larger than this is refused. sshd runs it as one ``sh -c`` argument
(Linux caps one argument at 128 KiB) after deckhand's own wrapper quotes it again, which can
grow a quote-heavy value ~4x; large data belongs in a file or artifact, not a command line."""

_MARK = "\ue000"
"""Stands in for a placeholder while the template is scanned (refused in templates)."""


@dataclass(frozen=True)
class Refusal:
    """One placeholder in a context where a value must not go."""

    field: str
    line: int
    """1-based line within the template."""
    context: Context
    detail: str = ""
    """More about the context (for INNER: which positional the script uses, and how)."""

    def __str__(self) -> str:
        return self.describe("command")

    def describe(self, text: str) -> str:
        """Say what is wrong; ``text`` names what the line counts in (command, script)."""
        detail = f" ({self.detail})" if self.detail else ""
        return (f"{{{self.field}}} on line {self.line} of the {text} stands "
                f"{self.context.value}{detail}: {WHY[self.context]}")


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
    leading: bool = False
    """The value begins an argument: a leading ``-`` would make it an option."""


@dataclass(frozen=True)
class ShellTemplate:
    """A parsed command template: literal shell text between placeholder slots."""

    literals: tuple[str, ...]
    slots: tuple[Slot, ...]

    @property
    def fields(self) -> list[str]:
        return list(dict.fromkeys(s.field for s in self.slots))

    @property
    def leading(self) -> frozenset[str]:
        """Fields a program may read as an option when the value starts with ``-``."""
        return frozenset(s.field for s in self.slots if s.leading)

    def fill(self, values: Mapping[str, object], *, secret: frozenset[str] = frozenset(),
             options: frozenset[str] = frozenset()) -> ShellCommand:
        """The command with ``values`` (by field name) delivered as variables. A value
        starting with ``-`` where it begins an argument is refused unless its field is in
        ``options`` (its parameter's pattern admits it) or the operator wrote it."""
        assigned: dict[str, str] = {}
        for slot in self.slots:
            text = _text(values[slot.field])
            if "\0" in text:
                raise ValueRefused(f"{{{slot.field}}} contains a NUL byte, which no shell "
                                   f"can carry")
            if slot.leading and slot.field not in options and "." not in slot.field:
                problem = option_problem(text)
                if problem:
                    raise ValueRefused(f"{{{slot.field}}} {problem}")
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


def option_problem(value: str) -> str | None:
    """Why ``value`` may not begin an argument (it would be read as an option), or None."""
    if not value.startswith("-"):
        return None
    return (f"is {value[:40]!r}, which starts with '-': the command would read it as an "
            f"option. Give the parameter a `pattern` that admits such values, or put `--` "
            f"before the placeholder in the command")


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
        return prefix + _NOT_NAME.sub("_", key)
    return "DH_" + _NOT_NAME.sub("_", field_name)


_NOT_NAME = re.compile(r"[^A-Za-z0-9_]")


def _variables(fields: list[str]) -> dict[str, str]:
    """One distinct shell variable per field (``host.app-dir`` and ``host.app_dir`` too)."""
    out: dict[str, str] = {}
    for name in dict.fromkeys(fields):
        variable, n = variable_for(name), 1
        while variable in out.values():
            n += 1
            variable = f"{variable_for(name)}_{n}"
        out[name] = variable
    return out


@lru_cache(maxsize=2048)
def parse(template: str, *, code: frozenset[str] = frozenset()) -> ShellTemplate:
    """Parse ``template`` (``str.format`` syntax); ShellRefused lists every unsafe slot.

    ``code``: fields the operator declared trusted scripts (``code: true``), which an inner
    ``sh -c`` script may run; nothing else may become code."""
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
    found = scan(source, _MARK)
    variables = _variables(fields)
    slots = tuple(Slot(f, variables[f], _operator_may_choose(f, found.contexts[i]),
                       found.leading[i])
                  for i, f in enumerate(fields))
    refused = [Refusal(s.field, source[:_nth_mark(source, i)].count("\n") + 1, s.context,
                       found.details[i])
               for i, s in enumerate(slots) if s.context not in SAFE]
    refused += [Refusal(s.field, source[:_nth_mark(source, i)].count("\n") + 1,
                        Context.INNER, found.details[i])
                for i, s in enumerate(slots)
                if s.context in SAFE and found.details[i] and s.field not in code]
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
