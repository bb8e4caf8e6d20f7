"""Shared machinery of the cross-layer codemods (op_def ... python_callers).

DESCRIPTION: the host codemods' C++ scanning on top of the engine's toolkit (its lexer,
bracket matcher and declarator descent: engine/source.py, engine/cpp.py), function lookup
with tree-sitter, the shared profiling-size header and input errors. The markers are
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
  statement is preceded by `# optrace-orig N BASE64` (the original bytes, N = lines of the
  rewrite that follow).
- Build scripts: the hook block between `# TRACE_PREPROCESSOR_HOOK_START` / `_END`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tree_sitter import Node

from optrace.codemods.strip import strip_bytes
from optrace.engine import source, vocabulary
from optrace.engine.cache import by_content
from optrace.engine.cpp import NodeIndex, function_declarator, new_parser
from optrace.engine.diagnostics import Diagnostic, InputError, Severity
from optrace.engine.edits import Edit, line_end, line_number, line_start, newline_of
from optrace.engine.source import DEFAULT_QUALIFIERS, normalise, read_regular
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
CODE_OPDEF_OUTPUTS = "OT310"
CODE_SCHEMA = "OT311"
CODE_PYTHON_SYNTAX = "OT312"
CODE_LAYER_SHAPE = "OT313"


def input_error(code: str, message: str, path: Path, data: bytes | None = None, offset: int = 0,
                line: int = 0) -> InputError:
    """An InputError located at `offset` of `data` (or at `line`)."""
    if data is not None and not line:
        line = line_number(data, offset)
    return InputError(Diagnostic(code, message, path, line, Severity.ERROR))


def clean_bytes(path: Path) -> bytes:
    """The file without optrace's insertions: what the layer codemods edit."""
    return strip_bytes(read_regular(path), path)


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


def string_fragment(path: Path, at: int, text: bytes, codemod: str, note: str = "") -> Edit:
    """`text` spliced into a string literal at `at` (which lies inside the literal)."""
    return Edit(path, at, at, STR_OPEN + b'"' + text + b'"' + STR_CLOSE, codemod, note)


def indent_unit(data: bytes) -> bytes:
    """One level of indentation as the file writes it (tab, or the smallest space step)."""
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


def mask(data: bytes) -> bytes:
    """Same length as `data`: comments and the insides of string / char literals become
    spaces (newlines kept, quotes kept), so brackets and semicolons can be matched."""
    return _mask(bytes(data))


# The scans below are pure functions of a file's bytes. The layer codemods of one operator
# (and of every operator a process computes) ask them about the same files again and
# again — a shared pybind.cpp, an adapter — so they are cached by content: a file that
# changed is a different key.
@by_content(64)
def _mask(data: bytes) -> bytes:
    return source.blank_literals(data)


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


def statement_end(code: bytes, offset: int) -> int:
    """Offset just past the `;` ending the statement holding `offset`."""
    depth = 0
    for i in range(offset, len(code)):
        c = code[i]
        if c in (0x28, 0x7B, 0x5B):
            depth += 1
        elif c in (0x29, 0x7D, 0x5D):
            depth -= 1
            if depth < 0:
                return i
        elif c == 0x3B and depth == 0:
            return i + 1
    return len(code)


IDENT_RE = re.compile(rb"[A-Za-z_]\w*")


def last_ident(text: bytes) -> str:
    names = IDENT_RE.findall(text)
    return names[-1].decode() if names else ""


# --- functions (tree-sitter over host code) ----------------------------------------------


@dataclass(frozen=True)
class CppFunction:
    """A host-side function (definition or prototype) by byte offsets: its name, return type,
    parameters and body."""

    name: str  # unqualified
    qualified: str
    start: int  # the definition (template / specifiers included)
    type_span: tuple[int, int] | None  # the return type as written
    params: tuple[tuple[int, int], ...]  # each parameter declaration
    params_open: int
    params_close: int
    body_open: int  # `{`, or -1 for a declaration
    body_close: int
    line: int


