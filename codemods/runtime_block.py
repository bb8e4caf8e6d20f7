"""Runtime block: the MoeTracing device runtime in the operator's `*_base.h`.

DESCRIPTION: insert (or upgrade in place) the versioned runtime block, create the base
header when the operator has none, and include it from every file that gets points.

The block is the template `templates/moe_tracing_runtime.h`, delimited by its first line
`// optrace-runtime-block vN` and its last `// optrace-runtime-block end`; an older
version found between those markers is replaced. Files with points need MoeTracing
declared before their (often templated) code, so each gets
`#include "<base>"  // optrace` after its last include.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import ClassVar

import networkx as nx

from optrace.codemods.kernel_points import point_edits
from optrace.codemods.layer import EXAMPLE_KERNEL, Evidence, FileLayer, LayerExample, LayerModel, line_of
from optrace.engine.codes import OT012
from optrace.engine.diagnostics import Diagnostic, InputError
from optrace.engine.discovery import CPP_EXTS, LayerFile, Layers, SearchContext, walk_files
from optrace.engine.edits import Edit, line_end, newline_of
from optrace.engine.names import same_op
from optrace.engine.plan import Plan
from optrace.engine.source import blank_comments, read_regular
from optrace.engine.vocabulary import CREATED_MARK as STRIP_CREATED_MARK
from optrace.engine.vocabulary import (
    RUNTIME_BLOCK_BEGIN,
    RUNTIME_BLOCK_END,
    RUNTIME_BLOCK_VERSION_RE,
)

CODEMOD = "runtime-block"
_BLOCK_RE = re.compile(
    re.escape(RUNTIME_BLOCK_BEGIN) + rb"\d+.*?" + re.escape(RUNTIME_BLOCK_END) + rb"[^\n]*\n?", re.S
)
_INCLUDE_RE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*[<"][^>"\n]+[>"][^\n]*$', re.M)
_GUARD_RE = re.compile(
    rb"^[ \t]*#[ \t]*(?:ifndef[ \t]+(\w+)[^\n]*\n[ \t]*#[ \t]*define[ \t]+\1\b|pragma[ \t]+once)[^\n]*$", re.M
)
CREATED_MARK = STRIP_CREATED_MARK + b" `optrace strip` deletes this file."


# Beside this module, as installed (a wheel or the editable checkout alike): not through
# importlib.resources, whose first `files()` imports zipfile and its readers, a noticeable
# cost at the start of `check`; optrace is never run from a zip (libclang reads its
# stub headers by path).
TEMPLATES = Path(__file__).parent / "templates"


def template() -> bytes:
    return (TEMPLATES / "moe_tracing_runtime.h").read_bytes()


def block_for(data: bytes) -> bytes:
    """The template with the target file's line endings."""
    text = template().replace(b"\r\n", b"\n")
    return text.replace(b"\n", newline_of(data)) if newline_of(data) != b"\n" else text


def base_header_path(plan: Plan) -> Path:
    """The header the block goes into: the one discovery found (a `*_base.h` already
    holding the block, else the operator's own `<op>_base.h`), else `<op>_base.h` created
    beside the kernel entry — never a vendored sub-kernel's `*_base.h`."""
    layers = plan.analysis.layers
    found = layers.found.get("base_header")
    beside = layers.entry.path.parent if layers.entry is not None else (layers.kernel_dir or layers.op_dir)
    if found:
        path = found[0].path.resolve()
        reached = {p.resolve() for p in plan.analysis.includes.files}
        try:
            data = path.read_bytes()
        except OSError:
            data = b""
        holds_block = _BLOCK_RE.search(data) is not None
        # nothing but includes, guards and comments: including it brings nothing else
        declares = re.sub(rb"(?m)^[ \t]*#.*$", b"", blank_comments(data)).strip()
        if holds_block or not declares or (path in reached and _includes_add_nothing(plan, path)):
            return path
        # The operator's own `<op>_base.h` with declarations of its own that the includes
        # apply adds would compile somewhere it never was: unreached by the entry (ops-nn's
        # fused_add_rms_norm: a second BUFFER_NUM beside the sibling's, ambiguous), or
        # reached only after a file that gets points, which would then include it first,
        # before what it needs (avg_pool_v2_grad: arch35's base after `platform.h`, which
        # the SIMT header with points does not include). The block gets a header of its own.
        return (beside / f"optrace_{layers.op_name}_base.h").resolve()
    return (beside / f"{layers.op_name}_base.h").resolve()


