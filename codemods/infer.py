"""Infer shape / dtype: `profiling_data` is 1-D int64 at its OpDef position (gate G2).

DESCRIPTION: in the function registered as the op's infer shape
(`IMPL_OP_INFERSHAPE(Op).InferShape(fn)`, `IMPL_OP(Op).InferShape(fn)`,
`this->SetInferShape(fn)`; `op_host_registry.py`), set the shape of the output at
profiling_data's index to `[OPTRACE_PROFILING_NUMEL]` (slots x PROF_SIZE_PER_CORE from
the upper bounds in the shared `optrace_<op>_profiling.h`, which the torch adapter
includes too); in the one registered as its infer dtype, set its dtype to int64. Both go
right before the function's final `return`; helpers taking the same context are never
edited.

The index is profiling_data's position among the OpDef outputs; without an OpDef it is
one past the highest output index the infer code uses, read whether it writes constants
(`constexpr ... OUTPUT_Y_INDEX = 1`), enumerators or literals. The new lines declare it
as a local constant, so nothing clashes with the file's own names. A null shape (the
output left out in mode A, where it is OPTIONAL) is skipped, not an error.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from optrace.codemods.layer import (
    EXAMPLE_INFER,
    Evidence,
    LayerExample,
    LayerModel,
    LocatingLayer,
    Operator,
    line_of,
    not_compared,
    output_ordinal,
    read_files,
    read_or_empty,
)
from optrace.codemods.layer_common import (
    CODE_LAYER_SHAPE,
    INDEX_VAR,
    NUMEL_MACRO,
    clean_bytes,
    fragment,
    include_edit,
    indent_unit,
    input_error,
    insert_lines,
    leading_ws,
    output_uses,
    sizes_header_path,
    starts_line,
)
from optrace.codemods.op_def import profiling_index
from optrace.codemods.op_host_registry import (
    INFER_DTYPE,
    INFER_SHAPE,
    TILING,
    HostFunction,
    Registration,
    host_functions,
    unresolved,
)
from optrace.engine.cpp import CppFunction, mask, top_level_return
from optrace.engine.discovery import LayerFile, Layers, SearchContext, is_host_source, repo_index
from optrace.engine.edits import Edit, line_start
from optrace.engine.plan import Plan
from optrace.engine.source import decode, match_bracket
from optrace.engine.vocabulary import names_profiling

CODEMOD = "infer"


_SUCCESS_RETURN_RE = re.compile(rb"\breturn\s+(?:ge::)?GRAPH_SUCCESS\s*;")
_FAILED_RE = re.compile(rb"\b(?:GRAPH_FAILED|FAILED)\b")


def before_final_return(path: Path, data: bytes, fn: CppFunction, lines: Callable[[bytes], list[bytes]],
                        codemod: str, note: str) -> list[Edit]:
    """`lines(indent)` inserted right before the body's final `return`, or before its
    closing brace when it does not end with one. A body whose end shares its line with
    other code (`{ return GRAPH_SUCCESS; }`) gets them as one fragment on that line.

    A body whose final return is its failure (`if (...) { ...; return
    ge::GRAPH_SUCCESS; } ... return ge::GRAPH_FAILED;`, ops-nn's avg_pool3_d infer) gets
    them before each `return GRAPH_SUCCESS;` statement instead: the success path is the
    one that must set the output (each such return a statement of its own block)."""
    code = mask(data)
    ret = top_level_return(code, fn)
    if ret is not None and _FAILED_RE.search(code, ret[0], ret[1]):
        successes = [m.start() for m in _SUCCESS_RETURN_RE.finditer(code, fn.body_open, fn.body_close)]
        if successes and all(starts_line(data, at) and code[:at].rstrip()[-1:] in (b";", b"{", b"}")
                             for at in successes):
            return [insert_lines(path, data, line_start(data, at), lines(leading_ws(data, at)), codemod, note)
                    for at in successes]
    at = ret[0] if ret is not None else fn.body_close
    if ret is None:
        chain = _returning_chain(code, fn)
        if chain is not None and starts_line(data, chain):
            # Every arm of the body's last `if` / `else` chain returns (avg_pool3_d's tiling):
            # before its brace the lines would never run; before the chain they always do.
            return [insert_lines(path, data, line_start(data, chain), lines(leading_ws(data, chain)), codemod,
                                 note)]
    if not starts_line(data, at):
        text = b" ".join(line.strip() for line in lines(b""))
        return [fragment(path, at, text + b" " if ret is not None else b" " + text + b" ", codemod, note)]
    ind = leading_ws(data, at) if ret is not None else leading_ws(data, fn.body_close) + indent_unit(data)
    return [insert_lines(path, data, line_start(data, at), lines(ind), codemod, note)]


_IF_RE = re.compile(rb"\bif\b")
_ELSE_RE = re.compile(rb"\s*else\b\s*(if\b)?")


def _returning_chain(code: bytes, fn: CppFunction) -> int | None:
    """The start of the body's last statement when it is an `if` / `else if` / `else`
    chain, with a final `else`, whose every arm is a block ending in `return ...;`."""
    body = code[fn.body_open + 1 : fn.body_close]
    depth = 0
    last_if = -1
    for i, c in enumerate(body):
        if c in b"({[":
            depth += 1
        elif c in b")}]":
            depth -= 1
        elif depth == 0 and c == 0x69 and _IF_RE.match(body, i) and (i == 0 or not (
                chr(body[i - 1]).isalnum() or body[i - 1] == 0x5F)):
            before = body[:i].rstrip()
            if not before or before[-1:] in (b";", b"{", b"}"):
                last_if = i
    if last_if < 0:
        return None
    i, n = last_if, len(body)
    while True:
        open_paren = body.find(b"(", i)
        close_paren = match_bracket(body, open_paren) if open_paren >= 0 else -1
        brace = close_paren + 1
        while brace < n and body[brace] in b" \t\r\n":
            brace += 1
        if close_paren < 0 or brace >= n or body[brace] != 0x7B:
            return None
        end = match_bracket(body, brace)
        if end < 0 or not re.search(rb"\breturn\b[^;]*;\s*$", body[brace + 1 : end]):
            return None
        m = _ELSE_RE.match(body, end + 1)
        if m is None or m.end() == end + 1:
            return None  # no final `else`: a path falls through
        if m.group(1) is not None:
            i = m.start(1)
            continue
        brace = m.end()
        while brace < n and body[brace] in b" \t\r\n":
            brace += 1
        if brace >= n or body[brace] != 0x7B:
            return None
        end = match_bracket(body, brace)
        returns = end >= 0 and re.search(rb"\breturn\b[^;]*;\s*$", body[brace + 1 : end]) is not None
        if not returns or body[end + 1 :].strip():
            return None
        return fn.body_open + 1 + last_if


def infer_index(plan: Plan, infer_files: list[Path]) -> int:
    """profiling_data's output index: from the OpDef, else after the infer's own outputs."""
    index = profiling_index(plan)
    if index is not None:
        return index
    highest = -1
    for path in infer_files:
        for use in output_uses(clean_bytes(path)):
            if use.index is not None:
                highest = max(highest, use.index)
    return highest + 1


def infer_functions(layers: Layers, clean: bool = True) -> list[HostFunction]:
    """The op's registered infer shape and infer dtype functions (`op_host_registry`)."""
    return host_functions(layers, INFER_SHAPE, clean) + host_functions(layers, INFER_DTYPE, clean)


@dataclass(frozen=True)
class InferTarget:
    """One place the infer codemod writes (located; the lines are `render_infer`'s): a
    registered infer function of the op that does not set profiling_data's output yet
    (before its final `return`), or the registration statement of functions the op
    registers but does not define (wrappers before it: `wrap_registered`). `index` is
    profiling_data's output index, `header` the sizes header a shape's file includes."""

    path: Path
    data: bytes  # the clean bytes
    index: int
    header: Path
    function: HostFunction | None = None
    registrations: tuple[Registration, ...] = ()

    @property
    def sizes(self) -> bool:
        """Setting the shape names the sizes macro (`[OPTRACE_PROFILING_NUMEL]`); the dtype does not."""
        roles = [self.function.role] if self.function is not None else [r.role for r in self.registrations]
        return INFER_SHAPE in roles


def locate_infer(plan: Plan, mode: str) -> list[InferTarget]:
    """The registered infer functions to edit, then the registrations to wrap. Raises
    what the OpDef's reading raises (profiling_data's index)."""
    # The shape is the same in both modes (mode A's optional output may be null).
    layers = plan.analysis.layers
    targets = infer_functions(layers)
    files = list(dict.fromkeys([f.path for f in layers.found.get("infer", [])] + [t.path for t in targets]))
    wrapped = [r for role in (INFER_SHAPE, INFER_DTYPE) for r in unresolved(layers, role)
               if r.function and r.statement >= 0]
    if not targets and not wrapped:
        op_def = layers.found.get("op_def", [])
        if mode == "B" and op_def and not unresolved_any(layers):
            # Mode B makes profiling_data a required output of the OpDef: with no infer
            # function of the op in its host files (ops-nn's conv2d_v2 registers its
            # infer shape in conv/common/), nothing would set its shape or dtype.
            raise input_error(CODE_LAYER_SHAPE, "no infer shape / dtype function of the op is registered "
                              "in its host files (the registration may be in a shared folder): nothing would "
                              "set the required profiling_data's shape; list that file under `[layers] "
                              "infer` in optrace.toml", op_def[0].path, line=op_def[0].line)
        return []
    index = infer_index(plan, files)
    header_for = sizes_header_path(layers.op_dir, files)
    out: list[InferTarget] = []
    for target in targets:
        data = clean_bytes(target.path)
        if not _already_sets(data, target.function, index):
            out.append(InferTarget(target.path, data, index, header_for, function=target))
    by_statement: dict[tuple[Path, int], list[Registration]] = {}
    for reg in wrapped:
        by_statement.setdefault((reg.path, reg.statement), []).append(reg)
    for (path, _), regs in by_statement.items():
        out.append(InferTarget(path, clean_bytes(path), index, header_for, registrations=tuple(regs)))
    return out


def infer_edits(plan: Plan, mode: str) -> list[Edit]:
    return render_infer(plan, locate_infer(plan, mode))


def render_infer(plan: Plan, located: Sequence[InferTarget]) -> list[Edit]:
    """The shape / dtype lines of each located function, the wrappers of each located
    registration, and the sizes header's include once in each file that sets the shape."""
    camel = plan.analysis.layers.camel
    edits: list[Edit] = []
    included: set[Path] = set()
    for located_at in located:
        path, data, header_for = located_at.path, located_at.data, located_at.header
        const = f"constexpr uint32_t {INDEX_VAR} = {located_at.index};".encode()
        target = located_at.function
        if target is None:
            regs = list(located_at.registrations)
            edits += wrap_registered(regs, data, camel, const)
            if any(r.role == INFER_SHAPE for r in regs) and path not in included:
                included.add(path)
                inc = include_edit(path, data, header_for, CODEMOD)
                if inc is not None:
                    edits.append(inc)
            continue
        fn, ctx = target.function, target.context
        if target.role == INFER_SHAPE:
            unit = indent_unit(data)

            def shape_lines(ind: bytes, ctx: str = ctx, unit: bytes = unit,
                            const: bytes = const) -> list[bytes]:
                return [
                    ind + const,
                    ind + f"gert::Shape *optraceProfilingShape = "
                          f"{ctx}->GetOutputShape({INDEX_VAR});".encode(),
                    ind + b"if (optraceProfilingShape != nullptr) {",
                    ind + unit + b"optraceProfilingShape->SetDimNum(1);",
                    ind + unit + f"optraceProfilingShape->SetDim(0, {NUMEL_MACRO});".encode(),
                    ind + b"}",
                ]

            edits.extend(before_final_return(path, data, fn, shape_lines, CODEMOD, "profiling_data shape"))
            inc = include_edit(path, data, header_for, CODEMOD) if path not in included else None
            included.add(path)
            if inc is not None:
                edits.append(inc)
        else:
            def dtype_lines(ind: bytes, ctx: str = ctx, const: bytes = const) -> list[bytes]:
                return [ind + const, ind + f"{ctx}->SetOutputDataType({INDEX_VAR}, ge::DT_INT64);".encode()]

            edits.extend(before_final_return(path, data, fn, dtype_lines, CODEMOD, "profiling_data dtype"))
    return edits


_WRAPPED = {INFER_SHAPE: ("InferShape", "gert::InferShapeContext"),
            INFER_DTYPE: ("InferDataType", "gert::InferDataTypeContext"),
            TILING: ("Tiling", "gert::TilingContext")}


def wrap_registered(regs: list[Registration], data: bytes, camel: str, const: bytes) -> list[Edit]:
    """Infer / tiling functions the op registers but does not define (a shared library's
    `InferShape4Elewise`, `ConvTilingFunc`) cannot be edited: wrappers defined right
    before the registration call them and then handle profiling_data, and the
    registration chain gains a second `.InferShape(wrapper)` after the first (the builder
    keeps the last), all as marked insertions strip removes whole."""
    at = line_start(data, regs[0].statement)
    ind = data[at : regs[0].statement]
    ind = ind if not ind.strip() else b""
    unit = indent_unit(data)
    lines: list[bytes] = []
    edits: list[Edit] = []
    for reg in regs:
        method, context = _WRAPPED[reg.role]
        wrapper = f"Optrace{method}{camel}"
        if reg.role == INFER_SHAPE:
            sets = [b"gert::Shape *optraceProfilingShape = context->GetOutputShape("
                    + INDEX_VAR.encode() + b");",
                    b"if (optraceProfilingShape != nullptr) {",
                    unit + b"optraceProfilingShape->SetDimNum(1);",
                    unit + f"optraceProfilingShape->SetDim(0, {NUMEL_MACRO});".encode(),
                    b"}"]
        elif reg.role == INFER_DTYPE:
            sets = [f"context->SetOutputDataType({INDEX_VAR}, ge::DT_INT64);".encode()]
        else:  # tiling: the same description check an edited tiling function gets
            sets = [b"const gert::CompileTimeTensorDesc *optraceDesc = "
                    b"context->GetOutputDesc(" + INDEX_VAR.encode() + b");",
                    b"if (optraceDesc != nullptr && "
                    b"optraceDesc->GetDataType() != ge::DT_INT64) {",
                    unit + b"return ge::GRAPH_FAILED;", b"}"]
        body = [const, f"ge::graphStatus optraceStatus = {reg.function}(context);".encode(),
                b"if (optraceStatus != ge::GRAPH_SUCCESS) {", unit + b"return optraceStatus;", b"}",
                *sets, b"return optraceStatus;"]
        lines += [ind + f"static ge::graphStatus {wrapper}({context} *context)".encode(), ind + b"{",
                  *[ind + unit + line for line in body], ind + b"}"]
        edits.append(fragment(reg.path, reg.argument_end, f").{method}({wrapper}".encode(), CODEMOD,
                              f"registers the {reg.role} wrapper"))
    note = "wrapper of " + ", ".join(r.function for r in regs)
    return [insert_lines(regs[0].path, data, at, lines, CODEMOD, note), *edits]


def _already_sets(data: bytes, fn: CppFunction, index: int) -> bool:
    """A hand-written infer that already handles the output at `index`."""
    return any(use.index == index for use in output_uses(data, fn.body_open, fn.body_close))




class InferLayer(LocatingLayer[InferTarget]):
    NAME: ClassVar[str] = "infer"
    DESCRIPTION: ClassVar[str] = "infer shape / dtype functions registered for the op"
    FOUND_KEY: ClassVar[str | None] = "infer"
    TITLE: ClassVar[str] = "infer shape"
    EXAMPLES: ClassVar[tuple[LayerExample, ...]] = (LayerExample(
        path="demo_op/op_host/demo_op_infershape.cpp",
        files={"demo_op/op_host/demo_op_infershape.cpp": EXAMPLE_INFER},
        changes=(
            ('#include "register/op_impl_registry.h"\n',
             '#include "register/op_impl_registry.h"\n#include "optrace_demo_op_profiling.h"  // optrace\n'),
            ("    *yShape = *xShape;\n",
             "    *yShape = *xShape;\n"
             "    constexpr uint32_t optraceProfilingDataIndex = 1;  // optrace\n"
             "    gert::Shape *optraceProfilingShape = context->GetOutputShape(optraceProfilingDataIndex);"
             "  // optrace\n"
             "    if (optraceProfilingShape != nullptr) {  // optrace\n"
             "        optraceProfilingShape->SetDimNum(1);  // optrace\n"
             "        optraceProfilingShape->SetDim(0, OPTRACE_PROFILING_NUMEL);  // optrace\n"
             "    }  // optrace\n"),
            ("    context->SetOutputDataType(0, context->GetInputDataType(0));\n",
             "    context->SetOutputDataType(0, context->GetInputDataType(0));\n"
             "    constexpr uint32_t optraceProfilingDataIndex = 1;  // optrace\n"
             "    context->SetOutputDataType(optraceProfilingDataIndex, ge::DT_INT64);  // optrace\n"),
        ),
    ),)

    def search(self, ctx: SearchContext) -> list[LayerFile]:
        out: list[LayerFile] = []
        for path in ctx.operator_cpp:
            code = ctx.code(path)
            # A graph fusion pass runs InferShape on the nodes it builds: it registers none.
            if (is_host_source(path, ctx.op_dir) and not path.name.lower().endswith(".h")
                    and "fusion_pass" not in path.parts
                    and re.search(rb"InferShape|IMPL_OP_INFERSHAPE|InferDataType", code)):
                out.append(ctx.at(path, code, rb"InferShape\w*\s*\(", "infer shape"))
        return out

    def find(self, layers: Layers) -> list[Path]:
        return [f.path for f in layers.found.get("infer", [])]

    def read(self, op: Operator, files: list[Path]) -> LayerModel:
        # The registered functions may sit in any op_host file (found through the registration).
        targets = [t.path for t in infer_functions(op.layers, clean=False)]
        return read_files(self.NAME, op, list(dict.fromkeys([*files, *targets])))

    def locate(self, plan: Plan, mode: str) -> list[InferTarget]:
        return locate_infer(plan, mode)

    def render(self, plan: Plan, mode: str, located: Sequence[InferTarget]) -> list[Edit]:
        return render_infer(plan, located)

    def absent(self, op: Operator) -> list[Evidence] | None:
        """Mode B with an OpDef and no infer function of the op in its host files: nothing
        sizes the required profiling_data (apply refuses B there; by hand, G2 fails)."""
        op_def = op.layers.found.get("op_def", [])
        if (op.mode != "B" or not op_def or op.facts.output_index is None
                or unresolved_any(op.layers, clean=False)):
            return None
        return [Evidence(op_def[0].path, op_def[0].line, "no infer shape / dtype function of the op in its "
                         "host files: nothing sets the required profiling_data's shape", False)]

    def verify(self, model: LayerModel) -> list[Evidence]:
        layers = model.op.layers
        index = model.op.facts.output_index
        ev: list[Evidence] = []
        for target in infer_functions(layers, clean=False):  # the registered ones, never helpers
            fn, path = target.function, target.path
            what = "shape" if target.role == INFER_SHAPE else "dtype"
            if index is None:
                ev.append(not_compared(path, f"infer {what} `{fn.name}`"))
                continue
            data = model.data.get(path, b"")
            uses = output_uses(data, fn.body_open, fn.body_close)
            named = [u for u in uses if names_profiling(u.expr)]
            hit = named or [u for u in uses if u.index == index]
            if not hit:
                ev.append(Evidence(path, fn.line, f"infer `{fn.name}` never sets the {what} of "
                                   f"profiling_data, {output_ordinal(index)}", False))
                continue
            u = hit[0]
            ok = u.index == index
            ev.append(Evidence(path, line_of(data, u.offset),
                               f"infer {what}: profiling_data is {output_ordinal(u.index)}"
                               + ("" if ok else f", the OpDef has it as output {index + 1}"), ok))
        if not ev:
            ev.extend(_misspelt_registrations(model, layers))
        for role in (INFER_SHAPE, INFER_DTYPE):
            for reg in unresolved(layers, role, clean=False):
                ev.append(Evidence(reg.path, reg.line,
                                   f"{role} is registered as `{reg.function or 'a lambda'}`, which is not "
                                   "defined in the op's host files: nothing sets profiling_data's "
                                   f"{role.split()[1]} (write it by hand)", False))
        return ev


def unresolved_any(layers: Layers, clean: bool = True) -> bool:
    """Whether the op registers an infer function its host files do not define (G2 says
    so on its own)."""
    return any(unresolved(layers, role, clean=clean) for role in (INFER_SHAPE, INFER_DTYPE))


_IMPL_RE = re.compile(rb"\bIMPL_OP(?:_INFERSHAPE|_OPTILING)?\s*\(\s*(\w+)\s*\)")
_TILING_REG_RE = re.compile(rb"\bIMPL_OP_OPTILING\s*\(\s*\w+\s*\)")


def _misspelt_registrations(model: LayerModel, layers: Layers) -> list[Evidence]:
    """An infer file with no registration for the op, but one for a name a letter or two
    away (ops-nn's masked_scatter registers `MskedScatter`): the op has no infer at run
    time, for any of its outputs. Said with the name, as a warning (OT456), not a G2
    failure: the defect predates optrace, aclnn calls (which allocate the outputs
    themselves) run without an infer, and an error would block every commit of a
    pre-commit `check` on a line optrace did not write; `--strict` makes it one.

    Only a name that is nothing else: not the op's with a suffix (`DemoOpV2`, a sibling
    op), not named anywhere else in the repository (another op's OpDef), and with the op
    itself never named in these files' code (registered through a macro of the project,
    which optrace does not read): those stay "infer not read", a G2 failure. A name far
    from the op's that another file of the repository names is another operator's infer
    kept in this folder: said, and passing, since this op has no infer to order."""
    op_type = layers.camel
    own = re.compile(r"\b" + re.escape(op_type) + r"\b")
    # A tiling file read beside the infer ones (it says InferShape somewhere) names the op
    # for its tiling: not where a project macro would register the op's infer.
    named = any(own.search(decode(mask(data))) for data in model.data.values()
                if not _TILING_REG_RE.search(data))
    read = {p.resolve() for p in model.data}
    out = []
    for path, data in model.data.items():
        for m in _IMPL_RE.finditer(data) if not named else ():
            name = m.group(1).decode()
            near = difflib.SequenceMatcher(None, name.lower(), op_type.lower()).ratio() >= 0.85
            versioned = name.lower().startswith(op_type.lower()) or op_type.lower().startswith(name.lower())
            elsewhere = [f for f in repo_index(layers.repo_root).mentioning(name.encode())
                         if f.resolve() not in read and re.search(rb"\b" + re.escape(name.encode()) + rb"\b",
                                                              read_or_empty(f))]
            if name != op_type and not near and elsewhere:
                # Another operator's infer kept in this folder (`PReluGrad`'s beside the op
                # `PReluGradUpdate`): not this op's, so no order of its outputs is at stake.
                out.append(Evidence(path, line_of(data, m.start()), f"registers the infer functions of "
                                    f"`{name}`, another operator (named in {elsewhere[0].name}), not "
                                    f"`{op_type}`'s: this op registers none here, so optrace edits none"))
            if name != op_type and near and not versioned and not elsewhere:
                out.append(Evidence(path, line_of(data, m.start()), f"registers its infer functions for "
                                    f"`{name}`, not the op `{op_type}` (a misspelling?): the op has no infer "
                                    "registered, for profiling_data or any other output (graph mode cannot "
                                    "infer their shapes), so optrace edits none; fix the name and apply "
                                    "again", warning=True))
    return out