def _name_of(node: Node | None, data: bytes) -> str:
    while node is not None:
        if node.type in ("identifier", "field_identifier", "qualified_identifier", "destructor_name",
                         "operator_name", "template_function"):
            return data[node.start_byte : node.end_byte].decode(errors="replace")
        inner = node.child_by_field_name("declarator")
        if inner is None:
            named = [c for c in node.named_children if c.type != "parameter_list"]
            inner = named[-1] if named else None
        node = inner
    return ""


_FUNC_TYPES = frozenset({"function_definition", "declaration", "field_declaration"})


def functions(data: bytes, *, declarations: bool = False) -> list[CppFunction]:
    """Function definitions (and, with `declarations`, prototypes) in source order."""
    return [fn for fn, is_def in _functions(bytes(data)) if declarations or is_def]


_STATEMENT_WORD_RE = re.compile(rb"[()\[\]{}]|\b(?:return|break|continue)\b")


def _blank_macro_statements(text: bytes) -> bytes:
    """`return` / `break` / `continue` written as a macro argument (`OP_CHECK_IF(c, LOG(..),
    return ge::GRAPH_FAILED);`) blanked, same length: tree-sitter reads such a call as
    broken syntax and its recovery can end a function early, start one at a macro, or
    lose the next definition. A lambda's body inside the parentheses keeps its own."""
    code = mask(text)
    stack: list[int] = []
    blank: list[tuple[int, int]] = []
    for m in _STATEMENT_WORD_RE.finditer(code):
        c = code[m.start()]
        if c in b"([{":
            stack.append(c)
        elif c in b")]}":
            if stack:
                stack.pop()
        elif stack and stack[-1] == 0x28:  # right inside `(`: a macro argument
            blank.append(m.span())
    if not blank:
        return text
    out = bytearray(text)
    for start, end in blank:
        out[start:end] = b" " * (end - start)
    return bytes(out)


@by_content(64)
def _functions(data: bytes) -> tuple[tuple[CppFunction, bool], ...]:
    # Definitions and prototypes from one parse (each with "is a definition"): callers ask
    # for both of the same file, and a parse is most of the cost.
    text = _blank_macro_statements(normalise(data, DEFAULT_QUALIFIERS))
    tree = new_parser().parse(text)
    code = mask(data)
    out: list[tuple[CppFunction, bool]] = []
    # The engine's C-side index finds them (parents before what they hold, as a pre-order
    # walk would): walking a host file's tree node by node in Python was most of this.
    for node in NodeIndex(tree.root_node).within(tree.root_node, _FUNC_TYPES):
        is_def = node.type == "function_definition"
        fdecl = function_declarator(node)
        if fdecl is None:
            continue
        plist = fdecl.child_by_field_name("parameters")
        if plist is None:
            continue
        qualified = _name_of(fdecl.child_by_field_name("declarator"), data)
        if not qualified:
            continue
        params = tuple((p.start_byte, p.end_byte) for p in plist.named_children
                       if p.type.endswith("parameter_declaration"))
        body = node.child_by_field_name("body") if is_def else None
        type_node = node.child_by_field_name("type")
        start = node.start_byte
        if node.parent is not None and node.parent.type == "template_declaration":
            start = node.parent.start_byte
        body_close = -1
        if body is not None:
            # The brace that closes the body, matched in the bytes: error recovery inside
            # the body (an unknown macro) may end tree-sitter's node elsewhere.
            body_close = match_bracket(code, body.start_byte) if code[body.start_byte] == 0x7B else -1
            if body_close < 0:
                body_close = body.end_byte - 1
        out.append((CppFunction(
            qualified.split("::")[-1], qualified, start,
            (type_node.start_byte, type_node.end_byte) if type_node is not None else None,
            params, plist.start_byte, plist.end_byte - 1,
            body.start_byte if body is not None else -1, body_close,
            line_number(data, node.start_byte),
        ), is_def))
    out.sort(key=lambda f: f[0].start)
    return tuple(out)


