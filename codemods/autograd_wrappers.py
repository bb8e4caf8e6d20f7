"""C++ functions registered for the op besides its launcher follow the launcher (G2).

DESCRIPTION: in mode B, a C++ function registered for the op (`m.impl("op", &fn)` /
`m.def("op", &fn)`, typically an autograd or dispatch wrapper) that is not the launcher
and returns a fixed-size `std::tuple<...>` (or a lone `at::Tensor`) returns one more
`at::Tensor`, last — it is a kernel of the same schema, so it must return what the schema
returns. Its declarations grow alike. The extra element comes from the launcher's result
in the wrapper's body:

- `auto r = launcher(...);` (or `std::tuple<...> r = ...`, whose type grows too):
  `std::get<N>(r)`, N the launcher's old number of outputs (`r.back()` for a vector);
- `auto [a, b] = launcher(...);`: the binding takes one more name, `profilingData`.

Returns: `return {..}`, `return std::make_tuple(..)` / `std::forward_as_tuple(..)` /
`std::tuple<..>(..)` gain that element; `return launcher(...)` and `return r` carry it
already; a lone tensor `return x` becomes `{x, <element>}`. When no launcher call can be
found, or a return has any other shape, the wrapper is refused with OT313 (`file:line`,
exit 2, nothing written). Vector / `auto` return types carry whatever they return and
stay. Mode A changes nothing.

Only files optrace already reads for the op are searched: registrations, the adapter's
files and the local headers they include.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from optrace.codemods.layer import Evidence, LayerExample, LayerModel, LocatingLayer
from optrace.codemods.layer_common import (
    CODE_LAYER_SHAPE,
    PROFILING_VAR,
    clean_bytes,
    fixed_count,
    fragment,
    input_error,
    mask_keep_includes,
    match_bracket,
)
from optrace.codemods.registration import (
    declaration_files,
    registration_files,
)
from optrace.codemods.torch_adapter import (
    adapter_functions,
    angle_close,
    hand_instrumented,
    meta_functions,
    return_type_edits,
    return_type_growth,
    torch_names,
)
from optrace.engine.cpp import CppFunction, functions, mask, own_return_values
from optrace.engine.discovery import Layers
from optrace.engine.edits import Edit
from optrace.engine.plan import Plan
from optrace.engine.source import read_regular

CODEMOD = "autograd-wrappers"
REGISTERED_RE = re.compile(rb'\.\s*(?:impl|def)\s*\(\s*"(?:\w+::)?(\w+)"\s*,[^;]*?&\s*([A-Za-z_][\w:]*)')




def wrapper_scan_files(layers: Layers) -> list[Path]:
    adapters = [f.path for f in layers.found.get("torch_adapter", [])]
    return list(dict.fromkeys([*registration_files(layers), *adapters, *declaration_files(layers)]))


def registered_names(layers: Layers, names: Sequence[str], clean: bool = True) -> set[str]:
    """Functions `m.impl` / `m.def` register under one of the op's torch names."""
    files = [*registration_files(layers), *[f.path for f in layers.found.get("torch_adapter", [])]]
    out: set[str] = set()
    for path in dict.fromkeys(files):
        data = clean_bytes(path) if clean else read_regular(path)
        for m in REGISTERED_RE.finditer(mask_keep_includes(data)):
            if m.group(1).decode() in names:
                out.add(m.group(2).decode().split("::")[-1])
    return out


@dataclass(frozen=True)
class Wrapper:
    """A registered function (not the launcher) whose fixed-size return gains the buffer."""

    path: Path
    function: CppFunction