def _includes_add_nothing(plan: Plan, base: Path) -> bool:
    """Whether every `#include` of `base` that apply adds (to the entry and each file with
    points) comes after the preprocessor has already entered `base` — a no-op behind its
    guard, so its code compiles where and in the order it always did. Preprocessing
    order: a depth-first walk of the include graph from the entry, each file's includes
    in their order; a new include in F sits at the end of F's includes, so it adds
    nothing when `base` was entered before F's includes are done."""
    graph = plan.analysis.includes.graph
    entry = plan.analysis.entry_fn.src.path.resolve()
    if entry not in graph or base not in graph:
        return False
    enter: dict[Path, int] = {}
    leave: dict[Path, int] = {}
    for clock, (_, node, kind) in enumerate(nx.dfs_labeled_edges(graph, entry)):
        if kind == "forward":
            enter[node] = clock
        elif kind == "reverse":
            leave[node] = clock
    if base not in enter:
        return False
    direct = set(graph.predecessors(base))
    with_points = {r.anchor.path.resolve() for r in plan.root.walk() if r.anchor is not None} | {entry}
    return all(enter[base] < leave.get(f, -1) for f in with_points if f != base and f not in direct)


def _as_lines(data: bytes, at: int, lines: bytes) -> bytes:
    """Whole lines inserted at `at`. At the end of a file without a final newline they
    go after a new newline and lose their last one, which is how strip finds them."""
    if at == 0 or data[:at].endswith(b"\n"):
        return lines
    return newline_of(data) + lines.rstrip(b"\r\n")


def _after_last_include(data: bytes) -> int:
    """Where an include of the runtime block goes: after the last `#include` of the file's
    head (the preprocessor lines and comments before its first line of code) at the
    shallowest `#if` depth there, so it precedes every use and is not made conditional.
    An include further down (a file ending in `#include "impl_bf16.h"`) is after code
    that may already carry points."""
    bom = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    code = blank_comments(data)
    depth, best, best_depth = 0, None, None
    pos = bom
    for line in code[bom:].splitlines(keepends=True):
        stripped = line.strip()
        if stripped and not stripped.startswith(b"#"):
            break
        directive = stripped[1:].lstrip()
        if directive.startswith(b"if"):
            depth += 1
        elif directive.startswith(b"endif"):
            depth -= 1
        elif directive.startswith(b"include") and _INCLUDE_RE.match(line) and (best_depth is None or
                                                                             depth <= best_depth):
            best, best_depth = pos + len(line.rstrip(b"\r\n")), depth
        pos += len(line)
    if best is not None:
        return line_end(data, best, include_newline=True)
    guard = _GUARD_RE.search(data)
    if guard is not None:
        return line_end(data, guard.end(), include_newline=True)
    return 0


def block_edits(plan: Plan) -> tuple[list[Edit], dict[Path, bytes]]:
    """Edits to existing files, and new files to create: {path: content}."""
    base = base_header_path(plan)
    created: dict[Path, bytes] = {}
    edits: list[Edit] = []
    if base.exists():
        data = read_regular(base)
        if b"\x00" in data:
            # Not text optrace can write into (UTF-16, say): the block's UTF-8 lines would
            # leave a file no compiler reads. (The analysis leaves such a file out too.)
            raise InputError(Diagnostic(OT012, "binary file (NUL bytes: UTF-16?): the runtime block is not "
                                        "written into it; save it as UTF-8", base, 0))
        existing = _BLOCK_RE.search(data)
        new_block = block_for(data)
        if existing is not None:
            if existing.group(0) != new_block:
                edits.append(Edit(base, existing.start(), existing.end(), new_block, CODEMOD,
                                  "upgrade the runtime block"))
        else:
            at = _after_last_include(data)
            edits.append(Edit(base, at, at, _as_lines(data, at, new_block), CODEMOD,
                              "insert the runtime block"))
    else:
        guard = re.sub(r"\W", "_", base.name.upper()).encode()
        created[base] = (CREATED_MARK + b"\n#ifndef " + guard + b"\n#define " + guard + b"\n\n"
                         + b'#include "kernel_operator.h"\n\n' + block_for(b"") + b"\n#endif\n")
    return edits, created


def include_edits(plan: Plan, files_with_points: set[Path]) -> list[Edit]:
    """`#include "<base>"  // optrace` in each file with points that does not include it."""
    base = base_header_path(plan)
    edits: list[Edit] = []
    included = _files_including(plan, base)
    for path in sorted(files_with_points):
        if path == base or path in included:
            continue
        data = plan.analysis.parsed[path].src.raw if path in plan.analysis.parsed else read_regular(path)
        rel = os.path.relpath(base, path.parent).replace(os.sep, "/")
        at = _after_last_include(data)
        line = f'#include "{rel}"  // optrace'.encode() + newline_of(data)
        edits.append(Edit(path, at, at, _as_lines(data, at, line), CODEMOD, "include the runtime block"))
    return edits