def enclosing_function(data: bytes, offset: int) -> CppFunction | None:
    best = None
    for fn in functions(data):
        if fn.body_open <= offset <= fn.body_close:
            best = fn  # later starts are nested deeper (lambdas excluded: not definitions)
    return best


def param_name(data: bytes, span: tuple[int, int]) -> str:
    text = data[span[0] : span[1]]
    text = text.split(b"=")[0]
    return last_ident(re.sub(rb"\[[^\]]*\]", b"", text))


def top_level_return(code: bytes, fn: CppFunction) -> tuple[int, int] | None:
    """(start, end) of the body's final top-level `return ...;` when nothing but
    whitespace follows it, else None."""
    depth = 0
    last: tuple[int, int] | None = None
    i = fn.body_open + 1
    while i < fn.body_close:
        c = code[i]
        if c in (0x28, 0x7B, 0x5B):
            depth += 1
        elif c in (0x29, 0x7D, 0x5D):
            depth -= 1
        elif depth == 0 and c == 0x72 and code.startswith(b"return", i) and not _word(code, i - 1) \
                and not _word(code, i + 6):
            end = statement_end(code, i)
            last = (i, end)
            i = end
            continue
        i += 1
    if last is None or code[last[1] : fn.body_close].strip():
        return None
    return last


def _word(code: bytes, i: int) -> bool:
    return 0 <= i < len(code) and (chr(code[i]).isalnum() or code[i] == 0x5F)


def returns_in(code: bytes, fn: CppFunction) -> list[tuple[int, int]]:
    """Every `return ...;` of the body (nested blocks included, lambdas too)."""
    out = []
    for m in re.finditer(rb"\breturn\b", code[: fn.body_close]):
        if m.start() > fn.body_open:
            out.append((m.start(), statement_end(code, m.start())))
    return out


_LAMBDA_TAIL_RE = re.compile(rb"\s*(?:mutable\s*)?(?:noexcept\s*)?(?:->\s*[^;{}()]*)?\s*\Z")


def lambda_bodies(code: bytes, fn: CppFunction) -> list[tuple[int, int]]:
    """Bodies of lambdas inside the function: their returns are not the function's."""
    out = []
    for m in re.finditer(rb"\]\s*\(", code):
        if not fn.body_open < m.start() < fn.body_close:
            continue
        close = match_bracket(code, m.end() - 1)
        brace = code.find(b"{", close) if close > 0 else -1
        if brace < 0 or not _LAMBDA_TAIL_RE.match(code[close + 1 : brace]):
            continue
        end = match_bracket(code, brace)
        if end > 0:
            out.append((brace, end))
    return out


def own_return_values(code: bytes, fn: CppFunction) -> list[tuple[int, int, int]]:
    """`(return keyword, value start, value end)` of each of the function's own returns
    (lambdas' returns left out), the value trimmed of whitespace, without the `;`."""
    lambdas = lambda_bodies(code, fn)
    out = []
    for start, end in returns_in(code, fn):
        if any(a < start < b for a, b in lambdas):
            continue
        value_start = start + len(b"return")
        while code[value_start] in b" \t\r\n":
            value_start += 1
        value_end = end - 1
        while code[value_end - 1] in b" \t\r\n":
            value_end -= 1
        out.append((start, value_start, value_end))
    return out


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
    for path in host_files:
        if op_dir in path.parents and "op_kernel" not in path.parts:
            return path.parent / sizes_header_name(op_dir.name)
    if (op_dir / "op_host").is_dir():
        return op_dir / "op_host" / sizes_header_name(op_dir.name)
    return op_dir / sizes_header_name(op_dir.name)


_INCLUDE_RE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*[<"][^>"\n]+[>"][^\n]*$', re.M)


def include_edit(path: Path, data: bytes, header: Path, codemod: str) -> Edit | None:
    """`#include "<relative header>"  // optrace` after the file's last include."""
    rel = os.path.relpath(header, path.parent).replace(os.sep, "/")
    if re.search(rb'#[ \t]*include[ \t]*"[^"]*' + re.escape(header.name.encode()) + rb'"', data):
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


@by_content(64)
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