def wrappers(layers: Layers, names: Sequence[str], clean: bool = True) -> list[Wrapper]:
    """Declarations and definitions of the registered non-launcher functions with a
    fixed-size return type (as the files are when `clean` is false)."""
    launchers = {fn.name for fns in adapter_functions(layers).values() for fn in fns}
    registered = registered_names(layers, names, clean) - launchers
    out = []
    for path in wrapper_scan_files(layers):
        data = clean_bytes(path) if clean else read_regular(path)
        for fn in functions(data, declarations=True):
            if fn.name in registered and fn.type_span is not None \
                    and fixed_count(data[fn.type_span[0] : fn.type_span[1]]) is not None:
                out.append(Wrapper(path, fn))
    return out


def wrapper_files(layers: Layers) -> list[Path]:
    return list(dict.fromkeys(w.path for w in wrappers(layers, torch_names(layers))))


def _launcher_counts(layers: Layers) -> dict[str, int | None]:
    """Each launcher's number of outputs before optrace (None: a vector)."""
    out: dict[str, int | None] = {}
    for path, fns in adapter_functions(layers).items():
        data = clean_bytes(path)
        for fn in fns:
            out[fn.name] = fixed_count(data[fn.type_span[0] : fn.type_span[1]]) if fn.type_span else None
    return out


Insertion = tuple[int, bytes, str]  # (offset, text, note): a fragment to insert


def _extra(data: bytes, fn: CppFunction, counts: dict[str, int | None]
           ) -> tuple[str | None, list[Insertion], str | None]:
    """(the profiling element's expression, the insertions making it available, the
    result variable) from the launcher call in the wrapper's body; (None, [], None) when
    absent."""
    code = mask(data)
    alts = b"|".join(re.escape(n.encode()) for n in counts)
    call = rb"\s*=\s*(?:[\w:]+::)?(" + alts + rb")\s*\("
    var_re = re.compile(rb"(\bauto\b|\bstd::tuple\s*<)[^;=()]*?&{0,2}\s*([A-Za-z_]\w*)" + call)
    bind_re = re.compile(rb"\bauto\s*&{0,2}\s*\[([^\]]*)\]" + call)
    for m in bind_re.finditer(code, fn.body_open, fn.body_close):
        return PROFILING_VAR, [(m.end(1), b", " + PROFILING_VAR.encode(), "binding")], None
    for m in var_re.finditer(code, fn.body_open, fn.body_close):
        count = counts.get(m.group(3).decode())
        var = m.group(2).decode()
        setup: list[Insertion] = []
        if m.group(1).startswith(b"std::tuple"):
            setup.append((angle_close(code, code.index(b"<", m.start())), b", at::Tensor", "result type"))
        if count is None:
            return f"{var}.back()", setup, var
        if count == 1:
            return None, [], None  # the launcher's lone tensor becomes a pair: its uses change
        return f"std::get<{count}>({var})", setup, var
    return None, [], None


@dataclass(frozen=True)
class WrapperTarget:
    """A registered wrapper that changes (located; the fragments are `render_wrappers`'s):
    whether its return type grows, the insertions making the launcher's profiling element
    available, and each return that takes it — `(how, value start, value end)`, how
    being "braces", "tuple" (`std::tuple<...>(...)`), "call" (`make_tuple`, ...) or
    "lone" (a tensor becomes `{x, extra}`). Never the sizes macro."""

    path: Path
    data: bytes  # the clean bytes
    function: CppFunction
    grows: bool
    setup: tuple[Insertion, ...] = ()
    returns: tuple[tuple[str, int, int], ...] = ()
    extra: str | None = None
    sizes: bool = False


