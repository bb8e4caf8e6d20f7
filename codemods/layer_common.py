"""Shared machinery of the cross-layer codemods (op_def ... python_callers).

DESCRIPTION: the host codemods' byte scanning on top of the engine's C++ toolkit (its lexer
and bracket matcher, engine/source.py; functions by byte offsets, `CppFunction`, which
kernel and host code share, engine/cpp.py), the shared profiling-size header and input
errors. The markers are
engine/vocabulary.py's.

Contract of every layer codemod: its edits refer to the file's *clean* bytes — the file
with optrace's own insertions stripped (`clean_bytes`), which on a first apply are the
file's bytes. `pipeline.apply` turns them into edits of the current bytes, so a second
apply changes nothing and a different `--mode` rewrites only what depends on it.

Markers (what `strip` removes):

- C++: a whole inserted line ends with `  // optrace`; a fragment inside a line is
  `/*optrace<*/ ... /*>optrace*/`; a fragment inside a string literal closes and reopens
  the literal, `"/*optrace-str<*/", Tensor"/*>optrace-str*/"` (adjacent literals concatenate),
  and strip removes it with both quotes.
- Python and shell: a whole inserted line ends with `  # optrace`; a rewritten Python
  statement is preceded by `# optrace-edit N` (N = lines of the rewrite that follow; strip
  takes out what optrace added by its shape: nothing of the original is encoded).
- Build scripts: the hook block between `# TRACE_PREPROCESSOR_HOOK_START` / `_END`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from optrace.codemods.strip import strip_bytes
from optrace.engine import source, vocabulary
from optrace.engine.cache import by_content, once
from optrace.engine.codes import OT310, OT311, OT312, OT313
from optrace.engine.cpp import mask
from optrace.engine.diagnostics import Diagnostic, InputError, Severity
from optrace.engine.edits import Edit, line_end, line_number, line_start, newline_of
from optrace.engine.source import read_regular
from optrace.engine.vocabulary import CREATED_MARK

# The markers and the buffer's names are the vocabulary's (engine/vocabulary.py, the one
# definition), under the names the codemods import from here.
LINE_MARK = vocabulary.LINE_MARK
HASH_MARK = vocabulary.HASH_MARK
FRAG_OPEN = vocabulary.FRAG_OPEN
FRAG_CLOSE = vocabulary.FRAG_CLOSE
STR_OPEN = vocabulary.STR_OPEN
STR_CLOSE = vocabulary.STR_CLOSE

PROFILING_OUTPUT = vocabulary.PROFILING_OUTPUT  # OpDef / schema / Python name
PROFILING_VAR = vocabulary.PROFILING_VAR  # C++ variables and parameters
NUMEL_MACRO = vocabulary.NUMEL_MACRO
INDEX_VAR = vocabulary.INDEX_VAR

# Input errors of the layer codemods (README: OT3xx is apply / strip).
CODE_OPDEF_OUTPUTS = OT310
CODE_SCHEMA = OT311
CODE_PYTHON_SYNTAX = OT312
CODE_LAYER_SHAPE = OT313


def input_error(code: str, message: str, path: Path, data: bytes | None = None, offset: int = 0,
                line: int = 0) -> InputError:
    """An InputError located at `offset` of `data` (or at `line`)."""
    if data is not None and not line:
        line = line_number(data, offset)
    return InputError(Diagnostic(code, message, path, line, Severity.ERROR))


def clean_bytes(path: Path) -> bytes:
    """The file without optrace's insertions: what the layer codemods edit (read once in
    an `unchanged_files` stretch: the layers of one operator read its files many times)."""
    return once(("clean_bytes", path), lambda: strip_bytes(read_regular(path), path))


# --- inserted text --------------------------------------------------------------------------


def marked_lines(data: bytes, at: int, lines: list[bytes], mark: bytes = LINE_MARK) -> bytes:
    """`lines` (each with its own indent) as whole marked lines to insert at `at`.

    `at` is a line start; at the end of a file without a final newline the lines go after
    a new newline and lose their last one, which is how strip finds them again.
    """
    nl = newline_of(data)
    body = b"".join(line + mark + nl for line in lines)
    if at == 0 or data[:at].endswith(b"\n"):
        return body
    return nl + body[: -len(nl)]


def insert_lines(path: Path, data: bytes, at: int, lines: list[bytes], codemod: str, note: str = "",
                 mark: bytes = LINE_MARK) -> Edit:
    return Edit(path, at, at, marked_lines(data, at, lines, mark), codemod, note)


def fragment(path: Path, at: int, text: bytes, codemod: str, note: str = "") -> Edit:
    return Edit(path, at, at, FRAG_OPEN + text + FRAG_CLOSE, codemod, note)


def before_item(path: Path, data: bytes, start: int, text: bytes, codemod: str, note: str = "") -> Edit:
    """`text` as a new item of a list, before the item at `start`: a line of its own
    (`text,` and the mark) where that item starts its line, else a fragment `text, `."""
    if starts_line(data, start):
        return insert_lines(path, data, line_start(data, start), [leading_ws(data, start) + text + b","],
                            codemod, note)
    return fragment(path, start, text + b", ", codemod, note)


def string_fragment(path: Path, at: int, text: bytes, codemod: str, note: str = "") -> Edit:
    """`text` spliced into a string literal at `at` (which lies inside the literal)."""
    return Edit(path, at, at, STR_OPEN + b'"' + text + b'"' + STR_CLOSE, codemod, note)


def indent_unit(data: bytes) -> bytes:
    """One level of indentation as the file writes it (tab, or the smallest space step)."""
    return _indent_unit(bytes(data))


@by_content(64, big=2)  # asked once an edit: hundreds of times of one file
def _indent_unit(data: bytes) -> bytes:
    steps: dict[int, int] = {}
    tabs = 0
    for m in re.finditer(rb"^([ \t]+)\S", data, re.M):
        lead = m.group(1)
        if lead.startswith(b"\t"):
            tabs += 1
        elif b"\t" not in lead and len(lead) in (2, 4, 8):
            steps[len(lead)] = steps.get(len(lead), 0) + 1
    if tabs > sum(steps.values()):
        return b"\t"
    for width in (2, 4):
        if steps.get(width, 0) >= max(1, sum(steps.values()) // 4):
            return b" " * width
    return b"    "


def leading_ws(data: bytes, offset: int) -> bytes:
    start = line_start(data, offset)
    m = re.match(rb"[ \t]*", data[start:])
    return m.group(0) if m else b""


def starts_line(data: bytes, offset: int) -> bool:
    """Only spaces / tabs between the line start and `offset`."""
    return not data[line_start(data, offset) : offset].strip()


# --- scanning host code: the engine's C++ toolkit (engine/source.py, engine/cpp.py) ---------

match_bracket = source.match_bracket  # the codemods and the gates have imported it from here


def string_literals(data: bytes, start: int, end: int) -> list[tuple[int, int]]:
    """(start, end) of each plain string literal token in data[start:end], quotes included."""
    out = []
    for m in source.LEX_RE.finditer(data, start, end):
        if m.group(0).startswith(b'"'):
            out.append((m.start(), m.end()))
    return out


def split_top(code: bytes, start: int, end: int) -> list[tuple[int, int]]:
    """Top-level comma-separated items of code[start:end], trimmed, as (start, end)."""
    items: list[tuple[int, int]] = []
    depth = 0
    angle = 0
    item = start
    for i in range(start, end):
        c = code[i]
        if c in (0x28, 0x7B, 0x5B):
            depth += 1
        elif c in (0x29, 0x7D, 0x5D):
            depth -= 1
        elif c == 0x3C and depth == 0 and _template_open(code, i):
            angle += 1
        elif c == 0x3E and depth == 0 and angle:
            angle -= 1
        elif c == 0x2C and depth == 0 and angle == 0:
            items.append(_trim(code, item, i))
            item = i + 1
    last = _trim(code, item, end)
    if last[0] < last[1] or items:
        items.append(last)
    return items


def _template_open(code: bytes, i: int) -> bool:
    # `std::tuple<at::Tensor, ...>`: a `<` right after an identifier, not `a < b`.
    return i > 0 and (chr(code[i - 1]).isalnum() or code[i - 1] == 0x5F) and code[i + 1 : i + 2] != b"<"


def _trim(code: bytes, start: int, end: int) -> tuple[int, int]:
    while start < end and code[start] in b" \t\r\n":
        start += 1
    while end > start and code[end - 1] in b" \t\r\n":
        end -= 1
    return start, end


def statement_start(code: bytes, offset: int) -> int:
    """Start of the statement holding `offset` (masked code): after the previous `;`, block
    `{` or block `}` outside any bracket, skipping whitespace."""
    depth = 0
    i = offset - 1
    while i >= 0:
        c = code[i]
        if c in (0x29, 0x5D):
            depth += 1
        elif c == 0x7D:
            after = code[i + 1 :].lstrip()[:1]
            if depth == 0 and after not in (b";", b",", b")", b".", b"}"):
                break  # a block's end
            depth += 1
        elif c in (0x28, 0x5B, 0x7B):
            if depth == 0 and c == 0x7B:
                break  # the enclosing block
            depth = max(0, depth - 1)
        elif depth == 0 and c == 0x3B:
            break
        i -= 1
    j = i + 1
    while j < offset and code[j] in b" \t\r\n":
        j += 1
    return j


# --- the shared profiling-size header ---------------------------------------------------------

SIZES_MARK = CREATED_MARK + b" `optrace strip` deletes this file."


def sizes_header_name(op_name: str) -> str:
    return f"optrace_{op_name}_profiling.h"


def buffer_core_type(declared: frozenset[str]) -> str | None:
    """"AIV" / "AIC" for a kernel declared to run one core type only (its KERNEL_TASK_TYPE,
    else its build's metadata or OpDef config: engine/core_config.py; its buffer has that
    type's slots alone, core i in slot i), None for a mixed kernel or one nothing
    declares (an inferred core type is a guess: the mixed layout, which holds either kind
    of launch)."""
    return next(iter(declared)) if len(declared) == 1 else None


_SLOTS_LINES = {
    None: b"#define OPTRACE_PROFILING_SLOTS (OPTRACE_MAX_AIC_CORES + OPTRACE_MAX_AIV_CORES)\n",
    "AIV": b"// The kernel runs vector cores only (as declared; see `optrace plan`): no AIC slots.\n"
           b"#define OPTRACE_PROFILING_SLOTS (OPTRACE_MAX_AIV_CORES)\n",
    "AIC": b"// The kernel runs cube cores only (as declared; see `optrace plan`): no AIV slots.\n"
           b"#define OPTRACE_PROFILING_SLOTS (OPTRACE_MAX_AIC_CORES)\n",
}


def sizes_header_content(core_type: str | None = None) -> bytes:
    """Upper bounds shared by infer shape (the OpDef output) and the torch adapter (the
    tensor it allocates): both size `profiling_data` as slots x PROF_SIZE_PER_CORE, the
    slots of the kernel's core types only (`buffer_core_type`)."""
    return (SIZES_MARK + b"""
// Size of the profiling_data output, shared by the op's infer shape and its torch adapter.
// The kernel writes AIC core i to slot i and AIV core i to slot GetBlockNum() + i (a
// single-type kernel: core i to slot i), so the buffer needs one slot per core the launch
// may use; infer cannot ask the device, so the counts are upper bounds (override them
// with -D when a SoC has more cores).
#ifndef OPTRACE_PROFILING_SIZES_H
#define OPTRACE_PROFILING_SIZES_H

#ifndef PROF_SIZE_PER_CORE
#define PROF_SIZE_PER_CORE 2048  // int64 words per core slot (as in the kernel's runtime block)
#endif
#ifndef OPTRACE_MAX_AIC_CORES
#define OPTRACE_MAX_AIC_CORES 32  // upper bound of the cube cores a launch uses
#endif
#ifndef OPTRACE_MAX_AIV_CORES
#define OPTRACE_MAX_AIV_CORES 64  // upper bound of the vector cores a launch uses
#endif
""" + _SLOTS_LINES[core_type] + b"""\
#define OPTRACE_PROFILING_NUMEL (static_cast<int64_t>(OPTRACE_PROFILING_SLOTS) * PROF_SIZE_PER_CORE)

#endif  // OPTRACE_PROFILING_SIZES_H
""")


def python_numel_expr(core_type: str | None = None) -> str:
    """`OPTRACE_PROFILING_NUMEL` as a Python expression, read from the header's own text
    (`(AIC + AIV) * PROF_SIZE_PER_CORE`, or one core type's bound for a single-type
    kernel), so Python fakes size the buffer exactly as infer and the torch adapter do and
    a change to the header reaches them too. `-D` overrides given to the C++ build do not
    reach Python: a build that raises the bounds must set the Python constant to match."""
    text = sizes_header_content(core_type)
    values = {}
    for name in ("PROF_SIZE_PER_CORE", "OPTRACE_MAX_AIC_CORES", "OPTRACE_MAX_AIV_CORES"):
        m = re.search(rb"#define " + name.encode() + rb" (\d+)\b", text)
        assert m is not None, name
        values[name] = int(m.group(1))
    slots = re.search(rb"#define OPTRACE_PROFILING_SLOTS \(([^)]*)\)", text)
    assert slots is not None
    terms = [str(values[t.strip()]) for t in slots.group(1).decode().split("+")]
    sum_ = f"({' + '.join(terms)})" if len(terms) > 1 else terms[0]
    return f"{sum_} * {values['PROF_SIZE_PER_CORE']}"


def sizes_header_path(op_dir: Path, host_files: list[Path]) -> Path:
    """Beside the op's host code (infer / OpDef / launcher) inside the operator directory,
    so a build that copies op_host/ copies the header with the code that includes it."""
    # op_host's first: ops-nn defines an infer function in op_graph/ too (its graph infer),
    # and the header went there, included from op_host as `../op_graph/...`.
    inside = sorted((p for p in host_files if op_dir in p.parents and "op_kernel" not in p.parts),
                    key=lambda p: "op_host" not in p.relative_to(op_dir).parts)
    if inside:
        return inside[0].parent / sizes_header_name(op_dir.name)
    if (op_dir / "op_host").is_dir():
        return op_dir / "op_host" / sizes_header_name(op_dir.name)
    return op_dir / sizes_header_name(op_dir.name)


_INCLUDE_RE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*[<"][^>"\n]+[>"][^\n]*$', re.M)


def include_edit(path: Path, data: bytes, header: Path, codemod: str) -> Edit | None:
    """`#include "<relative header>"  // optrace` after the file's last include."""
    rel = os.path.relpath(header, path.parent).replace(os.sep, "/")
    if re.search(rb'#[ \t]*include[ \t]*"[^"]*' + re.escape(os.fsencode(header.name)) + rb'"', data):
        return None
    last = None
    for m in _INCLUDE_RE.finditer(mask_keep_includes(data)):
        last = m
    at = line_end(data, last.end(), include_newline=True) if last is not None else 0
    return insert_lines(path, data, at, [f'#include "{rel}"'.encode()], codemod, "profiling sizes")


def mask_keep_includes(data: bytes) -> bytes:
    """Comments blanked but string literals kept (include targets are strings)."""
    return _mask_keep_includes(bytes(data))


@by_content(64)
def _mask_keep_includes(data: bytes) -> bytes:
    return source.blank_comments(data)


# --- output indices as the host code writes them: constants, enums or literals ---------------

_CONST_RE = re.compile(
    rb"\b(?:static\s+)?(?:constexpr|const)\s+(?:[\w:]+\s+)+?([A-Za-z_]\w*)\s*(?:=\s*|\{\s*)"
    rb"(?:static_cast<[^>]*>\s*\(\s*)?(\d+)[uUlL]*\s*\)?\s*\}?\s*;"
)
_DEFINE_RE = re.compile(rb"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+\(?(\d+)[uUlL]*\)?[ \t]*$", re.M)
_ENUM_RE = re.compile(rb"\benum\b(?:\s+(?:class|struct))?(?:\s+[A-Za-z_]\w*)?(?:\s*:\s*[\w:]+)?\s*\{")


def index_constants(data: bytes) -> Mapping[str, int]:
    """Integer constants a file can index outputs with: `constexpr T NAME = n;`,
    `#define NAME n` and enumerators (implicit values counted as C++ does). Read-only:
    cached by content (every function of a file asks)."""
    return _index_constants(bytes(data))


@by_content(64, big=2)  # the last two large files too: every function of a file asks
def _index_constants(data: bytes) -> dict[str, int]:
    code = mask(data)
    out: dict[str, int] = {}
    for m in _CONST_RE.finditer(code):
        out[m.group(1).decode()] = int(m.group(2))
    for m in _DEFINE_RE.finditer(code):
        out[m.group(1).decode()] = int(m.group(2))
    for m in _ENUM_RE.finditer(code):
        close = match_bracket(code, m.end() - 1)
        if close < 0:
            continue
        value = -1
        for start, end in split_top(code, m.end(), close):
            item = code[start:end]
            name = re.match(rb"([A-Za-z_]\w*)\s*(?:=\s*(.+))?$", item, re.S)
            if name is None:
                continue
            if name.group(2) is not None:
                explicit = name.group(2).strip()
                if re.fullmatch(rb"\d+[uUlL]*", explicit):
                    value = int(explicit.rstrip(b"uUlL"))
                elif explicit.decode() in out:
                    value = out[explicit.decode()]
                else:
                    continue
            else:
                value += 1
            out[name.group(1).decode()] = value
    return out


def resolve_index(expr: bytes, constants: Mapping[str, int]) -> int | None:
    """The value of an index expression: a literal, a known name (qualified or not)."""
    text = expr.strip()
    text = re.sub(rb"^static_cast<[^>]*>\s*\((.*)\)$", rb"\1", text, flags=re.S).strip()
    if re.fullmatch(rb"\d+[uUlL]*", text):
        return int(text.rstrip(b"uUlL"))
    name = text.split(b"::")[-1].decode(errors="replace")
    return constants.get(name)


_OUTPUT_USE_RE = re.compile(
    rb"\b(GetOutputShape|GetOutputDesc|GetOutputTensor|SetOutputDataType|GetOutputDataType|"
    rb"GetOptionalOutputShape|GetOutputFormat)\s*\("
)


@dataclass(frozen=True)
class OutputUse:
    """A use of an output by index or name (`GetOutputShape(2)`) in host code."""

    method: str
    expr: bytes
    index: int | None
    offset: int


def output_uses(data: bytes, start: int = 0, end: int | None = None) -> list[OutputUse]:
    """Every `context->GetOutputShape(i)`-like use in data[start:end], index resolved."""
    code = mask(data)
    constants = index_constants(data)
    out = []
    for m in _OUTPUT_USE_RE.finditer(code, start, len(code) if end is None else end):
        close = match_bracket(code, m.end() - 1)
        if close < 0:
            continue
        items = split_top(code, m.end(), close)
        if not items:
            continue
        expr = data[items[0][0] : items[0][1]]
        out.append(OutputUse(m.group(1).decode(), expr, resolve_index(expr, constants), m.start()))
    return out


_FRAGMENTS_RE = re.compile(re.escape(FRAG_OPEN) + rb"|" + re.escape(FRAG_CLOSE))


def fixed_count(type_text: bytes) -> int | None:
    """Elements of a fixed return type made of tensors only (`std::tuple<at::Tensor, ...>`:
    how many; `at::Tensor`: 1), None otherwise: a type that carries any number (vector,
    `auto`) or a tuple with other members (`int64_t`), whose new element's place optrace
    does not guess. Fragments count (they are part of the code once applied)."""
    plain = _FRAGMENTS_RE.sub(b"", type_text)
    tensor = rb"\s*(?:const\s+)?(?:at::|torch::)?Tensor\s*&?\s*"
    if re.fullmatch(tensor, plain):
        return 1
    m = re.search(rb"\btuple\s*<", plain)
    if m is None:
        return None
    close = plain.rfind(b">")
    if close < m.end():
        return None
    items = split_top(plain, m.end(), close)
    if not items or not all(re.fullmatch(tensor, plain[a:b]) for a, b in items):
        return None
    return len(items)
