"""Strip: remove exactly what `apply` added, from the provenance markers it left.

DESCRIPTION: delete marked lines (`... // optrace`), marked fragments
(`/*optrace<*/ ... /*>optrace*/`), the entry scaffold and runtime block (between their
begin / end marker lines), and files optrace created. Everything else — including
trace points someone wrote by hand — stays byte for byte.

Other languages (chosen by the file name):

- C++ string literals: `"/*optrace-str<*/", Tensor"/*>optrace-str*/"` spliced into a
  literal (it closes and reopens it) goes, quotes included.
- Python: lines ending in `  # optrace` go; the N lines after `# optrace-edit N` (a
  statement optrace rewrote) lose what optrace put inside them, recognised by its shape:
  a last element `profiling_data` (or `optrace_profiling_data`, or the string
  `"profiling_data"`), a last value `<t>.new_empty((_OPTRACE_PROFILING_NUMEL,), ...)` (with
  the `(*x, ...)` / `[*x, ...]` around a returned sequence), and a call hoisted into
  `*_optrace_outputs, profiling_data = call` goes back where `_optrace_outputs` stands.
  Nothing of the original is kept in a comment: apply checks, before it writes, that
  this gives every byte back. (`# optrace-orig N BASE64`, an older optrace's record of
  the original, is still read.)
- Build scripts (shell, CMake): the hook block from `# TRACE_PREPROCESSOR_HOOK_START`
  to `# TRACE_PREPROCESSOR_HOOK_END` goes when it carries optrace's `# optrace-hook`
  line (a hook block someone else wrote stays); lines optrace commented out
  (`# optrace-off: <line>`, a hand-written hook block it took over) are themselves again;
  lines ending in `  # optrace` go.

Markers rather than a manifest: a manifest goes stale as soon as someone edits the file;
markers travel with the code they mark.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
import tokenize
from pathlib import Path

from optrace.engine.cache import by_content
from optrace.engine.vocabulary import (
    CREATED_MARK,
    EDIT_MARK,
    FRAG_CLOSE,
    FRAG_OPEN,
    HASH_MARK,
    HOIST_NAME,
    HOOK_END,
    HOOK_START,
    LINE_MARK,
    OFF_MARK,
    RUNTIME_BLOCK_BEGIN,
    RUNTIME_BLOCK_END,
    SCAFFOLD_BEGIN,
    SCAFFOLD_END,
    STR_CLOSE,
    STR_OPEN,
)

CODEMOD = "strip"

# Every pattern below is built from the vocabulary's markers: what the codemods write is
# what strip removes.
_BLOCK_RE = re.compile(
    rb"(\r?\n)?(" + re.escape(RUNTIME_BLOCK_BEGIN) + rb"\d+\b.*?" + re.escape(RUNTIME_BLOCK_END)
    + rb"[^\r\n]*)(\r?\n)?", re.S
)
_SCAFFOLD_RE = re.compile(rb"^" + re.escape(SCAFFOLD_BEGIN) + rb"[^\n]*\n.*?^" + re.escape(SCAFFOLD_END)
                          + rb"\r?\n", re.S | re.M)
# A scaffold put after `{` on a one-line body came with the newline before it.
_INLINE_SCAFFOLD_RE = re.compile(
    rb"\r?\n" + re.escape(SCAFFOLD_BEGIN) + rb"[^\n]* inline\r?\n.*?^" + re.escape(SCAFFOLD_END) + rb"\r?\n",
    re.S | re.M
)
# Only lines with code before the marker: a user's own comment line `// optrace` stays.
_LINE_RE = re.compile(rb"^(?![ \t]*//)[^\n]*\S" + re.escape(LINE_MARK) + rb"\r?\n", re.M)
_LAST_LINE_RE = re.compile(rb"\r?\n(?![ \t]*//)[^\n]*\S" + re.escape(LINE_MARK) + rb"\Z")
# A fragment may hold line breaks (a parameter apply put on a line of its own).
_FRAGMENT_RE = re.compile(re.escape(FRAG_OPEN) + rb".*?" + re.escape(FRAG_CLOSE), re.S)


def is_created(data: bytes) -> bool:
    return data.startswith(CREATED_MARK)


_STR_FRAGMENT_RE = re.compile(re.escape(STR_OPEN) + rb".*?" + re.escape(STR_CLOSE))
_HASH_LINE_RE = re.compile(rb"^(?![ \t]*#)[^\n]*\S" + re.escape(HASH_MARK) + rb"\r?\n", re.M)
_HASH_LAST_LINE_RE = re.compile(rb"\r?\n(?![ \t]*#)[^\n]*\S" + re.escape(HASH_MARK) + rb"\Z")
_PY_ORIG_RE = re.compile(rb"^[ \t]*# optrace-orig (\d+) ([A-Za-z0-9+/=]*)\r?\n", re.M)
_HOOK_RE = re.compile(
    rb"(\r?\n)?(^[ \t]*" + re.escape(HOOK_START) + rb"[^\n]*\n.*?"
    rb"^[ \t]*" + re.escape(HOOK_END) + rb"[^\r\n]*)(\r?\n)?", re.S | re.M
)
_ORIG_BLOCK_RE = re.compile(rb"# optrace-orig-block ([A-Za-z0-9+/=]*)")
_OFF_RE = re.compile(rb"^" + re.escape(OFF_MARK), re.M)
_PY_EDIT_RE = re.compile(rb"^[ \t]*" + re.escape(EDIT_MARK) + rb" (\d+)\r?\n", re.M)
# What optrace inserts inside a Python statement, each one's inverse a deletion.
_NEW_EMPTY = rb"\w+(?:\.\w+)*\.new_empty\(\(_OPTRACE_PROFILING_NUMEL,\), dtype=\w+\.int64\)"
_WRAPPED_RE = re.compile(rb"([(\[])\*(.+), " + _NEW_EMPTY + rb"([)\]])", re.S)
_TAIL_RE = re.compile(rb", (?:" + _NEW_EMPTY
                      + rb"|(?:optrace_)?profiling_data(?!\w)|\"profiling_data\"|'profiling_data')")
_HOIST_RE = re.compile(rb"[ \t]*\*" + HOIST_NAME.encode() + rb", \w+ = ")
_PLACEHOLDER_RE = re.compile(rb"tuple\(" + HOIST_NAME.encode() + rb"\)|"
                             + HOIST_NAME.encode() + rb"(?:\[0\])?")
SCRIPT_SUFFIXES = frozenset({".sh", ".bash", ".cmake"})


def file_kind(path: Path | None) -> str:
    """The language by file name: `python`, `script` (shell / CMake) or `cpp` (default)."""
    if path is None:
        return "cpp"
    if path.suffix.lower() == ".py":
        return "python"
    if path.suffix.lower() in SCRIPT_SUFFIXES or path.name == "CMakeLists.txt":
        return "script"
    return "cpp"


def strip_bytes(data: bytes, path: Path | None = None) -> bytes:
    """The file as it was before apply (apply's insertions are whole marked units).

    `path` only selects the language (C++ when absent)."""
    if b"optrace" not in data:
        return data  # every marker strip removes spells `optrace`: nothing to do
    return _strip_kind(file_kind(path), bytes(data))


# Keyed by content (and language): a file shared by several operators (a pybind.cpp, a
# sample) is stripped once per process for as long as its bytes stay the same; the last
# two files past the cache's size bound too (one apply asks the same file hundreds of times).
@by_content(64, big=2)
def _strip_kind(kind: str, data: bytes) -> bytes:
    if kind == "python":
        return _strip_hash_lines(_restore_python(data))
    if kind == "script":
        return _strip_hash_lines(_strip_hook(data))
    return _strip_cpp(data)


def mark_lines(data: bytes, path: Path | None = None) -> list[tuple[int, bytes]]:
    """The lines strip deletes for their closing mark alone (`...  // optrace`, `...  #
    optrace`), outside optrace's blocks (runtime block, scaffold, build hook, a rewritten
    Python statement): (line number, the line). A line of someone's own may end so, and
    nothing but the tree's state tells it from one optrace wrote."""
    if b"optrace" not in data:
        return []
    kind = file_kind(path)

    def lines_only(m: re.Match[bytes]) -> bytes:  # a block's place, its line count kept
        return b"\n" * m.group(0).count(b"\n")

    if kind == "cpp":
        for block_re in (_BLOCK_RE, _INLINE_SCAFFOLD_RE, _SCAFFOLD_RE):
            data = block_re.sub(lines_only, data)
        found = [*_LINE_RE.finditer(data), *_LAST_LINE_RE.finditer(data)]
    else:
        data = _HOOK_RE.sub(lines_only, data) if kind == "script" else _blank_statements(data)
        found = [*_HASH_LINE_RE.finditer(data), *_HASH_LAST_LINE_RE.finditer(data)]
    out = []
    for m in found:
        start = m.start() + (len(m.group(0)) - len(m.group(0).lstrip(b"\r\n")))
        out.append((data.count(b"\n", 0, start) + 1, m.group(0).strip(b"\r\n")))
    return sorted(out)