def _wrapper_target(path: Path, data: bytes, fn: CppFunction, counts: dict[str, int | None]) -> WrapperTarget:
    """What changes in one wrapper; raises for a return that cannot take the element, or
    returns needing it when the launcher's result is not found."""
    grows = return_type_growth(path, data, fn.type_span) is not None
    if fn.body_open < 0:
        return WrapperTarget(path, data, fn, grows)
    code = mask(data)
    extra, setup, var = _extra(data, fn, counts)
    lone = fixed_count(data[fn.type_span[0] : fn.type_span[1]]) == 1 if fn.type_span else False
    launcher_call = re.compile(rb"(?:[\w:]+::)?(?:" + b"|".join(re.escape(n.encode()) for n in counts)
                               + rb")\s*\(")
    needs: list[tuple[str, int, int]] = []
    for start, e_start, e_end in own_return_values(code, fn):
        expr = code[e_start:e_end]
        if (var is not None and expr == var.encode()) or (
                launcher_call.match(expr) and match_bracket(code, code.index(b"(", e_start)) == e_end - 1):
            continue  # the launcher's value: it carries profiling_data already
        if expr.startswith(b"{") and match_bracket(code, e_start) == e_end - 1:
            needs.append(("braces", e_start, e_end))
            continue
        tup = re.match(rb"(?:std::)?(make_tuple|forward_as_tuple|tuple\s*<)", expr)
        if tup is not None and expr.endswith(b")"):
            needs.append(("tuple" if tup.group(1).startswith(b"tuple") else "call", e_start, e_end))
            continue
        if lone:
            needs.append(("lone", e_start, e_end))
            continue
        raise input_error(CODE_LAYER_SHAPE, f"`{fn.name}` is registered for the op and returns a fixed "
                          "tuple, but this return cannot take profiling_data", path, data, start)
    if needs and extra is None:
        raise input_error(CODE_LAYER_SHAPE, f"`{fn.name}` is registered for the op and returns a fixed "
                          "tuple, but optrace cannot tell where it gets the launcher's profiling tensor "
                          "(`auto r = launcher(...)` / `auto [a, b] = launcher(...)`)", path, data, fn.start)
    # a binding / typed result must take the new element anyway
    return WrapperTarget(path, data, fn, grows, tuple(setup), tuple(needs), extra)


def _wrapper_edits(target: WrapperTarget) -> list[Edit]:
    path, data = target.path, target.data
    edits = return_type_edits(path, data, target.function.type_span, CODEMOD)
    edits += [fragment(path, at, text, CODEMOD, note) for at, text, note in target.setup]
    code = mask(data)
    tail = f", {target.extra}".encode()
    for how, e_start, e_end in target.returns:
        if how == "tuple":
            edits.append(fragment(path, angle_close(code, code.index(b"<", e_start)), b", at::Tensor",
                                  CODEMOD, "return"))
        if how == "lone":
            edits.append(fragment(path, e_start, b"{", CODEMOD, "return"))
            edits.append(fragment(path, e_end, tail + b"}", CODEMOD, "return"))
        else:
            edits.append(fragment(path, e_end - 1, tail, CODEMOD, "return"))
    return edits


def locate_wrappers(plan: Plan, mode: str) -> list[WrapperTarget]:
    """Mode B: the registered wrappers (Meta kernels aside) that change."""
    layers = plan.analysis.layers
    if mode != "B" or hand_instrumented(plan):
        return []
    counts = _launcher_counts(layers)
    if not counts:
        return []
    names = torch_names(layers)
    # Meta kernels registered for the op are the torch adapter codemod's (a meta-device
    # profiling tensor of their own): they call no launcher to take one from.
    metas = {fn for path in wrapper_scan_files(layers) for fn in meta_functions(clean_bytes(path), names)}
    out: list[WrapperTarget] = []
    for w in wrappers(layers, names):
        if w.function.name in metas:
            continue
        target = _wrapper_target(w.path, clean_bytes(w.path), w.function, counts)
        if target.grows or target.setup or target.returns:
            out.append(target)
    return out


def autograd_wrapper_edits(plan: Plan, mode: str) -> list[Edit]:
    return render_wrappers(locate_wrappers(plan, mode))


def render_wrappers(located: Sequence[WrapperTarget]) -> list[Edit]:
    """Each located wrapper's return type, the launcher result's new element, its returns."""
    return [edit for target in located for edit in _wrapper_edits(target)]


