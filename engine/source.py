"""Source files as bytes: reading, line lookup, and the offset-preserving normalisation
that lets tree-sitter-cpp parse AscendC.

Every transformation here keeps the byte length of the file, so an offset found in the
normalised text is an offset in the user's file: edits made later land exactly.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from optrace.engine.cache import by_content

# Re-exported: the one bounded reader of untrusted files, for every layer above.
from optrace.runtime.regular import NotRegularFile as NotRegularFile
from optrace.runtime.regular import TooLarge as TooLarge
from optrace.runtime.regular import limit as limit
from optrace.runtime.regular import overlaid as overlaid
from optrace.runtime.regular import overlay_holds as overlay_holds
from optrace.runtime.regular import read_regular as read_regular

# AscendC qualifiers that tree-sitter-cpp does not know; blanked to spaces before parsing.
DEFAULT_QUALIFIERS: tuple[str, ...] = (
    "__aicore__",
    "__global__",
    "__gm__",
    "__ubuf__",
    "__cbuf__",
    "__ca__",
    "__cb__",
    "__cc__",
    "__fbuf__",
    "__BLOCK_LOCAL__",
    "__inline__",
    "__forceinline__",
    "__sync_alias__",
    "__sync_noalias__",
    "__in_pipe__",
    "__out_pipe__",
    # SIMT / SIMD vector functions and local memory of newer AscendC kernels
    "__local_mem__",
    "__simt_vf__",
    "__simt_callee__",
    "__simd_vf__",
    "__simd_callee__",
    "__host_aicore__",
    # opens a block compiled as a vector function (`__VEC_SCOPE__ { ... }`): blanked, a plain
    # block to the parse, which the planner knows by the raw bytes before it
    "__VEC_SCOPE__",
    # Device macros from libraries that are often absent (catlass is a git submodule);
    # when their definitions are present they are detected anyway.
    "CATLASS_DEVICE",
    "CATLASS_HOST_DEVICE",
    "CATLASS_GLOBAL",
    "CATLASS_HOST",
)

# Tokens a qualifier-like macro may expand to (`#define CATLASS_DEVICE __aicore__ inline`).
# `extern "C"` too: `#define KERNEL_API extern "C" __global__ __aicore__` spells an entry.
_QUALIFIER_LIKE = {"inline", "static", "constexpr", "__attribute__((always_inline))", "extern", '"C"',
                   "const", "volatile"}
# Launch-bound attributes with an argument (`LAUNCH_BOUND(THREAD_NUM)`, `__launch_bounds__(1024)`)
# between a function's qualifiers and its return type: blanked with their argument.
_LAUNCH_BOUND_RE = re.compile(rb"\b(?:LAUNCH_BOUND|__launch_bounds__)\s*\((?:[^()\n]|\([^()\n]*\))*\)")

_DEFINE_RE = re.compile(rb"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+([^\r\n]*)$", re.M)

# The one C++ lexer of kernel and host code: strings (raw strings too), chars and comments
# in one alternation, so a `//` inside a string is not a comment.
LEX_RE = re.compile(
    rb'R"([^(\s]*)\(.*?\)\1"'  # raw string literal: R"delim( ... )delim"
    rb'|"(?:[^"\\\n]|\\.)*"'  # string literal
    rb"|'(?:[^'\\\n]|\\.)*'"  # char literal
    rb"|//[^\n]*"  # line comment
    rb"|/\*.*?\*/",  # block comment
    re.S,
)

# `operator()<AscendC::AIC>` is valid C++ that tree-sitter-cpp cannot parse; rewrite it to
# an identifier of the same length (`operator___AscendC__AIC_`) and decode the name later.
_OPERATOR_SPEC_RE = re.compile(rb"operator\s*\(\s*\)\s*<([^<>();{}]*)>")
SPECIALISED_CALL_PREFIX = "operator__"

# `if ASCEND_IS_AIV {` (the macro supplies the parentheses) becomes `if (ASCENDISAIV) {`.
_ASCEND_IS_RE = re.compile(rb"\bASCEND_IS_AI([CV])\b")
CORE_MACRO_AIC = "ASCENDISAIC"
CORE_MACRO_AIV = "ASCENDISAIV"


@dataclass
class SourceFile:
    """One file: its raw bytes (never altered) and a same-length normalised copy."""

    path: Path
    raw: bytes
    text: bytes = b""
    line_starts: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.line_starts:
            self.line_starts = [0] + [m.end() for m in re.finditer(rb"\n", self.raw)]

    def line_of(self, offset: int) -> int:
        """1-based line number of a byte offset."""
        return bisect.bisect_right(self.line_starts, offset)

    def line_text(self, line: int) -> str:
        start = self.line_starts[line - 1]
        end = self.line_starts[line] if line < len(self.line_starts) else len(self.raw)
        return decode(self.raw[start:end]).rstrip("\r\n")

    @property
    def newline(self) -> bytes:
        """The file's dominant line ending, kept on every edit."""
        crlf = self.raw.count(b"\r\n")
        return b"\r\n" if crlf and crlf * 2 >= self.raw.count(b"\n") else b"\n"




