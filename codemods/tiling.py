"""Tiling: where the tiling function describes outputs, profiling_data at the same position.

DESCRIPTION: when the function registered as the op's tiling
(`IMPL_OP_OPTILING(Op).Tiling(fn)`, `IMPL_OP(Op).Tiling(fn)`, `this->AICore().SetTiling(fn)`;
`op_host_registry.py`) reads output descriptions or shapes (`context->GetOutputDesc(i)`,
`GetOutputShape(i)`, ... — itself or through the functions it calls), add the same
description for profiling_data at its OpDef index, in that registered function: a local
index constant and a check that, when the output is present (it is OPTIONAL in mode A),
its dtype is int64 — failing the tiling the way the function's return type fails
(`ge::GRAPH_FAILED` or its own failure status, `false` for bool, a bare `return` for
void). Helpers taking the same context are never edited; a tiling function that never
looks at outputs is left alone (nothing there depends on output positions).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from optrace.codemods.infer import before_final_return, wrap_registered
from optrace.codemods.layer import (
    Evidence,
    LayerExample,
    LayerModel,
    LocatingLayer,
    Operator,
    line_of,
    not_compared,
    output_ordinal,
    read_files,
)
from optrace.codemods.layer_common import INDEX_VAR, clean_bytes, indent_unit, output_uses
from optrace.codemods.op_def import profiling_index
from optrace.codemods.op_host_registry import (
    TILING,
    HostFunction,
    Registration,
    callees,
    host_functions,
    unresolved,
)
from optrace.engine.cpp import CppFunction, mask
from optrace.engine.discovery import LayerFile, Layers, SearchContext, is_host_source
from optrace.engine.edits import Edit
from optrace.engine.plan import Plan
from optrace.engine.vocabulary import names_profiling

CODEMOD = "tiling"


def tiling_functions(layers: Layers, clean: bool = True) -> list[HostFunction]:
    """The op's registered tiling functions (`op_host_registry`) that read outputs — in
    their own body or in a function of the host files they call."""
    out = []
    for target in host_functions(layers, TILING, clean):
        reached = callees(layers, target, clean)
        if any(output_uses(data, f.body_open, f.body_close) for _p, data, f in reached):
            out.append(target)
    return out


def failure_value(data: bytes, fn: CppFunction) -> bytes | None:
    """What the function returns to fail, matching its return type: `false` for bool,
    nothing for void, else its own failure status (`ge::GRAPH_FAILED` by default)."""
    rtype = re.sub(rb"\s+", b" ", data[fn.type_span[0] : fn.type_span[1]]).strip() if fn.type_span else b""
    if rtype == b"bool":
        return b"false"
    if rtype == b"void":
        return None
    m = re.search(rb"return\s+((?:ge::)?GRAPH_FAILED|[\w:]*FAILED\w*)\s*;",
                  mask(data)[fn.body_open : fn.body_close])
    return m.group(1) if m else b"ge::GRAPH_FAILED"


@dataclass(frozen=True)
class TilingTarget:
    """One place the tiling codemod writes (located; the check is `render_tiling`'s): a
    registered tiling function reading outputs but not profiling_data's (before its final
    `return`), or the registration statement of tiling functions registered from a
    library (a wrapper before it). Its text never names the sizes macro."""

    path: Path
    data: bytes  # the clean bytes
    index: int  # profiling_data's OpDef index
    function: HostFunction | None = None
    registrations: tuple[Registration, ...] = ()
    sizes: bool = False


def locate_tiling(plan: Plan, mode: str) -> list[TilingTarget]:
    """The tiling functions to edit, then the registrations to wrap (none without an
    OpDef). Raises what the OpDef's reading raises (profiling_data's index)."""
    del mode  # the description is the same in both modes (the check tolerates absence)
    layers = plan.analysis.layers
    index = profiling_index(plan)
    if index is None:
        return []  # no OpDef: nothing positions the output
    out: list[TilingTarget] = []
    for target in tiling_functions(layers):
        fn = target.function
        data = clean_bytes(target.path)
        if not any(use.index == index for use in output_uses(data, fn.body_open, fn.body_close)):
            out.append(TilingTarget(target.path, data, index, function=target))
    # A tiling registered from a library (`ConvTilingFunc`): what it reads is unknown, so
    # a wrapper at the registration adds the description check after it.
    by_statement: dict[tuple[Path, int], list[Registration]] = {}
    for reg in unresolved(layers, TILING):
        if reg.function and reg.statement >= 0:
            by_statement.setdefault((reg.path, reg.statement), []).append(reg)
    for (path, _), regs in by_statement.items():
        out.append(TilingTarget(path, clean_bytes(path), index, registrations=tuple(regs)))
    return out


def tiling_edits(plan: Plan, mode: str) -> list[Edit]:
    return render_tiling(plan, locate_tiling(plan, mode))


def render_tiling(plan: Plan, located: Sequence[TilingTarget]) -> list[Edit]:
    """The description check in each located function, a wrapper at each located registration."""
    edits: list[Edit] = []
    for located_at in located:
        path, data, index = located_at.path, located_at.data, located_at.index
        target = located_at.function
        if target is None:
            const = f"constexpr uint32_t {INDEX_VAR} = {index};".encode()
            edits += wrap_registered(list(located_at.registrations), data, plan.analysis.layers.camel, const)
            continue
        fn, ctx = target.function, target.context
        unit = indent_unit(data)
        failure = failure_value(data, fn)

        def lines(ind: bytes, ctx: str = ctx, unit: bytes = unit,
                  failure: bytes | None = failure, index: int = index) -> list[bytes]:
            return [
                ind + f"constexpr uint32_t {INDEX_VAR} = {index};".encode(),
                ind + f"const gert::CompileTimeTensorDesc *optraceDesc = "
                      f"{ctx}->GetOutputDesc({INDEX_VAR});".encode(),
                ind + b"if (optraceDesc != nullptr && "
                      b"optraceDesc->GetDataType() != ge::DT_INT64) {",
                ind + unit + b"return" + (b" " + failure if failure is not None else b"") + b";",
                ind + b"}",
            ]

        edits.extend(before_final_return(path, data, fn, lines, CODEMOD, "profiling_data description"))
    return edits


# A tiling function that reads an output: it describes profiling_data's too.
_EXAMPLE_TILING = """\
#include "register/op_impl_registry.h"