def _lines_after(data: bytes, m: re.Match[bytes]) -> int:
    """The end of the N lines after a `# optrace-edit N` (or `-orig N`) mark."""
    end = m.end()
    for _ in range(int(m.group(1))):
        nl = data.find(b"\n", end)
        end = len(data) if nl < 0 else nl + 1
    return end


def _blank_statements(data: bytes) -> bytes:
    """Python: each `# optrace-edit N` statement (the mark and its N lines) as empty lines."""
    out: list[bytes] = []
    pos = 0
    for m in _PY_EDIT_RE.finditer(data):
        if m.start() < pos:
            continue
        end = _lines_after(data, m)
        out.append(data[pos:m.start()])
        out.append(b"\n" * data.count(b"\n", m.start(), end))
        pos = end
    out.append(data[pos:])
    return b"".join(out)


def _strip_hash_lines(data: bytes) -> bytes:
    return _HASH_LAST_LINE_RE.sub(b"", _HASH_LINE_RE.sub(b"", data))


def _restore_python(data: bytes) -> bytes:
    """`# optrace-edit N` + the N rewritten lines -> the statement as it was (and an
    older optrace's `# optrace-orig N B64` + its N lines -> the bytes it kept)."""
    out: list[bytes] = []
    pos = 0
    while True:
        edit = _PY_EDIT_RE.search(data, pos)
        orig = _PY_ORIG_RE.search(data, pos)
        m = min((x for x in (edit, orig) if x is not None), key=lambda x: x.start(), default=None)
        if m is None:
            break
        end = _lines_after(data, m)
        if m is edit:
            original = _undo_statement(data[m.end() : end])
        else:
            try:
                original = base64.b64decode(m.group(2), validate=True)
            except (binascii.Error, ValueError):
                out.append(data[pos : m.end()])
                pos = m.end()
                continue
        out.append(data[pos : m.start()])
        out.append(original)
        pos = end
    out.append(data[pos:])
    return b"".join(out)