# A two-output op whose autograd kernel wraps the launcher.
_EXAMPLE_ADAPTER2 = """\
#include <torch/extension.h>
#include "aclnn_demo_op.h"
#include "functions.h"

std::tuple<at::Tensor, at::Tensor> demo_op(const at::Tensor &x)
{
    at::Tensor y = at::empty_like(x);
    at::Tensor z = at::empty_like(x);
    EXEC_NPU_CMD(aclnnDemoOp, x, y, z);
    return {y, z};
}
"""
_EXAMPLE_WRAPPER = """\
#include <torch/library.h>
#include "functions.h"

std::tuple<at::Tensor, at::Tensor> demo_op_autograd(const at::Tensor &x)
{
    auto outputs = demo_op(x);
    return std::make_tuple(std::get<0>(outputs), std::get<1>(outputs));
}

TORCH_LIBRARY(demo_lib, m)
{
    m.def("demo_op(Tensor x) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(demo_lib, PrivateUse1, m)
{
    m.impl("demo_op", &demo_op);
}

TORCH_LIBRARY_IMPL(demo_lib, AutogradPrivateUse1, m)
{
    m.impl("demo_op", &demo_op_autograd);
}
"""


class AutogradWrappersLayer(LocatingLayer[WrapperTarget]):
    NAME: ClassVar[str] = "autograd_wrappers"
    DESCRIPTION: ClassVar[str] = "functions registered for the op besides the launcher (autograd wrappers)"
    MODE_B_ONLY: ClassVar[bool] = True
    EXAMPLES: ClassVar[tuple[LayerExample, ...]] = (LayerExample(
        path="csrc/registration.cpp",
        files={
            "csrc/demo_op_adapter.cpp": _EXAMPLE_ADAPTER2,
            "csrc/functions.h": "#pragma once\n#include <torch/extension.h>\n\n"
                                "std::tuple<at::Tensor, at::Tensor> demo_op(const at::Tensor &x);\n",
            "csrc/registration.cpp": _EXAMPLE_WRAPPER,
        },
        changes=(
            ("std::tuple<at::Tensor, at::Tensor> demo_op_autograd(",
             "std::tuple<at::Tensor, at::Tensor/*optrace<*/, at::Tensor/*>optrace*/> demo_op_autograd("),
            ("std::get<1>(outputs));",
             "std::get<1>(outputs)/*optrace<*/, std::get<2>(outputs)/*>optrace*/);"),
            ('-> (Tensor, Tensor)");', '-> (Tensor, Tensor"/*optrace-str<*/", Tensor"/*>optrace-str*/")");'),
        ),
    ),)

    def find(self, layers: Layers) -> list[Path]:
        return wrapper_files(layers)

    def locate(self, plan: Plan, mode: str) -> list[WrapperTarget]:
        return locate_wrappers(plan, mode)

    def render(self, plan: Plan, mode: str, located: Sequence[WrapperTarget]) -> list[Edit]:
        return render_wrappers(located)

    def verify(self, model: LayerModel) -> list[Evidence]:
        """A tensor or fixed-size tuple they return has the launcher's size."""
        op = model.op
        returns = op.facts.adapter_returns
        seen: set[str] = set()
        ev: list[Evidence] = []
        found = wrappers(op.layers, torch_names(op.layers), clean=False)
        for w in sorted(found, key=lambda w: w.function.body_open < 0):  # definitions first
            fn = w.function
            if fn.name in seen or fn.type_span is None or w.path not in model.data:
                continue
            seen.add(fn.name)
            n = fixed_count(model.data[w.path][fn.type_span[0] : fn.type_span[1]])
            if returns is None:
                ev.append(Evidence(w.path, fn.line, f"`{fn.name}` (registered for the op): not compared, the "
                                   "launcher returns no fixed-size tuple"))
                continue
            ev.append(Evidence(w.path, fn.line, f"`{fn.name}` (registered for the op) returns {n} tensor(s)"
                               + ("" if n == returns else f", the launcher returns {returns}"), n == returns))
        return ev