def decode(data: bytes) -> str:
    """Bytes to text for display and names: UTF-8, else GBK, else latin-1 (never fails)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    try:
        return data.decode("gbk")
    except UnicodeDecodeError:
        return data.decode("latin-1")


# Every byte but newline becomes a space: comment bodies vanish, line numbers stay.
_TO_SPACES = bytes(0x0A if b == 0x0A else 0x20 for b in range(256))
_BLANKED: dict[bytes, bytes] = {}


def blank_comments(data: bytes) -> bytes:
    """Replace comment bytes with spaces (newlines kept); strings and code untouched.

    Several passes (discovery, includes, macros, existing points, the gates, check) ask for
    the same file, often read again: the last few results are memoised by content (a
    hash and a compare cost far less than the lexer).
    """
    if b"/" not in data:
        return data
    cached = _BLANKED.get(data)
    if cached is not None:
        return cached

    def repl(m: re.Match[bytes]) -> bytes:
        tok = m.group(0)
        return tok.translate(_TO_SPACES) if tok.startswith((b"//", b"/*")) else tok

    out = LEX_RE.sub(repl, data)
    if len(_BLANKED) > 256:
        _BLANKED.clear()
    _BLANKED[data] = out
    return out


def blank_literals(data: bytes) -> bytes:
    """Same length as `data`: comments and the insides of string / char literals become
    spaces (newlines kept, quotes kept), so brackets and semicolons can be matched."""

    def repl(m: re.Match[bytes]) -> bytes:
        tok = m.group(0)
        if tok.startswith((b"//", b"/*")):
            return tok.translate(_TO_SPACES)
        quote = tok[:1] if tok[:1] in (b'"', b"'") else b'"'  # a raw string's `R` becomes a quote
        return quote + tok[1:-1].translate(_TO_SPACES) + tok[-1:]

    return LEX_RE.sub(repl, data)


_OPEN = {ord("("): ord(")"), ord("{"): ord("}"), ord("["): ord("]")}
_BRACKET_RE = re.compile(rb"[()\[\]{}]")


def directive_matches(pattern: re.Pattern[bytes], data: bytes) -> Iterator[re.Match[bytes]]:
    """What `pattern.finditer(data)` yields, for a pattern (`re.M`) that starts
    `^[ \t]*#`: a preprocessor directive. Tried only at the lines whose first non-blank
    byte is `#`, found by a byte search, instead of at every byte: such a pattern has no
    literal prefix for the regex engine to skip to, so even finding nothing in a 60 KB
    header tried it at every byte. Matches never overlap, as with finditer."""
    end = 0  # where the last match ended: finditer looks on from there
    at = data.find(b"#")
    while at >= 0:
        start = data.rfind(b"\n", 0, at) + 1
        if start >= end and not data[start:at].strip(b" \t"):
            m = pattern.match(data, start)
            if m is not None:
                yield m
                end = m.end()
        # No later `#` of this line starts a directive (this one is before it): on from the
        # next line. Looking at each `#` of a line, each looking back to the line's start,
        # was quadratic in a long line of them.
        line_end = data.find(b"\n", at)
        if line_end < 0:
            return
        at = data.find(b"#", max(line_end, end))
    return


def match_bracket(code: bytes, open_at: int) -> int:
    """Offset of the bracket closing code[open_at] (in blanked code), or -1 when it is not
    closed or closed by the wrong kind. The loop visits brackets only (the regex skips
    the rest in C): byte by byte, the gates spent a large part of `check` here on one
    op_host file."""
    stack: list[int] = []
    for m in _BRACKET_RE.finditer(code, open_at):
        c = code[m.start()]
        if c in _OPEN:
            stack.append(_OPEN[c])
        else:
            if not stack or stack[-1] != c:
                return -1
            stack.pop()
            if not stack:
                return m.start()
    return -1


def bracket_closes(code: bytes) -> dict[int, int]:
    """`match_bracket` of every opening bracket of `code`, from one pass: offset of the
    bracket -> offset of the one closing it, or -1. (A bracket closed by the wrong kind
    leaves every bracket still open then without its close, as their own scans would.)"""
    out: dict[int, int] = {}
    stack: list[tuple[int, int]] = []  # (offset, the closing byte it wants)
    for m in _BRACKET_RE.finditer(code):
        c = code[m.start()]
        if c in _OPEN:
            stack.append((m.start(), _OPEN[c]))
        elif stack:
            at, wants = stack.pop()
            if wants == c:
                out[at] = m.start()
            else:
                for left, _ in (*stack, (at, wants)):
                    out[left] = -1
                stack.clear()
    for left, _ in stack:
        out[left] = -1
    return out


_IF_LITERAL_RE = re.compile(rb"^[ \t]*#[ \t]*if[ \t]+[01]\b", re.M)
# The same without the line start: it begins with a literal, which the regex engine skips
# to, where `^` is tried at every byte (far slower on a file that has none).
_IF_LITERAL_HINT = re.compile(rb"#[ \t]*if[ \t]+[01]\b")


def blank_if0(data: bytes) -> bytes:
    """Blank `#if 0` ... `#endif` (and `#else` arms of `#if 1`) so dead code is never read.

    Only literal 0/1 conditions are decided; everything else is kept, since both arms of a
    real `#if` may be compiled depending on the build. The directive lines of a decided
    conditional go with its dead arms: keeping some of them (the `#endif` of an `#if 0` /
    `#else`, or the `#if 1` of an `#if 1` / `#else`) would leave the parser an unmatched
    directive, and the statements around it unparsed. An `#elif X` after a dead `#if 0`
    is where the conditional starts for the build, so it becomes `#if  X`, same length.
    """
    return _blank_if0(bytes(data))


# The states of an open conditional in _blank_if0.
_KEPT, _LIVE, _DEAD, _TAKEN = 0, 1, 2, 3  # undecided; decided: this arm live, dead, done
_GONE = (_DEAD, _TAKEN)  # the states whose lines are blanked
_NOT_EOL_RE = re.compile(rb"[^\n\r]")


@by_content(256)
def _blank_if0(data: bytes) -> bytes:
    # by content: one `check` asks it of each file several times over (includes, parse,
    # compile scope), and the search below is most of its time on a file without `#if 0`
    if not _IF_LITERAL_HINT.search(data) or not _IF_LITERAL_RE.search(data):
        return data
    out = bytearray(data)
    stack: list[int] = []  # the state of each open conditional, innermost last
    # How many of them are dead or done: counted, not searched for on every line (nesting
    # thousands deep is input, and the search made the pass its square).
    gone = 0
    pos = 0
    for line in data.splitlines(keepends=True):
        blank = gone > 0
        stripped = line.strip()
        if stripped.startswith(b"#"):
            directive = stripped[1:].lstrip()
            literal = re.match(rb"(?:el)?if\s+([01])\b", directive)
            if directive.startswith((b"if", b"ifdef", b"ifndef")):
                stack.append(_KEPT if not literal else _LIVE if literal.group(1) == b"1" else _DEAD)
                gone += stack[-1] in _GONE
                blank = blank or stack[-1] != _KEPT
            elif directive.startswith(b"el") and stack and stack[-1] != _KEPT:
                blank = True
                was = stack[-1]
                if was == _LIVE:
                    stack[-1] = _TAKEN
                elif was == _DEAD and directive.startswith(b"else"):
                    stack[-1] = _LIVE
                elif was == _DEAD and literal:
                    stack[-1] = _LIVE if literal.group(1) == b"1" else _DEAD
                elif was == _DEAD and gone == 1:  # no dead one around it
                    # `#elif X` after a dead `#if 0`: now `#if  X`
                    stack[-1] = _KEPT
                    blank = False
                    at = pos + line.index(b"elif")
                    out[at : at + 4] = b"if  "
                gone += (stack[-1] in _GONE) - (was in _GONE)
            elif directive.startswith(b"endif") and stack:
                closed = stack.pop()
                gone -= closed in _GONE
                blank = blank or closed != _KEPT
        if blank or gone > 0:
            out[pos : pos + len(line)] = _NOT_EOL_RE.sub(b" ", line)
        pos += len(line)
    return bytes(out)


def blank_conditionals(data: bytes) -> bytes:
    """The same-length text of the first arm of every conditional: `#if` / `#ifdef` arms
    kept, `#elif` / `#else` arms blanked, the directive lines themselves blanked (`#if 0`
    code blanked first). For the parse of an entry tree-sitter cannot read as written: a
    conditional that opens in one statement and closes in another (`} else if (KEY_A) {`
    under `#if`), or that gives the entry two heads for one parameter list (`extern "C"`
    for a test build, `template <...>` otherwise), leaves the function unparsed, while
    one arm is one function as a build sees it."""
    text = bytearray(blank_if0(data))
    # per open conditional: is the current arm a later (#elif / #else) one?
    later: list[bool] = []
    pos = 0
    for line in bytes(text).splitlines(keepends=True):
        directive = re.match(rb"[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif)\b", line)
        blank = False
        if directive is not None:
            word = directive.group(1)
            if word in (b"if", b"ifdef", b"ifndef"):
                later.append(False)
            elif word in (b"elif", b"else") and later:
                later[-1] = True
            elif word == b"endif" and later:
                later.pop()
            blank = True
        elif any(later):
            blank = True
        if blank:
            for k in range(pos, pos + len(line)):
                if text[k] not in (0x0A, 0x0D):
                    text[k] = 0x20
        pos += len(line)
    return bytes(text)


def qualifier_macros(data: bytes, qualifiers: Iterable[str]) -> set[str]:
    """Names `#define`d to nothing but qualifiers (e.g. `CATLASS_DEVICE`), to blank too."""
    quals = set(qualifiers)
    found: set[str] = set()
    for m in directive_matches(_DEFINE_RE, blank_comments(data)):
        body = decode(m.group(2)).split()
        if body and all(tok in quals or tok in _QUALIFIER_LIKE for tok in body):
            if any(tok in quals for tok in body):
                found.add(decode(m.group(1)))
    return found


VECTOR_SCOPE = "__VEC_SCOPE__"


def vector_scope_macros(data: bytes, names: Iterable[str]) -> set[str]:
    """Of `names` (qualifier-like macros `data` defines), those defined to open a vector
    block: `#define VF_BLOCK __VEC_SCOPE__` is blanked like the macro itself, and the
    planner must know it opens one."""
    wanted = set(names)
    return {decode(m.group(1)) for m in directive_matches(_DEFINE_RE, blank_comments(data))
            if decode(m.group(1)) in wanted and VECTOR_SCOPE in decode(m.group(2)).split()}


def normalise(data: bytes, blank_words: Iterable[str]) -> bytes:
    """The same-length text tree-sitter parses: qualifiers blanked, AscendC-only syntax
    rewritten into equivalent-length C++ it understands."""
    # Only the words the file holds go into the pattern, and only a word's match looks
    # back for a directive: an alternation of every qualifier, or a branch that matched
    # every directive line, tried at every position was most of this function's time.
    words = sorted({w for w in blank_words if w.encode() in data}, key=len, reverse=True)
    text = data
    if words:
        pattern = re.compile(rb"\b(?:" + b"|".join(re.escape(w.encode()) for w in words) + rb")\b")
        out: bytearray | None = None
        for m in pattern.finditer(data):
            line = data.rfind(b"\n", 0, m.start()) + 1
            # Directive lines are kept: blanking the name in `#ifndef CATLASS_DEVICE` or
            # a `#define` would leave a broken directive behind.
            if data[line : m.start()].lstrip(b" \t")[:1] == b"#":
                continue
            if out is None:
                out = bytearray(data)
            out[m.start() : m.end()] = b" " * (m.end() - m.start())
        if out is not None:
            text = bytes(out)
    if b"operator" in text:
        text = _OPERATOR_SPEC_RE.sub(lambda m: re.sub(rb"[^A-Za-z0-9_]", b"_", m.group(0)), text)
    if b"ASCEND_IS_AI" in text:
        text = _ASCEND_IS_RE.sub(lambda m: b"(ASCENDISAI" + m.group(1) + b")", text)
    if b"LAUNCH_BOUND" in text or b"__launch_bounds__" in text:
        text = _LAUNCH_BOUND_RE.sub(lambda m: b" " * len(m.group(0)), text)
    if b"/*" in text and b"define" in text:
        text = _blank_define_comments(text)
    if b"if " in text:
        text = _parenthesise_macro_conditions(text)
    assert len(text) == len(data)
    return text


# `if TILING_KEY_IS (KEY) {`: a macro that expands to the parenthesised condition. The
# literal comes first and the lookbehind after it: a pattern that starts with a lookbehind
# is tried at every byte of the file, one that starts with `if` skips to each `if` (35x).
_MACRO_CONDITION_RE = re.compile(rb"if(?<![#\w]if)([ \t]+)([A-Z_][A-Z0-9_]*)([ \t]*)\(")


def _parenthesise_macro_conditions(text: bytes) -> bytes:
    """`if TILING_KEY_IS (KEY) {` rewritten as `if(TILING_KEY_IS(KEY)) {` in the same
    length — the blank after `if` becomes the `(`, one blank between the macro and its
    argument list or after it makes room for the `)` — so tree-sitter reads the `if`
    and its block instead of recovering from an error around the whole entry. The
    statement's first and last bytes keep their offsets; a condition with no blank to
    spare is left as written."""
    out: bytearray | None = None
    for m in _MACRO_CONDITION_RE.finditer(text):
        close = match_bracket(text, m.end() - 1)
        if close < 0:
            continue
        gap = m.group(3)
        after = close + 1
        if gap:
            # `if TILING_KEY_IS (KEY)` -> `if(TILING_KEY_IS(KEY))`: the gap moves to the end
            args = text[m.end() - 1 : after]
            new = b"(" + m.group(1)[1:] + m.group(2) + args + b")" + gap[1:]
            start = m.start(1)
        elif text[after : after + 1] in (b" ", b"\t"):
            args = text[m.end() - 1 : after]
            new = b"(" + m.group(1)[1:] + m.group(2) + args + b")"
            start, after = m.start(1), after + 1
        else:
            continue
        if out is None:
            out = bytearray(text)
        out[start:after] = new
        assert len(out) == len(text)
    return bytes(out) if out is not None else text


_CONTINUED_DEFINE_RE = re.compile(rb"^[ \t]*#[ \t]*define\b[^\n]*\\\r?\n", re.M)
_BLOCK_COMMENT_RE = re.compile(rb"/\*.*?\*/", re.S)


def _blank_define_comments(text: bytes) -> bytes:
    """`/* ... */` comments inside a `#define` continued over several lines, blanked
    (newlines and the continuation backslashes kept): tree-sitter-cpp reads such a
    comment as the end of the directive, and the function after the macro (a templated
    kernel entry) is then lost in its error recovery."""
    out: bytearray | None = None
    pos = 0
    for m in _CONTINUED_DEFINE_RE.finditer(text):
        if m.start() < pos:
            continue
        end = m.end()
        while end < len(text):
            nl = text.find(b"\n", end)
            stop = len(text) if nl < 0 else nl + 1
            continued = text[end:stop].rstrip(b"\r\n").endswith(b"\\")
            end = stop
            if not continued:
                break
        pos = end
        for c in _BLOCK_COMMENT_RE.finditer(text, m.start(), end):
            if out is None:
                out = bytearray(text)
            for i in range(c.start(), c.end()):
                if text[i] not in b"\r\n" and not (text[i] == 0x5C and text[i + 1 : i + 2] in (b"\n", b"\r")):
                    out[i] = 0x20
    return bytes(out) if out is not None else text


def read_source(path: Path) -> SourceFile:
    """Read a file as bytes; errors propagate as OSError for the caller to locate."""
    raw = read_regular(path)
    return SourceFile(path=path, raw=raw)


def is_binary(data: bytes) -> bool:
    """A NUL byte in the first 8 KiB: not a source file, whatever its name says."""
    return b"\x00" in data[:8192]
