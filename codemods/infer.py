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

from pathlib import Path

from optrace.codemods.layer_common import (
    CODE_LAYER_SHAPE,
    INDEX_VAR,
    NUMEL_MACRO,
    CppFunction,
    clean_bytes,
    include_edit,
    indent_unit,
    input_error,
    insert_lines,
    leading_ws,
    mask,
    output_uses,
    sizes_header_path,
    starts_line,
    top_level_return,
)
from optrace.codemods.op_def import profiling_index
from optrace.codemods.op_host_registry import INFER_DTYPE, INFER_SHAPE, HostFunction, host_functions
from optrace.engine.discovery import Layers
from optrace.engine.edits import Edit, line_start
from optrace.engine.plan import Plan

CODEMOD = "infer"


def before_final_return(path: Path, data: bytes, fn: CppFunction) -> tuple[int, bytes]:
    """(line start to insert at, indent) right before the body's final `return`, or
    before its closing brace when it does not end with one."""
    code = mask(data)
    ret = top_level_return(code, fn)
    at = ret[0] if ret is not None else fn.body_close
    if not starts_line(data, at):
        raise input_error(CODE_LAYER_SHAPE, f"cannot insert lines before the end of `{fn.name}`: "
                          "its last statement shares a line with other code", path, data, at)
    if ret is not None:
        return line_start(data, at), leading_ws(data, at)
    return line_start(data, at), leading_ws(data, fn.body_close) + indent_unit(data)


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


def infer_edits(plan: Plan, mode: str) -> list[Edit]:
    del mode  # the shape is the same in both modes (mode A's optional output may be null)
    layers = plan.analysis.layers
    targets = infer_functions(layers)
    files = list(dict.fromkeys([f.path for f in layers.found.get("infer", [])] + [t.path for t in targets]))
    edits: list[Edit] = []
    if not targets:
        return edits
    index = infer_index(plan, files)
    header_for = sizes_header_path(layers.op_dir, files)
    const = f"constexpr uint32_t {INDEX_VAR} = {index};".encode()
    included: set[Path] = set()
    for target in targets:
        path, fn, ctx = target.path, target.function, target.context
        data = clean_bytes(path)
        if _already_sets(data, fn, index):
            continue
        at, ind = before_final_return(path, data, fn)
        if target.role == INFER_SHAPE:
            unit = indent_unit(data)
            lines = [
                ind + const,
                ind + f"gert::Shape *optraceProfilingShape = {ctx}->GetOutputShape({INDEX_VAR});".encode(),
                ind + b"if (optraceProfilingShape != nullptr) {",
                ind + unit + b"optraceProfilingShape->SetDimNum(1);",
                ind + unit + f"optraceProfilingShape->SetDim(0, {NUMEL_MACRO});".encode(),
                ind + b"}",
            ]
            edits.append(insert_lines(path, data, at, lines, CODEMOD, "profiling_data shape"))
            inc = include_edit(path, data, header_for, CODEMOD) if path not in included else None
            included.add(path)
            if inc is not None:
                edits.append(inc)
        else:
            lines = [ind + const, ind + f"{ctx}->SetOutputDataType({INDEX_VAR}, ge::DT_INT64);".encode()]
            edits.append(insert_lines(path, data, at, lines, CODEMOD, "profiling_data dtype"))
    return edits


def _already_sets(data: bytes, fn: CppFunction, index: int) -> bool:
    """A hand-written infer that already handles the output at `index`."""
    return any(use.index == index for use in output_uses(data, fn.body_open, fn.body_close))
