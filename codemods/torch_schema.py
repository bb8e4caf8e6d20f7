"""Torch function schemas: the one parser of `ns::name.overload(args) -> returns`.

DESCRIPTION: parses the schema strings `TORCH_LIBRARY` registrations define, in the
grammar torch's own schema parser accepts (the `func:` lines of native_functions.yaml
and `torch.library` definitions), keeping the offset of every piece so the registration
codemod can splice one more return into the string and the gates can count returns.

    schema    := name ['.' overload] '(' [argument {',' argument}] ')' '->' returns
    name      := [namespace '::'] identifier
    argument  := '*' | type identifier ['=' default]      (after `*`: keyword-only)
    returns   := '(' [return {',' return}] ')' | return
    return    := type [identifier]                         (named returns)
    type      := base [alias] {'[' [integer] ']' [alias] | '?'}
    base      := identifier {'.' identifier}
               | ('Dict' | 'List' | 'Optional' | 'Tuple' | 'Union' | 'Future' | 'RRef' | 'Await')
                 '(' type {',' type} ')'
               | '(' type {',' type} ')'
    alias     := '!' | '(' set ['!'] ['->' set ['!']] ')'  set := (identifier | '*') {'|' ...}
    default   := string | number | '-' number | identifier {('::' | '.') identifier}
               | '[' [default {',' default}] ']' | '(' [default {',' default}] ')'

So `Tensor! out`, `Tensor(a!) self`, `Tensor(a) self`, `Tensor? bias=None`, `Tensor[] xs`,
`Tensor?[] indices`, `Tensor(a!)[] out`, `SymInt[] size`, `int[2] stride=1`,
`ScalarType? dtype=None`, `str reduce="mean"`, `int[] dims=[]`, `float eps=1e-05`,
`MemoryFormat? memory_format=contiguous_format`, `*` and `-> (Tensor(a!) values,
Tensor(b!) indices)` all parse; an argument without a name, a trailing comma, a missing
`->` or unbalanced brackets do not (ValueError saying where and why).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN_RE = re.compile(
    r"""(?P<ws>\s+)
      | (?P<str>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')
      | (?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[jJ]?)
      | (?P<ident>[A-Za-z_]\w*)
      | (?P<punct>::|->|[()\[\],?!*=|.\-])
    """,
    re.X,
)
_CONTAINERS = frozenset({"Dict", "List", "Optional", "Tuple", "Union", "Future", "RRef", "Await"})


@dataclass(frozen=True)
class Token:
    """A token of a torch schema string."""

    kind: str  # str, num, ident, punct, end
    text: str
    start: int
    end: int


@dataclass(frozen=True)
class SchemaType:
    """A parsed type: `Tensor(a!)?[]` and friends."""

    text: str
    base: str  # `Tensor`, `int`, `SymInt`, `ScalarType`, `Dict`, ... (`()` for a tuple type)
    alias: str | None  # `a`, `a!`, `!`, `a! -> a|b` (the outermost annotation)
    optional: bool  # ends with `?`
    list_sizes: tuple[int | None, ...]  # one entry per `[]` / `[N]`, innermost first

    @property
    def mutable(self) -> bool:
        return self.alias is not None and "!" in self.alias.split("->")[0]

    @property
    def is_list(self) -> bool:
        return bool(self.list_sizes)

    @property
    def is_tensor(self) -> bool:
        return self.base == "Tensor"


@dataclass(frozen=True)
class Argument:
    """One argument of a torch schema, with its span in the schema string."""

    text: str
    type: SchemaType
    name: str
    default: str | None
    kwarg_only: bool
    start: int
    end: int


@dataclass(frozen=True)
class Return:
    """One return of a torch schema, with its span in the schema string."""

    text: str
    type: SchemaType
    name: str | None
    start: int
    end: int


@dataclass(frozen=True)
class Schema:
    """A parsed `name(args) -> returns` string; offsets index its text."""

    name: str  # as written: `ns::op.overload`
    args: tuple[str, ...]  # each argument as written (`*` included)
    returns: tuple[str, ...]  # each return as written
    parenthesised: bool  # `-> (...)`, not `-> Tensor`
    returns_start: int  # the returns' first character (`(` when parenthesised)
    returns_end: int  # one past their last
    namespace: str = ""
    op: str = ""
    overload: str = ""
    arguments: tuple[Argument, ...] = ()  # without the `*` marker
    return_values: tuple[Return, ...] = ()

    @property
    def named_returns(self) -> bool:
        return bool(self.return_values) and all(r.name for r in self.return_values)


def _tokens(text: str) -> list[Token]:
    out = []
    pos = 0
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            raise ValueError(f"unexpected `{text[pos]}` at column {pos + 1}")
        kind = m.lastgroup or ""
        if kind != "ws":
            out.append(Token(kind, m.group(0), m.start(), m.end()))
        pos = m.end()
    out.append(Token("end", "", len(text), len(text)))
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    # --- tokens ---------------------------------------------------------------------------

    @property
    def tok(self) -> Token:
        return self.toks[self.i]

    def peek(self, *texts: str) -> bool:
        return self.tok.kind in ("punct", "ident") and self.tok.text in texts

    def take(self) -> Token:
        tok = self.tok
        self.i += 1
        return tok

    def accept(self, text: str) -> Token | None:
        return self.take() if self.peek(text) else None

    def expect(self, text: str, what: str) -> Token:
        if not self.peek(text):
            raise self.error(f"expected `{text}` {what}")
        return self.take()

    def ident(self, what: str) -> Token:
        if self.tok.kind != "ident":
            raise self.error(f"expected {what}")
        return self.take()

    def error(self, why: str) -> ValueError:
        tok = self.tok
        found = "the end" if tok.kind == "end" else f"`{tok.text}`"
        return ValueError(f"{why}, found {found} at column {tok.start + 1}")

    # --- grammar ----------------------------------------------------------------------------

    def schema(self) -> Schema:
        first = self.ident("the operator name")
        namespace, op = "", first.text
        if self.accept("::"):
            namespace, op = op, self.ident("the operator name after `::`").text
        overload = ""
        if self.accept("."):
            overload = self.ident("an overload name after `.`").text
        name_end = self.toks[self.i - 1].end
        self.expect("(", "after the operator name (`name(arguments) -> returns`)")
        args: list[Argument] = []
        arg_texts: list[str] = []
        kwarg_only = False
        if not self.peek(")"):
            while True:
                if self.peek("*"):
                    star = self.take()
                    if kwarg_only:
                        raise ValueError(f"a second `*` at column {star.start + 1}")
                    kwarg_only = True
                    arg_texts.append("*")
                else:
                    arg = self.argument(kwarg_only)
                    args.append(arg)
                    arg_texts.append(arg.text)
                if not self.accept(","):
                    break
                if self.peek(")"):
                    raise self.error("expected an argument after `,`")
        self.expect(")", "closing the arguments (or `,` between them)")
        self.expect("->", "before the returns")
        rstart = self.tok.start
        returns: list[Return] = []
        parenthesised = self.peek("(")
        if parenthesised:
            self.take()
            if not self.peek(")"):
                while True:
                    returns.append(self.return_())
                    if not self.accept(","):
                        break
                    if self.peek(")"):
                        raise self.error("expected a return after `,`")
            self.expect(")", "closing the returns (or `,` between them)")
        else:
            returns.append(self.return_())
        rend = self.toks[self.i - 1].end
        if self.tok.kind != "end":
            raise self.error("expected the end of the schema")
        return Schema(self.text[first.start : name_end], tuple(arg_texts), tuple(r.text for r in returns),
                      parenthesised, rstart, rend, namespace, op, overload, tuple(args), tuple(returns))

    def argument(self, kwarg_only: bool) -> Argument:
        start = self.tok.start
        typ = self.type_()
        if self.tok.kind != "ident":
            raise self.error(f"argument `{self.text[start:self.tok.start].strip()}` needs a name "
                             "(`Type name[=default]`)")
        name = self.take().text
        default = None
        if self.accept("="):
            dstart = self.tok.start
            self.default()
            default = self.text[dstart : self.toks[self.i - 1].end]
        end = self.toks[self.i - 1].end
        return Argument(self.text[start:end], typ, name, default, kwarg_only, start, end)

    def return_(self) -> Return:
        start = self.tok.start
        typ = self.type_()
        name = self.take().text if self.tok.kind == "ident" else None
        end = self.toks[self.i - 1].end
        return Return(self.text[start:end], typ, name, start, end)

    def type_(self) -> SchemaType:
        start = self.tok.start
        if self.accept("("):
            base = "()"
            self.type_list(")")
        else:
            base = self.ident("a type").text
            while self.peek(".") and self.toks[self.i + 1].kind == "ident":
                self.take()
                base += "." + self.take().text
            if base in _CONTAINERS and self.peek("("):
                self.take()
                self.type_list(")")
        alias = self.alias()
        optional = False
        sizes: list[int | None] = []
        while True:
            if self.accept("["):
                size = None
                if self.tok.kind == "num":
                    if not self.tok.text.isdigit():
                        raise self.error("expected a list size")
                    size = int(self.take().text)
                self.expect("]", "closing the list type")
                sizes.append(size)
                alias = self.alias() or alias
            elif self.accept("?"):
                optional = True
            else:
                break
        return SchemaType(self.text[start : self.toks[self.i - 1].end], base, alias, optional, tuple(sizes))

    def type_list(self, close: str) -> None:
        while True:
            self.type_()
            if not self.accept(","):
                break
        self.expect(close, "closing the type's arguments")

    def alias(self) -> str | None:
        """`!`, or `(a)`, `(a!)`, `(a|b)`, `(*)`, `(a! -> a|b)` right after a type."""
        if self.peek("!"):
            self.take()
            return "!"
        if not self.peek("("):
            return None
        open_tok = self.take()
        self.alias_set()
        self.accept("!")
        if self.accept("->"):
            self.alias_set()
            self.accept("!")
        close = self.expect(")", "closing the alias annotation (`Tensor(a!)`)")
        return self.text[open_tok.end : close.start].strip()

    def alias_set(self) -> None:
        while True:
            if not self.accept("*"):
                self.ident("an alias set name (`a`, `b`, `*`)")
            if not self.accept("|"):
                break

    def default(self) -> None:
        tok = self.tok
        if tok.kind in ("str", "num"):
            self.take()
        elif self.accept("-"):
            if self.tok.kind == "num" or (self.tok.kind == "ident" and self.tok.text in ("inf", "nan")):
                self.take()
            else:
                raise self.error("expected a number after `-`")
        elif tok.kind == "ident":
            self.take()
            while self.peek("::", ".") and self.toks[self.i + 1].kind == "ident":
                self.take()
                self.take()
        elif self.peek("[", "("):
            close = "]" if self.take().text == "[" else ")"
            if not self.peek(close):
                while True:
                    self.default()
                    if not self.accept(","):
                        break
            self.expect(close, "closing the default value")
        else:
            raise self.error("expected a default value")


def parse_schema(text: str) -> Schema:
    """A torch function schema; ValueError with the reason when it does not parse."""
    return _Parser(text).schema()


def returns_list(schema: Schema) -> bool:
    """`-> Tensor[]`: the list carries the extra tensor, the schema stays."""
    if len(schema.return_values) != 1 or schema.parenthesised:
        return False
    typ = schema.return_values[0].type
    return typ.is_tensor and typ.is_list and not typ.optional
