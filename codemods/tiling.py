"""Tiling: where the tiling function describes outputs, profiling_data at the same position.

DESCRIPTION: when the host tiling function reads output descriptions or shapes
(`context->GetOutputDesc(i)`, `GetOutputShape(i)`, ...), add the same description for
profiling_data at its OpDef index: a local index constant and a check that, when the
output is present (it is OPTIONAL in mode A), its dtype is int64 — failing the tiling
the way the function already fails. A tiling function that never looks at outputs is
left alone (nothing there depends on output positions).
"""

from __future__ import annotations

import re

from optrace.codemods.infer import before_final_return
from optrace.codemods.layer_common import (
    INDEX_VAR,
    CppFunction,
    clean_bytes,
    functions,
    indent_unit,
    insert_lines,
    mask,
    output_uses,
    param_name,
)
from optrace.codemods.op_def import profiling_index
from optrace.engine.edits import Edit
from optrace.engine.plan import Plan

CODEMOD = "tiling"
TILING_CONTEXT = b"TilingContext"


def tiling_functions(data: bytes) -> list[tuple[CppFunction, str]]:
    """Definitions taking a `gert::TilingContext *` that read outputs: (function, name)."""
    out = []
    for fn in functions(data):
        if fn.body_open < 0:
            continue
        ctx = next((param_name(data, s) for s in fn.params if TILING_CONTEXT in data[s[0] : s[1]]), None)
        if ctx is None:
            continue
        if output_uses(data, fn.body_open, fn.body_close):
            out.append((fn, ctx))
    return out


def _failure(data: bytes, fn: CppFunction) -> bytes:
    """The function's own failure return value (`ge::GRAPH_FAILED` by default)."""
    m = re.search(rb"return\s+((?:ge::)?GRAPH_FAILED|[\w:]*FAILED\w*)\s*;",
                  mask(data)[fn.body_open : fn.body_close])
    return m.group(1) if m else b"ge::GRAPH_FAILED"


def tiling_edits(plan: Plan, mode: str) -> list[Edit]:
    del mode  # the description is the same in both modes (the check tolerates absence)
    layers = plan.analysis.layers
    index = profiling_index(plan)
    if index is None:
        return []  # no OpDef: nothing positions the output
    edits: list[Edit] = []
    for layer_file in layers.found.get("tiling", []):
        path = layer_file.path
        data = clean_bytes(path)
        unit = indent_unit(data)
        for fn, ctx in tiling_functions(data):
            if any(use.index == index for use in output_uses(data, fn.body_open, fn.body_close)):
                continue
            at, ind = before_final_return(path, data, fn)
            lines = [
                ind + f"constexpr uint32_t {INDEX_VAR} = {index};".encode(),
                ind + f"const gert::CompileTimeTensorDesc *optraceProfilingDesc = "
                      f"{ctx}->GetOutputDesc({INDEX_VAR});".encode(),
                ind + b"if (optraceProfilingDesc != nullptr && "
                      b"optraceProfilingDesc->GetDataType() != ge::DT_INT64) {",
                ind + unit + b"return " + _failure(data, fn) + b";",
                ind + b"}",
            ]
            edits.append(insert_lines(path, data, at, lines, CODEMOD, "profiling_data description"))
    return edits