def _undo_statement(lines: bytes) -> bytes:
    """The inverse of a statement rewrite: its inserted lines out, a hoisted call back in
    its placeholder's place, then the inserted elements out."""
    lines = _strip_hash_lines(lines)
    hoist = _HOIST_RE.match(lines)
    if hoist is not None:
        end = _logical_line_end(lines)
        call = lines[hoist.end() : end].rstrip(b"\r\n")
        rest = lines[end:]
        place = _PLACEHOLDER_RE.search(rest)
        if place is None:  # a bare call alone on its line: it is the statement again
            indent = lines[: hoist.end()].split(b"*", 1)[0]
            return indent + lines[hoist.end() :]
        return rest[: place.start()] + call + rest[place.end() :]
    lines = _WRAPPED_RE.sub(lambda m: m.group(2), lines)
    return _TAIL_RE.sub(b"", lines)


def _logical_line_end(text: bytes) -> int:
    """Offset just past the first logical Python line of `text` (its NEWLINE token):
    brackets and strings spanning lines are one line."""
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text.decode("latin-1")).readline):
            if tok.type == tokenize.NEWLINE:
                row, col = tok.end
                return min(starts[row - 1] + col, len(text))
    except (tokenize.TokenError, SyntaxError):
        pass
    nl = text.find(b"\n")
    return len(text) if nl < 0 else nl + 1


def _strip_hook(data: bytes) -> bytes:
    def block(m: re.Match[bytes]) -> bytes:
        body = m.group(2)
        if b"optrace-hook" not in body:
            return m.group(0)
        orig = _ORIG_BLOCK_RE.search(body)
        if orig is not None:  # an older optrace kept the block it replaced here
            return (m.group(1) or b"") + base64.b64decode(orig.group(1)) + (m.group(3) or b"")
        if m.group(3) is not None:
            return m.group(1) or b""
        return b""

    return _OFF_RE.sub(b"", _HOOK_RE.sub(block, data))


def _strip_cpp(data: bytes) -> bytes:

    def block(m: re.Match[bytes]) -> bytes:
        # Inserted as `block + newline` after a line; at the end of a file that did not
        # end with a newline, as `newline + block`: give back the newline that was there.
        if m.group(3) is not None:
            return m.group(1) or b""
        return b""

    # Each pattern only where its marker is, as the text is at that step (a pattern that
    # cannot start with its literal, `(\r?\n)?// optrace-runtime-block`, was tried at
    # every byte of every kernel file apply's proof strips).
    out = _BLOCK_RE.sub(block, data) if RUNTIME_BLOCK_BEGIN in data else data
    if SCAFFOLD_BEGIN in out:
        out = _INLINE_SCAFFOLD_RE.sub(b"", out)
        out = _SCAFFOLD_RE.sub(b"", out)
    if LINE_MARK in out:
        out = _LINE_RE.sub(b"", out)
        out = _LAST_LINE_RE.sub(b"", out)
    if STR_OPEN in out:
        out = _STR_FRAGMENT_RE.sub(b"", out)
    return _FRAGMENT_RE.sub(b"", out) if FRAG_OPEN in out else out