namespace optiling {
static ge::graphStatus TilingDemoOp(gert::TilingContext* context)
{
    auto y = context->GetOutputDesc(0);
    if (y == nullptr || y->GetDataType() != ge::DT_FLOAT) {
        return ge::GRAPH_FAILED;
    }
    context->SetBlockDim(8);
    return ge::GRAPH_SUCCESS;
}

IMPL_OP_OPTILING(DemoOp).Tiling(TilingDemoOp);
}  // namespace optiling
"""


class TilingLayer(LocatingLayer[TilingTarget]):
    NAME: ClassVar[str] = "tiling"
    DESCRIPTION: ClassVar[str] = "tiling function registered for the op"
    FOUND_KEY: ClassVar[str | None] = "tiling"
    TITLE: ClassVar[str] = "tiling"
    EXAMPLES: ClassVar[tuple[LayerExample, ...]] = (LayerExample(
        path="demo_op/op_host/demo_op_tiling.cpp",
        files={"demo_op/op_host/demo_op_tiling.cpp": _EXAMPLE_TILING},
        changes=(("    context->SetBlockDim(8);\n",
                  "    context->SetBlockDim(8);\n"
                  "    constexpr uint32_t optraceProfilingDataIndex = 1;  // optrace\n"
                  "    const gert::CompileTimeTensorDesc *optraceDesc = "
                  "context->GetOutputDesc(optraceProfilingDataIndex);  // optrace\n"
                  "    if (optraceDesc != nullptr"
                  " && optraceDesc->GetDataType() != ge::DT_INT64) {"
                  "  // optrace\n"
                  "        return ge::GRAPH_FAILED;  // optrace\n"
                  "    }  // optrace\n"),),
    ),)

    def search(self, ctx: SearchContext) -> list[LayerFile]:
        return [ctx.at(path, ctx.code(path), rb"Tiling\w*\s*\(", "tiling function")
                for path in ctx.operator_cpp
                if is_host_source(path, ctx.op_dir) and "tiling" in path.name.lower()
                and path.name.lower().endswith((".cpp", ".cc")) and ctx.data(path) is not None]

    def find(self, layers: Layers) -> list[Path]:
        return [f.path for f in layers.found.get("tiling", [])]

    def read(self, op: Operator, files: list[Path]) -> LayerModel:
        targets = [t.path for t in tiling_functions(op.layers, clean=False)]
        return read_files(self.NAME, op, list(dict.fromkeys([*files, *targets])))

    def locate(self, plan: Plan, mode: str) -> list[TilingTarget]:
        return locate_tiling(plan, mode)

    def render(self, plan: Plan, mode: str, located: Sequence[TilingTarget]) -> list[Edit]:
        return render_tiling(plan, located)

    def verify(self, model: LayerModel) -> list[Evidence]:
        index = model.op.facts.output_index
        targets = tiling_functions(model.op.layers, clean=False)  # registered, reading outputs
        ev: list[Evidence] = []
        for target in targets:
            fn, path = target.function, target.path
            if index is None:
                ev.append(not_compared(path, f"tiling `{fn.name}`"))
                continue
            data = model.data.get(path, b"")
            uses = output_uses(data, fn.body_open, fn.body_close)
            named = [u for u in uses if names_profiling(u.expr)] or [u for u in uses if u.index == index]
            if not named:
                ev.append(Evidence(path, fn.line, f"tiling `{fn.name}` describes outputs but not "
                                   f"profiling_data, {output_ordinal(index)}", False))
                continue
            ok = named[0].index == index
            ev.append(Evidence(path, line_of(data, named[0].offset),
                               f"tiling: profiling_data is {output_ordinal(named[0].index)}", ok))
        if not targets:
            # Most tiling functions never name the outputs: then there is no order to keep.
            # Without a registered tiling function nothing was read (the gate says so).
            for host in host_functions(model.op.layers, TILING, clean=False):
                ev.append(Evidence(host.path, host.function.line, f"tiling `{host.function.name}` does not "
                                   "describe the outputs: no order to keep"))
        if not ev and model.data and not any(output_uses(data) for data in model.data.values()):
            # Tiling code registered elsewhere (a shared template) that never reads an output
            # here: nothing in these files has an order to keep, and apply edits none.
            ev.extend(Evidence(path, 1, "tiling code that reads no output: no order to keep")
                      for path in model.data)
        return ev
