"""Source files as bytes: reading, line lookup, and the offset-preserving normalisation
that lets tree-sitter-cpp parse AscendC.

Every transformation here keeps the byte length of the file, so an offset found in the
normalised text is an offset in the user's file: edits made later land exactly.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

# Re-exported: the one bounded reader of untrusted files, for every layer above.
from optrace.runtime.regular import NotRegularFile as NotRegularFile
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
    # Device macros from libraries that are often absent (catlass is a git submodule);
    # when their definitions are present they are detected anyway.
    "CATLASS_DEVICE",
    "CATLASS_HOST_DEVICE",
    "CATLASS_GLOBAL",
    "CATLASS_HOST",
)

# Tokens a qualifier-like macro may expand to (`#define CATLASS_DEVICE __aicore__ inline`).
_QUALIFIER_LIKE = {"inline", "static", "constexpr", "__attribute__((always_inline))"}

_DEFINE_RE = re.compile(rb"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+([^\r\n]*)$", re.M)

# Strings, chars and comments in one alternation, so a `//` inside a string is not a comment.
_LEX_RE = re.compile(
    rb'"(?:[^"\\\n]|\\.)*"'  # string literal
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


#: `TRACE_POINT("label", "B")`: group 1 the label (escapes kept, no newline), group 2 the
#: event type. One pattern for every reader of points (planning's existing points, check,
#: preprocess), so they agree on what a point is.
TRACE_POINT_CALL = rb'TRACE_POINT\s*\(\s*"((?:[^"\\\n]|\\.)*)"\s*,\s*"([^"\n]*)"\s*\)'


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
_BLANKED: dict[int, tuple[bytes, bytes]] = {}


def blank_comments(data: bytes) -> bytes:
    """Replace comment bytes with spaces (newlines kept); strings and code untouched.

    Several passes (includes, macros, existing points) ask for the same file; the last
    few results are memoised by identity of the input.
    """
    if b"/" not in data:
        return data
    cached = _BLANKED.get(id(data))
    if cached is not None and cached[0] is data:
        return cached[1]

    def repl(m: re.Match[bytes]) -> bytes:
        tok = m.group(0)
        return tok if tok[:1] in (b'"', b"'") else tok.translate(_TO_SPACES)

    out = _LEX_RE.sub(repl, data)
    if len(_BLANKED) > 256:
        _BLANKED.clear()
    _BLANKED[id(data)] = (data, out)
    return out


_IF_LITERAL_RE = re.compile(rb"^[ \t]*#[ \t]*if[ \t]+[01]\b", re.M)


def blank_if0(data: bytes) -> bytes:
    """Blank `#if 0` ... `#endif` (and `#else` arms of `#if 1`) so dead code is never read.

    Only literal 0/1 conditions are decided; everything else is kept, since both arms of a
    real `#if` may be compiled depending on the build.
    """
    if not _IF_LITERAL_RE.search(data):
        return data
    out = bytearray(data)
    # Stack of (dead?, decided-by-literal?) per open conditional.
    stack: list[tuple[bool, bool]] = []
    pos = 0
    for line in data.splitlines(keepends=True):
        stripped = line.strip()
        dead_here = any(d for d, _ in stack)
        if stripped.startswith(b"#"):
            directive = stripped[1:].lstrip()
            if directive.startswith((b"if", b"ifdef", b"ifndef")):
                literal = re.match(rb"if\s+([01])\b", directive)
                if literal:
                    stack.append((literal.group(1) == b"0", True))
                else:
                    stack.append((False, False))
            elif directive.startswith(b"el") and stack:
                dead, decided = stack[-1]
                if decided:
                    stack[-1] = (not dead, True)
            elif directive.startswith(b"endif") and stack:
                stack.pop()
        if dead_here or any(d for d, _ in stack):
            for i in range(pos, pos + len(line)):
                if out[i] not in (0x0A, 0x0D):
                    out[i] = 0x20
        pos += len(line)
    return bytes(out)


def qualifier_macros(data: bytes, qualifiers: Iterable[str]) -> set[str]:
    """Names `#define`d to nothing but qualifiers (e.g. `CATLASS_DEVICE`), to blank too."""
    quals = set(qualifiers)
    found: set[str] = set()
    for m in _DEFINE_RE.finditer(blank_comments(data)):
        body = decode(m.group(2)).split()
        if body and all(tok in quals or tok in _QUALIFIER_LIKE for tok in body):
            if any(tok in quals for tok in body):
                found.add(decode(m.group(1)))
    return found


def normalise(data: bytes, blank_words: Iterable[str]) -> bytes:
    """The same-length text tree-sitter parses: qualifiers blanked, AscendC-only syntax
    rewritten into equivalent-length C++ it understands."""
    words = sorted(set(blank_words), key=len, reverse=True)
    text = data
    if words:
        # Directive lines are kept: blanking the name in `#ifndef CATLASS_DEVICE` or a
        # `#define` would leave a broken directive behind.
        pattern = re.compile(
            rb"^[ \t]*#[^\n]*|\b(?:" + b"|".join(re.escape(w.encode()) for w in words) + rb")\b",
            re.M,
        )
        text = pattern.sub(
            lambda m: m.group(0) if m.group(0).lstrip()[:1] == b"#" else b" " * len(m.group(0)),
            text,
        )
    text = _OPERATOR_SPEC_RE.sub(
        lambda m: re.sub(rb"[^A-Za-z0-9_]", b"_", m.group(0)), text
    )
    text = _ASCEND_IS_RE.sub(lambda m: b"(ASCENDISAI" + m.group(1) + b")", text)
    assert len(text) == len(data)
    return text


def read_source(path: Path) -> SourceFile:
    """Read a file as bytes; errors propagate as OSError for the caller to locate."""
    raw = read_regular(path)
    return SourceFile(path=path, raw=raw)


def is_binary(data: bytes) -> bool:
    """A NUL byte in the first 8 KiB: not a source file, whatever its name says."""
    return b"\x00" in data[:8192]
