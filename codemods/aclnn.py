"""aclnn: one more `const aclTensor *` output after the last output (gate G2).

DESCRIPTION: in every `aclnn<Op>GetWorkspaceSize` / `aclnnInner<Op>GetWorkspaceSize`
declaration, definition and call of the op's hand-written wrappers (`op_api/`,
`op_host/op_api/`, `pregen/.../autogen/`), put `const aclTensor *profilingData` (a
parameter) or `profilingData` (an argument) right before `workspaceSize`, i.e. after
the last output: the wrapper gains the output and forwards it to the inner call.
The op's name matches in any spelling (`aclnnMoeGmmFFNGate...` for moe_gmm_ffn_gate),
and a wrapper named otherwise that forwards to one of them (an `extern "C"`
`aclnnInner...` declared in the wrapper's own file) is one of them too: its
declarations, definition and calls all change together.

A parameter that starts its own line gets a whole new line (`  // optrace`); otherwise
the parameter is a `/*optrace<*/ ... /*>optrace*/` fragment. Lists that already carry a
profiling parameter are left alone.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from optrace.codemods.l0op import threading
from optrace.codemods.layer import Evidence, LayerExample, LayerModel, LocatingLayer
from optrace.codemods.layer_common import (
    CODE_LAYER_SHAPE,
    PROFILING_VAR,
    before_item,
    clean_bytes,
    input_error,
    match_bracket,
    split_top,
)
from optrace.engine.cache import once
from optrace.engine.codes import OT024
from optrace.engine.cpp import (
    enclosing_function,
    functions,
    last_ident,
    mask,
    param_name,
)
from optrace.engine.diagnostics import Diagnostic, InputError, Severity
from optrace.engine.discovery import LayerFile, Layers, SearchContext
from optrace.engine.edits import Edit, line_number
from optrace.engine.names import op_name_pattern
from optrace.engine.plan import Plan
from optrace.engine.probes import looked_at
from optrace.engine.source import read_regular

CODEMOD = "aclnn"


@dataclass(frozen=True)
class WorkspaceList:
    """One parameter or argument list of a `...GetWorkspaceSize(` occurrence."""

    path: Path
    function: str
    is_call: bool
    items: tuple[tuple[int, int], ...]
    workspace: int  # index of the workspaceSize item
    open_at: int
    close_at: int
    line: int

    def profiling_item(self, data: bytes) -> int | None:
        for i, (s, e) in enumerate(self.items):
            if "profiling" in last_ident(data[s:e]).lower():
                return i
        return None


def workspace_pattern(names: str | Sequence[str]) -> re.Pattern[bytes]:
    """`aclnn[Inner]<Op>GetWorkspaceSize(` for an op name in any spelling (a str: the op's
    name), or any of the exact function `names` (a sequence)."""
    if isinstance(names, str):
        alternatives = rb"aclnn(?:Inner)?" + op_name_pattern(names) + rb"GetWorkspaceSize"
    elif names:
        alternatives = b"|".join(re.escape(n.encode()) for n in sorted(set(names), key=len, reverse=True))
    else:
        alternatives = rb"(?!)"  # no names: matches nothing
    return re.compile(rb"\b(" + alternatives + rb")\s*\(")


def workspace_lists(path: Path, data: bytes, names: str | Sequence[str]) -> list[WorkspaceList]:
    """Every declaration, definition and call of the op's `...GetWorkspaceSize` functions
    in `data` (`names`: as for `workspace_pattern`; `wrapper_names` gives them all)."""
    code = mask(data)
    out = []
    for m in workspace_pattern(names).finditer(code):
        open_at = m.end() - 1
        close = match_bracket(code, open_at)
        if close < 0:
            continue
        items = tuple(split_top(code, open_at + 1, close))
        names_ = [last_ident(data[s:e]) for s, e in items]
        ws = next((i for i, n in enumerate(names_) if n.lower() == "workspacesize"), None)
        if ws is None and len(items) >= 2 and "exec" in names_[-1].lower():
            ws = len(items) - 2
        if ws is None:
            raise input_error(CODE_LAYER_SHAPE, f"cannot find the workspaceSize parameter of "
                              f"`{m.group(1).decode()}`", path, data, m.start())
        ws_text = data[items[ws][0] : items[ws][1]]
        is_call = len(re.findall(rb"[A-Za-z_]\w*", ws_text)) == 1
        out.append(WorkspaceList(path, m.group(1).decode(), is_call, items, ws, open_at, close,
                                 line_number(data, m.start())))
    return out



def wrapper_names(layers: Layers, clean: bool = True) -> tuple[str, ...]:
    """The op's `...GetWorkspaceSize` functions: `aclnn<Op>` / `aclnnInner<Op>` in any
    spelling, and every hand-written wrapper that forwards to one of them, whatever its
    name (`aclnnScaledMaskedSoftmaxGetWorkspaceSize` calling an `extern "C"`
    `aclnnInnerScaledMaskedSoftmaxV2GetWorkspaceSize`): a function of the aclnn files
    whose body calls one and that takes the `workspaceSize` it passes on, repeated until
    no caller is left. Its declarations, its definition and its own callers then get the
    parameter too, so the call never shifts workspaceSize into the profiling slot. Found
    once in an `unchanged_files` stretch (the aclnn and C++ callers layers both ask)."""
    return once(("aclnn wrapper names", id(layers), clean), lambda: _wrapper_names(layers, clean), layers)


def _wrapper_names(layers: Layers, clean: bool) -> tuple[str, ...]:
    texts = []
    for path in aclnn_files(layers):
        try:
            texts.append(clean_bytes(path) if clean else read_regular(path))
        except OSError:
            continue
    names: set[str] = set()
    own = workspace_pattern(layers.op_name)
    for data in texts:
        names.update(m.group(1).decode() for m in own.finditer(mask(data)))
    # The l0op style: a public API under any name whose body reaches the op's launch.
    names.update(threading(layers, clean).roots)
    grown = True
    while grown and names:
        grown = False
        for data in texts:
            code = mask(data)
            called = workspace_pattern(sorted(names))
            for fn in functions(data):
                if fn.body_open < 0 or fn.name in names:
                    continue
                if called.search(code, fn.body_open, fn.body_close) is None:
                    continue
                if any(param_name(data, p).lower() == "workspacesize" for p in fn.params):
                    names.add(fn.name)
                    grown = True
    return tuple(sorted(names))


def names_op(path: Path, op_name: str) -> bool:
    """Whether `aclnn_<name>.*` is named for the op: the names equal in normal form (lower
    case, underscores dropped: `aclnn_matmul_v3` for `mat_mul_v3`). A name that holds the
    op's among other words is another operator's (`aclnn_add_rms_norm` is not `rms_norm`'s)."""
    stem = path.name.split(".")[0].lower().removeprefix("aclnn_")
    return stem.replace("_", "") == op_name.lower().replace("_", "")


def aclnn_files(layers: Layers) -> list[Path]:
    """The discovered wrappers, plus `pregen/.../aclnn_<op>.{h,cpp}` (older UMDK trees keep
    them in `ascend_kernels/pregen/build_out/autogen/`, which repository search skips as a
    build folder) in the operator directory or any folder above it up to the root."""
    found = [f.path for f in layers.found.get("aclnn", [])]
    seen = {p.resolve() for p in found}
    roots = [layers.op_dir, *[p for p in layers.op_dir.parents if p == layers.repo_root
                              or layers.repo_root in p.parents]]
    for root in roots:
        pattern = "**/pregen/**/" if root == layers.op_dir else "pregen/**/"
        if root != layers.op_dir:
            # The glob stats `pregen` (a literal first part) without listing `root`: a build
            # that makes it must reach the cache as a folder listed would.
            looked_at(root / "pregen")
        for path in sorted(root.glob(f"{pattern}aclnn_{layers.op_name}.*")):
            if path.suffix in (".h", ".hpp", ".cpp", ".cc") and path.resolve() not in seen:
                seen.add(path.resolve())
                found.append(path)
    return found


def unthreadable(layers: Layers, files: list[Path], names: Sequence[str], clean: bool = True) -> bool:
    """aclnn files found, and none is a wrapper of this op optrace can thread the buffer
    through: no `...GetWorkspaceSize` of the op's and no launch of the op in its l0op
    files (`aclnn_matmul.cpp` in `mat_mul_v3/op_api/`, a public API reaching the op
    through shared code). Mode B would leave the output short of the public API."""
    return bool(files) and not names and not threading(layers, clean).launches


@dataclass(frozen=True)
class AclnnTarget:
    """A `...GetWorkspaceSize` list the buffer joins, right before workspaceSize (located;
    the parameter's line or fragment is `render_aclnn`'s). Never the sizes macro."""

    path: Path
    data: bytes  # the clean bytes
    wl: WorkspaceList
    sizes: bool = False


def locate_aclnn(plan: Plan, mode: str) -> list[AclnnTarget]:
    """Every list of the op's wrappers without the buffer. Raises what refuses the mode:
    no wrapper to thread it through (mode B), a list without workspaceSize, a profiling
    parameter written by hand elsewhere, a caller without workspaceSize to put it before."""
    # The parameter exists in both modes (mode A passes a null tensor).
    layers = plan.analysis.layers
    names = wrapper_names(layers)
    files = aclnn_files(layers)
    if mode == "B" and unthreadable(layers, files, names):
        more = f" and {len(files) - 3} more" if len(files) > 3 else ""
        shown = ", ".join(p.name for p in files[:3]) + more
        raise InputError(Diagnostic(
            CODE_LAYER_SHAPE, f"no aclnn wrapper of this op in {shown}: none declares its "
            "...GetWorkspaceSize or reaches its launch, so profilingData cannot be threaded to the "
            "public API (mode A needs no wrapper)", files[0], 1))
    out: list[AclnnTarget] = []
    for path in files:
        data = clean_bytes(path)
        for wl in workspace_lists(path, data, names):
            pos = wl.profiling_item(data)
            if pos is not None:
                if pos != wl.workspace - 1:
                    # Written by hand elsewhere in the list: adding ours to the other lists
                    # would leave this one disagreeing with them (G2 on apply's own output).
                    s, e = wl.items[pos]
                    raise input_error(CODE_LAYER_SHAPE, f"{wl.function} already takes "
                                      f"`{data[s:e].decode(errors='replace').strip()}` here, not right "
                                      "before workspaceSize where optrace puts it in its other "
                                      "declarations and calls: move it there (or remove it) by hand",
                                      path, data, s)
                continue
            if wl.is_call:
                caller = enclosing_function(data, wl.open_at)
                if caller is not None and caller.name not in names:
                    raise input_error(CODE_LAYER_SHAPE, f"`{caller.name}` calls {wl.function} but has no "
                                      "workspaceSize parameter to put profilingData before: add the "
                                      "parameter by hand", path, data, wl.open_at)
            out.append(AclnnTarget(path, data, wl))
    return out


def aclnn_edits(plan: Plan, mode: str) -> list[Edit]:
    return render_aclnn(locate_aclnn(plan, mode))


def render_aclnn(located: Sequence[AclnnTarget]) -> list[Edit]:
    """`profilingData` (an argument) or `const aclTensor *profilingData` (a parameter, the
    file's pointer style) before each located workspaceSize: a line of its own where
    workspaceSize starts one, else a fragment."""
    edits: list[Edit] = []
    for target in located:
        path, data, wl = target.path, target.data, target.wl
        star = b"const aclTensor* " if b"aclTensor* " in data and b"aclTensor *" not in data \
            else b"const aclTensor *"
        text = PROFILING_VAR.encode() if wl.is_call else star + PROFILING_VAR.encode()
        edits.append(before_item(path, data, wl.items[wl.workspace][0], text, CODEMOD,
                                 f"{wl.function}: profiling output"))
    return edits


# The aclnn API forwarding to the generated inner one, and its header.
EXAMPLE_ACLNN_H = """\
#include "aclnn/acl_meta.h"

extern "C" aclnnStatus aclnnDemoOpGetWorkspaceSize(const aclTensor *x, const aclTensor *y,
                                                   uint64_t *workspaceSize, aclOpExecutor **executor);
extern "C" aclnnStatus aclnnDemoOp(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                   aclrtStream stream);
"""
_EXAMPLE_ACLNN = """\
#include "aclnn_demo_op.h"

extern "C" aclnnStatus aclnnInnerDemoOpGetWorkspaceSize(const aclTensor *x, const aclTensor *y,
                                                        uint64_t *workspaceSize, aclOpExecutor **executor);

aclnnStatus aclnnDemoOpGetWorkspaceSize(const aclTensor *x, const aclTensor *y,
                                        uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return aclnnInnerDemoOpGetWorkspaceSize(x, y, workspaceSize, executor);
}
"""


class AclnnLayer(LocatingLayer[AclnnTarget]):
    NAME: ClassVar[str] = "aclnn"
    DESCRIPTION: ClassVar[str] = "aclnn wrappers: the profiling output right before workspaceSize"
    FOUND_KEY: ClassVar[str | None] = "aclnn"
    TITLE: ClassVar[str] = "aclnn wrappers"
    EXAMPLES: ClassVar[tuple[LayerExample, ...]] = (LayerExample(
        path="demo_op/op_api/aclnn_demo_op.cpp",
        files={"demo_op/op_api/aclnn_demo_op.h": EXAMPLE_ACLNN_H,
               "demo_op/op_api/aclnn_demo_op.cpp": _EXAMPLE_ACLNN},
        changes=(
            ("aclnnInnerDemoOpGetWorkspaceSize(const aclTensor *x, const aclTensor *y,\n",
             "aclnnInnerDemoOpGetWorkspaceSize(const aclTensor *x, const aclTensor *y,\n"
             + " " * 56 + "const aclTensor *profilingData,  // optrace\n"),
            ("aclnnStatus aclnnDemoOpGetWorkspaceSize(const aclTensor *x, const aclTensor *y,\n",
             "aclnnStatus aclnnDemoOpGetWorkspaceSize(const aclTensor *x, const aclTensor *y,\n"
             "                                        const aclTensor *profilingData,  // optrace\n"),
            ("(x, y, workspaceSize, executor)",
             "(x, y, /*optrace<*/profilingData, /*>optrace*/workspaceSize, executor)"),
        ),
    ),)

    def search(self, ctx: SearchContext) -> list[LayerFile]:
        """The op's aclnn files: `aclnn_*` sources or those defining `aclnnInner<Op>`,
        in the operator directory (not the kernel), then elsewhere in the repository."""
        camel = ctx.camel
        out: list[LayerFile] = []
        for path in ctx.operator_cpp:
            code = ctx.code(path)
            if ctx.data(path) is None or "op_kernel" in path.parts:
                continue
            if path.name.lower().startswith("aclnn_") or re.search(rb"aclnnInner" + camel, code):
                out.append(ctx.at(path, code, rb"aclnn(?:Inner)?" + camel, "aclnn wrapper"))
        for path, code in ctx.cpp_candidates():
            if ctx.inside(path):
                continue
            named = path.name.lower().startswith("aclnn_")
            if (named and names_op(path, ctx.layers.op_name)) or re.search(
                    rb"aclnnInner" + camel + rb"GetWorkspaceSize", code):
                out.append(ctx.at(path, code, rb"aclnn(?:Inner)?" + camel, "aclnn wrapper (outside op dir)"))
            elif named and ctx.op in os.fsencode(path.name.lower()):
                ctx.layers.diagnostics.append(Diagnostic(
                    OT024, f"{path.name} is not taken as this op's aclnn wrapper: its name is another "
                    f"operator's (`{ctx.layers.op_name}` among other words); name it under [layers] "
                    "aclnn in optrace.toml if it is this op's", path, 1, Severity.INFO))
        return out

    def find(self, layers: Layers) -> list[Path]:
        return aclnn_files(layers)

    def locate(self, plan: Plan, mode: str) -> list[AclnnTarget]:
        return locate_aclnn(plan, mode)

    def render(self, plan: Plan, mode: str, located: Sequence[AclnnTarget]) -> list[Edit]:
        return render_aclnn(located)

    def verify(self, model: LayerModel) -> list[Evidence]:
        names = wrapper_names(model.op.layers, clean=False)  # hand-written wrappers under any name too
        launched = bool(threading(model.op.layers, clean=False).launches)
        files = list(model.data)
        if model.op.mode != "B" and unthreadable(model.op.layers, files, names, clean=False):
            return [Evidence(path, 1, f"mode {model.op.mode}: no wrapper of this op here (no "
                             "...GetWorkspaceSize of the op's, no launch of it): the profiling output "
                             "does not pass through it")
                    for path in files]
        ev: list[Evidence] = []
        for path, data in model.data.items():
            try:
                lists = workspace_lists(path, data, names)
            except InputError as exc:
                ev.append(Evidence(path, exc.diagnostic.line, exc.diagnostic.message, False))
                continue
            if not lists and launched:
                ev.extend(_foreign_api(path, data))
            for wl in lists:
                pos = wl.profiling_item(data)
                kind = "call" if wl.is_call else "signature"
                if pos is None:
                    ev.append(Evidence(path, wl.line, f"{wl.function} {kind} has no profiling output "
                                       "(stale wrapper?)", False))
                elif pos != wl.workspace - 1:
                    ev.append(Evidence(path, wl.line, f"{wl.function} {kind}: profiling output is not right "
                                       "before workspaceSize", False))
                else:
                    ev.append(Evidence(path, wl.line, f"{wl.function} {kind}: profiling output last"))
        return ev


_API_RE = re.compile(rb"\b(aclnn\w*GetWorkspaceSize)\s*\(")


def _foreign_api(path: Path, data: bytes) -> list[Evidence]:
    """An l0op-style operator's aclnn header that declares an API none of its files define
    (a copy of another operator's header: `aclnn_threshold_backward.h` beside `relu_grad`,
    whose API is defined where it launches its own op): it reaches no launch of this op,
    so no order is at stake. Said, not failed; a header that declares nothing stays
    unread (OT452)."""
    code = mask(data)
    return [Evidence(path, data.count(b"\n", 0, m.start()) + 1,
                     f"{m.group(1).decode()} is declared here and defined outside the operator: it "
                     "reaches no launch of this op (not its wrapper)")
            for m in _API_RE.finditer(code)]