def _files_including(plan: Plan, base: Path) -> set[Path]:
    """Files whose own includes reach the base header before their first line of code is
    a guess we do not make: only a direct include of the base header counts."""
    graph = plan.analysis.includes.graph
    if base not in graph:
        return set()
    return set(graph.predecessors(base))


def base_header_edits(plan: Plan) -> list[Edit]:
    """The runtime block, and its include in every kernel file that gets a point."""
    block, _created = block_edits(plan)
    return [*block, *include_edits(plan, points_files(plan, point_edits(plan)))]


def points_files(plan: Plan, points: list[Edit]) -> set[Path]:
    """The kernel files the block's include goes to: those with points, and the entry's."""
    return {e.path for e in points} | {plan.analysis.entry_fn.src.path}


# The operator's own base header (the kernel includes it): the block goes after its includes.
_EXAMPLE_BASE = """\
#ifndef DEMO_OP_BASE_H
#define DEMO_OP_BASE_H

#include "kernel_operator.h"

constexpr int32_t DEMO_TILE = 256;

#endif  // DEMO_OP_BASE_H
"""


class BaseHeaderLayer(FileLayer):
    NAME: ClassVar[str] = "base_header"
    DESCRIPTION: ClassVar[str] = "runtime base header (*_base.h): the device runtime filling profiling_data"
    FOUND_KEY: ClassVar[str | None] = "base_header"
    TITLE: ClassVar[str] = "runtime base header (*_base.h)"
    EXAMPLES: ClassVar[tuple[LayerExample, ...]] = (LayerExample(
        path="demo_op/op_kernel/demo_op_base.h",
        files={
            "demo_op/op_kernel/demo_op_base.h": _EXAMPLE_BASE,
            "demo_op/op_kernel/demo_op.cpp": EXAMPLE_KERNEL.replace('#include "kernel_operator.h"\n',
                                                                    '#include "demo_op_base.h"\n'),
        },
        changes=(('#include "kernel_operator.h"\n',
                  '#include "kernel_operator.h"\n// optrace-runtime-block v2\n...\n'
                  "// optrace-runtime-block end\n"),),
    ),)

    def search(self, ctx: SearchContext) -> list[LayerFile]:
        """Only the operator's own `<op>_base.h` is its base header — or a `*_base.h`
        already holding the runtime block (a second block would redefine it), first. A
        vendored sub-kernel's `other_base.h` the entry happens to include is shared by
        unrelated files: the block must not spread to them."""
        layers = ctx.layers
        out: list[LayerFile] = []
        for path in ctx.operator_cpp:
            data = ctx.data(path)
            name = path.name.lower()
            kernel = layers.kernel_dir
            if data is None or not name.endswith("_base.h") or not (
                    "op_kernel" in path.parts or (kernel is not None and kernel in path.parents)):
                continue
            if RUNTIME_BLOCK_VERSION_RE.search(data):
                out.append(ctx.at(path, None, None, "holds the runtime block"))
            elif same_op(path.name[: -len("_base.h")], layers.op_name):
                out.append(ctx.at(path, None, None, "kernel base header"))
        out.sort(key=lambda f: f.detail != "holds the runtime block")
        return out

    def find(self, layers: Layers) -> list[Path]:
        """Discovery's base header, and any kernel header carrying the block (apply creates
        `<op>_base.h` when the operator has none)."""
        found = [f.path for f in layers.found.get("base_header", [])]
        kernel_dir = layers.kernel_dir or layers.op_dir
        for path in walk_files(kernel_dir, CPP_EXTS):
            if path not in found and path.suffix.lower() in (".h", ".hpp"):
                try:
                    if RUNTIME_BLOCK_VERSION_RE.search(read_regular(path)):
                        found.append(path)
                except OSError:
                    continue
        return found

    def edits(self, plan: Plan, mode: str, model: LayerModel | None) -> list[Edit]:
        return base_header_edits(plan)

    def verify(self, model: LayerModel) -> list[Evidence]:
        for path, data in model.data.items():
            m = RUNTIME_BLOCK_VERSION_RE.search(data)
            if m is not None:
                return [Evidence(path, line_of(data, m.start()),
                                 f"runtime block v{m.group(1).decode()}: the kernel writes its records "
                                 "into profiling_data")]
        where = ", ".join(p.name for p in model.files)
        return [Evidence(model.files[0], 1, f"no runtime block in {where}: nothing writes the records "
                         "into profiling_data", False)] if model.files else []
