"""Graph-mode converters (torchair) declare and return profiling_data too (G2).

DESCRIPTION: in mode B, every function decorated with
`@register_fx_node_ge_converter(torch.ops.<ns>.<op>[.overload])` builds the GE op with
one more output: the `outputs=[...]` list (or tuple) literal of its
`custom_op("<Op>", ..., outputs=[...])` call ends with `"profiling_data"` — the OpDef's
name of the new output. What the converter returns follows:

- `return ge.custom_op(...)`, or `out = ge.custom_op(...)` ... `return out`: the call's
  value carries the extra output, nothing else changes;
- `y, z = ge.custom_op(...)` ... `return y, z` (or `(y, z)`, `[y, z]`): the unpacking
  takes one more name, `profiling_data`, and every such return gives it back last.

Any other shape (no `custom_op(..., outputs=[...])`, several GE ops without one named
after the op, a return that is not one of the above) is refused with OT313 (`file:line`,
exit 2, nothing written): a guessed graph would differ from the eager op. Rewritten
statements are preceded by `# optrace-edit N` (N lines of the rewrite follow): strip takes
out what optrace added to them by its shape (its structural inverse), nothing encoded.
Mode A changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from optrace.codemods.layer import Evidence, LayerModel
from optrace.codemods.layer_common import CODE_LAYER_SHAPE, PROFILING_OUTPUT, input_error
from optrace.codemods.python_callers_cst import (
    PythonSource,
    dotted,
    mode_b_sources,
    read_each,
    rewrite_insertions,
)
from optrace.codemods.python_fakes_cst import op_of, own_returns
from optrace.codemods.python_files import converter_files, expected_returns
from optrace.engine.diagnostics import InputError
from optrace.engine.edits import Edit
from optrace.engine.names import same_op
from optrace.engine.plan import Plan

CODEMOD = "graph-converters"
CONVERTER_DECORATOR = "register_fx_node_ge_converter"


def converters(src: PythonSource, names: Sequence[str]) -> list[cst.FunctionDef]:
    """Functions converting the op (any of its torch names) for torchair."""
    wanted = set(names)
    out: list[cst.FunctionDef] = []

    class Finder(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            for dec in node.decorators:
                d = dec.decorator
                if isinstance(d, cst.Call) and dotted(d.func).split(".")[-1] == CONVERTER_DECORATOR \
                        and d.args and op_of(d.args[0].value) in wanted:
                    out.append(node)

    src.wrapper.visit(Finder())
    return out


def custom_op_calls(fn: cst.FunctionDef) -> list[tuple[cst.Call, cst.List | cst.Tuple]]:
    """`custom_op(...)` calls of the converter with an `outputs=` list / tuple literal."""
    found: list[tuple[cst.Call, cst.List | cst.Tuple]] = []

    class Calls(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            if dotted(node.func).split(".")[-1] != "custom_op":
                return
            for arg in node.args:
                if arg.keyword is not None and arg.keyword.value == "outputs" \
                        and isinstance(arg.value, (cst.List, cst.Tuple)):
                    found.append((node, arg.value))

    fn.visit(Calls())
    return found


def output_names(outputs: cst.List | cst.Tuple) -> list[str | None]:
    out: list[str | None] = []
    for el in outputs.elements:
        value = el.value.evaluated_value if isinstance(el.value, cst.SimpleString) else None
        out.append(value if isinstance(value, str) else None)
    return out


def the_call(src: PythonSource, fn: cst.FunctionDef, camel: str) -> tuple[cst.Call, cst.List | cst.Tuple]:
    """The GE op the converter builds for the op: the only `custom_op`, or the one named
    after the op."""
    calls = custom_op_calls(fn)
    if len(calls) > 1:
        named = [c for c in calls if c[0].args and isinstance(c[0].args[0].value, cst.SimpleString)
                 and isinstance(c[0].args[0].value.evaluated_value, str)
                 and same_op(c[0].args[0].value.evaluated_value, camel)]
        calls = named
    if len(calls) != 1:
        raise input_error(CODE_LAYER_SHAPE, f"converter `{fn.name.value}` does not build one "
                          f"`custom_op(\"{camel}\", ..., outputs=[...])` to declare profiling_data on",
                          src.path, line=src.line_of(fn))
    return calls[0]


def _unsupported(src: PythonSource, node: cst.CSTNode, fn: cst.FunctionDef, why: str) -> Exception:
    return input_error(CODE_LAYER_SHAPE, f"converter `{fn.name.value}`: {why}; declare profiling_data "
                       "by hand or reshape it as `return custom_op(..., outputs=[...])`", src.path,
                       line=src.line_of(node))


def _converter_spans(src: PythonSource, fn: cst.FunctionDef, camel: str
                     ) -> list[tuple[int, int, list[tuple[int, bytes]]]]:
    call, outputs = the_call(src, fn, camel)
    names = output_names(outputs)
    if PROFILING_OUTPUT in names:
        return []  # declared by hand
    if not outputs.elements:
        raise _unsupported(src, call, fn, "`outputs=` is empty")
    first = outputs.elements[0].value
    q = first.quote[0] if isinstance(first, cst.SimpleString) else '"'  # the file's quote style
    grow_list = (src.span(outputs.elements[-1].value)[1], f", {q}{PROFILING_OUTPUT}{q}".encode())
    stmt = src.parent(call)
    while stmt is not None and not isinstance(stmt, (cst.Return, cst.Assign, cst.SimpleStatementLine)):
        stmt = src.parent(stmt)
    returns = own_returns(fn)
    spans: list[tuple[int, int, list[tuple[int, bytes]]]] = []
    if isinstance(stmt, cst.Return) and stmt.value is call:
        for ret in returns:
            if ret is not stmt:
                raise _unsupported(src, ret, fn, "a second `return`")
        return [(*src.span(stmt), [grow_list])]
    if not (isinstance(stmt, cst.Assign) and stmt.value is call and len(stmt.targets) == 1):
        raise _unsupported(src, call, fn, "the GE op's outputs are not returned or unpacked")
    target = stmt.targets[0].target
    if isinstance(target, cst.Name):
        for ret in returns:
            if not (isinstance(ret.value, cst.Name) and ret.value.value == target.value):
                raise _unsupported(src, ret, fn, f"a `return` that is not `return {target.value}`")
        return [(*src.span(stmt), [grow_list])]
    if not isinstance(target, (cst.Tuple, cst.List)) or not target.elements:
        raise _unsupported(src, call, fn, "the GE op's outputs are unpacked into something else than names")
    var = PROFILING_OUTPUT
    spans.append((*src.span(stmt), [(src.span(target.elements[-1].value)[1], f", {var}".encode()),
                                    grow_list]))
    if not returns:
        raise _unsupported(src, fn, fn, "it returns nothing")
    unpacked = {el.value.value for el in target.elements if isinstance(el.value, cst.Name)}
    for ret in returns:
        value = ret.value
        if not isinstance(value, (cst.Tuple, cst.List)) or not value.elements or not all(
                isinstance(el.value, cst.Name) and el.value.value in unpacked for el in value.elements):
            raise _unsupported(src, ret, fn, "a `return` that is not a tuple of the unpacked outputs")
        spans.append((*src.span(ret), [(src.span(value.elements[-1].value)[1], f", {var}".encode())]))
    return spans


def graph_converter_edits(plan: Plan, mode: str) -> list[Edit]:
    layers = plan.analysis.layers
    found = mode_b_sources(plan, mode, converter_files(layers))
    if found is None:
        return []
    sources, names = found
    edits: list[Edit] = []
    for src in sources:
        spans: list[tuple[int, int, list[tuple[int, bytes]]]] = []
        for fn in converters(src, names):
            spans.extend(_converter_spans(src, fn, layers.camel))
        edits.extend(rewrite_insertions(src.path, src.data, spans, CODEMOD, "declares profiling_data"))
    return edits


def converter_evidence(model: LayerModel) -> list[Evidence]:
    """Each torchair converter's custom-op call has profiling_data as its last GE output."""
    layers = model.op.layers
    expected = expected_returns(model.op)
    want = "" if expected is None else f" of {expected}"
    ev: list[Evidence] = []
    for path, src, fns in read_each(model, converters, ev):
        for fn in fns:
            try:
                call, outputs = the_call(src, fn, layers.camel)
            except InputError as exc:
                ev.append(Evidence(path, exc.diagnostic.line, exc.diagnostic.message, False))
                continue
            got = output_names(outputs)
            ok = bool(got) and got[-1] == PROFILING_OUTPUT and (expected is None or len(got) == expected)
            note = f"torchair converter `{fn.name.value}`: GE outputs {', '.join(str(g) for g in got)}"
            tail = "" if ok else f" (want {PROFILING_OUTPUT} last{want})"
            ev.append(Evidence(path, src.line_of(call), note + tail, ok))
    return ev
