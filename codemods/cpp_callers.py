"""C++ samples / tests: the operator's own C++ callers of its aclnn API keep compiling.

The aclnn layer grows every `aclnn<Op>GetWorkspaceSize` by `profilingData` right before
`workspaceSize`, in both modes, and a generated API grows the same way with the OpDef's
new output. The operator's C++ samples (ops-nn's `examples/test_aclnn_<op>.cpp`, built
by `build.sh --run_example`) and API unit tests (`tests/ut/op_host/test_aclnn_<op>.cpp`,
through the UT framework's `OP_API_UT(aclnn<Op>, INPUT(..), OUTPUT(..), extras..)`)
call it with the old arity and stop compiling. Here each such call passes `nullptr`
there: a sample gives no trace buffer, and the kernel records nothing without one.

- a direct call `aclnn<Op>GetWorkspaceSize(.., &workspaceSize, &executor)`: `nullptr`
  before its second-to-last argument (the API's list always ends in workspaceSize and
  the executor);
- `OP_API_UT(aclnn<Op>, ..)`: `nullptr` as the last extra argument (the framework calls
  the API with the inputs, the outputs, the extras, then workspaceSize and the executor).

The APIs are the aclnn layer's (`wrapper_names`: the op's in any spelling and every
hand-written wrapper forwarding to them) and, where the OpDef is the operator's, the
generated `aclnn<Op>` the build makes from it. Where a declaration of the API is among
the operator's files, a call is edited only when it has that declaration's arity (a
call with another arity did not compile before either; one already passing the buffer
has the grown arity). Only sample and test files: library code calling the API is
another operator's, and a null buffer there would be a silent loss, not a fix.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from optrace.codemods.aclnn import EXAMPLE_ACLNN_H, aclnn_files, workspace_lists, wrapper_names
from optrace.codemods.layer import Evidence, LayerExample, LayerModel, LocatingLayer
from optrace.codemods.layer_common import before_item, clean_bytes, fragment, match_bracket, split_top
from optrace.engine.cpp import mask
from optrace.engine.diagnostics import InputError
from optrace.engine.discovery import CPP_EXTS, LayerFile, Layers, SearchContext, is_sample_caller
from optrace.engine.edits import Edit, line_number
from optrace.engine.names import op_name_pattern
from optrace.engine.plan import Plan

CODEMOD = "cpp_callers"
NULL_BUFFER = b"nullptr"

# What a sample or test file must hold to be read further: a call of some aclnn API's
# first half, or the UT framework's case macro naming one.
_ANY_CALL = re.compile(rb"\baclnn\w*GetWorkspaceSize\s*\(|\bOP_API_UT\s*\(\s*aclnn\w*\s*,")
# Folders of an operator whose C++ is the operator itself (its API, host and kernel code),
# never a sample of it.
_OWN_CODE_DIRS = frozenset({"op_kernel", "op_host", "op_api", "op_graph", "framework"})


@dataclass(frozen=True)
class ApiCall:
    """One call of the op's API in a sample / test: the API (`aclnn<Op>`), whether it goes
    through `OP_API_UT`, its argument items as the API receives them where countable
    (None: INPUT / OUTPUT not written as the macros), and where `nullptr` goes."""

    path: Path
    api: str
    macro: bool
    items: tuple[tuple[int, int], ...]
    arity: int | None  # arguments before workspaceSize the call gives the API
    insert_at: int  # before workspaceSize; after OP_API_UT's last argument
    close_at: int  # the call's `)`
    line: int


def api_calls(path: Path, data: bytes, apis: frozenset[str]) -> list[ApiCall]:
    """Every call of one of `apis` (`aclnn<Op>`, no `GetWorkspaceSize`) in `data`."""
    if not apis:
        return []
    code = mask(data)
    alternatives = b"|".join(re.escape(a.encode()) for a in sorted(apis, key=len, reverse=True))
    pattern = re.compile(rb"\b(?:(" + alternatives + rb")GetWorkspaceSize\s*\(|OP_API_UT\s*\(\s*("
                         + alternatives + rb")\s*,)")
    out: list[ApiCall] = []
    for m in pattern.finditer(code):
        macro = m.group(2) is not None
        open_at = m.end() - 1 if not macro else code.rindex(b"(", m.start(), m.end())
        close = match_bracket(code, open_at)
        if close < 0:
            continue
        items = tuple(split_top(code, open_at + 1, close))
        line = line_number(data, m.start())
        if macro:
            api = m.group(2).decode()
            out.append(ApiCall(path, api, True, items, _ut_arity(code, items), items[-1][1], close, line))
        elif len(items) >= 2:
            if _is_declaration(code, m.start(), items):
                continue  # a sample declaring the API itself (no call): not a caller
            out.append(ApiCall(path, m.group(1).decode(), False, items, len(items) - 2,
                               items[-2][0], close, line))
    return out


def _ut_arity(code: bytes, items: tuple[tuple[int, int], ...]) -> int | None:
    """The API's arguments before workspaceSize an `OP_API_UT(api, INPUT(..), OUTPUT(..),
    extras..)` passes: the inputs, the outputs and the extras; None when INPUT / OUTPUT are
    not written out as the macros (a tuple built elsewhere)."""
    if len(items) < 3:
        return None
    count = len(items) - 3  # the extras
    for s, e in items[1:3]:
        m = re.match(rb"(?:INPUT|OUTPUT)\s*\(", code[s:e])
        if m is None:
            return None
        open_at = s + m.end() - 1
        close = match_bracket(code, open_at)
        if close < 0 or close + 1 != e:
            return None
        count += len(split_top(code, open_at + 1, close))
    return count


def _is_declaration(code: bytes, start: int, items: tuple[tuple[int, int], ...]) -> bool:
    """A prototype, not a call: its last item declares a parameter (`aclOpExecutor
    **executor`: a type, then a name) and a type name precedes the function's."""
    s, e = items[-1]
    last = code[s:e].strip()
    before = code[max(0, start - 80) : start].rstrip()
    return bool(re.search(rb"\*\s*\w+$", last) and re.search(rb"\w$", before)
                and not re.search(rb"(?:return|=|\(|,)\s*$", before))


def api_names(layers: Layers) -> frozenset[str]:
    """The APIs (`aclnn<Op>`) whose lists the operator's instrumentation grows: the aclnn
    layer's wrappers, and the generated API of the operator's own OpDef."""
    names = {n.removesuffix("GetWorkspaceSize") for n in wrapper_names(layers)
             if n.endswith("GetWorkspaceSize") and not n.startswith("aclnnInner")}
    return frozenset(names)


def declared_arity(layers: Layers) -> dict[str, set[int]]:
    """Per API of the operator's aclnn files, the arguments before workspaceSize its clean
    declarations take once instrumented (one more, unless one already carries it). Two
    where a folder of the op's name elsewhere declares an API of that name too: the aclnn
    layer grows both."""
    found: dict[str, set[int]] = {}
    names = wrapper_names(layers)
    for path in aclnn_files(layers):
        try:
            data = clean_bytes(path)
            lists = workspace_lists(path, data, names)
        except (OSError, InputError):
            continue  # the aclnn layer says why
        for wl in lists:
            if wl.is_call:
                continue
            grown = 0 if wl.profiling_item(data) is not None else 1
            found.setdefault(wl.function.removesuffix("GetWorkspaceSize"), set()).add(wl.workspace + grown)
    return found


def _generated_api(layers: Layers, path: Path, code: bytes) -> frozenset[str]:
    """`aclnn<Op>` spelled as `code` spells it, for an operator with its own OpDef (the
    build generates that API from it): the names of `code`'s calls matching the op. Only
    in the operator's own folder: with no declaration to count its arguments against,
    another folder's call of that name may be another operator's API of the same name."""
    if "op_def" not in layers.found or layers.op_dir not in path.parents:
        return frozenset()
    pattern = re.compile(rb"\b(aclnn" + op_name_pattern(layers.op_name) + rb")(?:GetWorkspaceSize\s*\("
                         rb"|\s*,)")
    return frozenset(m.group(1).decode() for m in pattern.finditer(code))


def ours(call: ApiCall, arity: dict[str, set[int]]) -> bool:
    """Whether a call is of the API the operator's declaration states (its arity, clean or
    grown): another arity is another function of that name (ops-nn's gather_v2 samples
    call a two-argument `aclnnMedian`; experimental/index/median's takes five), or one
    that never compiled. Without a declaration (a generated API), or a count (OP_API_UT
    of tuples built elsewhere), it is."""
    wanted = arity.get(call.api)
    return wanted is None or call.arity is None or call.arity in wanted or call.arity + 1 in wanted


def sample_files(layers: Layers, paths: Sequence[Path]) -> list[Path]:
    """Of `paths`, the C / C++ samples and tests: inside the operator directory outside
    its own code's folders, or outside it under a tests / examples folder."""
    out: list[Path] = []
    for path in paths:
        if path.suffix.lower() not in CPP_EXTS:
            continue
        if layers.op_dir in path.parents:
            folders = path.relative_to(layers.op_dir).parts[:-1]
            if folders and folders[0] in _OWN_CODE_DIRS:
                continue  # `tests/ut/op_api/` is a test; `op_api/` is the API
        elif not is_sample_caller(path, layers.repo_root):
            continue
        out.append(path)
    return out


@dataclass(frozen=True)
class CallerTarget:
    """A call that gets `nullptr` (located; never the sizes macro)."""

    path: Path
    data: bytes  # the clean bytes
    call: ApiCall
    sizes: bool = False


def locate_callers(plan: Plan) -> list[CallerTarget]:
    layers = plan.analysis.layers
    grown = api_names(layers)
    arity = declared_arity(layers)
    out: list[CallerTarget] = []
    for path in [f.path for f in layers.found.get(CODEMOD, [])]:
        data = clean_bytes(path)
        apis = grown | _generated_api(layers, path, mask(data))
        for call in api_calls(path, data, apis):
            wanted = arity.get(call.api)
            if not ours(call, arity) or (wanted is not None and call.arity is not None
                                         and call.arity + 1 not in wanted):
                continue  # another API of that name, or one already passing a buffer
            out.append(CallerTarget(path, data, call))
    return out


def render_callers(located: Sequence[CallerTarget]) -> list[Edit]:
    edits: list[Edit] = []
    for target in located:
        path, data, call = target.path, target.data, target.call
        note = f"{call.api}: no trace buffer"
        if call.macro:
            edits.append(fragment(path, call.insert_at, b", " + NULL_BUFFER, CODEMOD, note))
        else:
            edits.append(before_item(path, data, call.insert_at, NULL_BUFFER, CODEMOD, note))
    return edits


_EXAMPLE_SAMPLE = """\
#include "aclnn_demo_op.h"

int RunDemoOp(aclTensor *x, aclTensor *y, aclrtStream stream)
{
    uint64_t workspaceSize = 0;
    aclOpExecutor *executor = nullptr;
    auto ret = aclnnDemoOpGetWorkspaceSize(x, y,
                                           &workspaceSize, &executor);
    return ret;
}
"""


class CppCallersLayer(LocatingLayer[CallerTarget]):
    NAME: ClassVar[str] = "cpp_callers"
    DESCRIPTION: ClassVar[str] = ("C++ samples / tests calling the aclnn API: `nullptr` where the profiling "
                                  "output goes, so they keep compiling")
    FOUND_KEY: ClassVar[str | None] = "cpp_callers"
    TITLE: ClassVar[str] = "C++ samples / tests"
    OPTIONAL: ClassVar[bool] = True
    EXAMPLES: ClassVar[tuple[LayerExample, ...]] = (LayerExample(
        path="demo_op/examples/test_aclnn_demo_op.cpp",
        files={"demo_op/op_api/aclnn_demo_op.h": EXAMPLE_ACLNN_H,
               "demo_op/examples/test_aclnn_demo_op.cpp": _EXAMPLE_SAMPLE},
        changes=(
            ("                                           &workspaceSize, &executor);\n",
             "                                           nullptr,  // optrace\n"
             "                                           &workspaceSize, &executor);\n"),
        ),
        mode="A",
    ),)

    def search(self, ctx: SearchContext) -> list[LayerFile]:
        """Samples and tests (the operator's `examples/`, `tests/`; elsewhere a tests /
        examples folder naming the op) calling one of its aclnn APIs."""
        paths = list(dict.fromkeys([*ctx.operator_cpp, *(p for p, _ in ctx.cpp_candidates())]))
        maybe = [p for p in sample_files(ctx.layers, paths) if ctx.data(p) is not None
                 and _ANY_CALL.search(ctx.code(p))]
        if not maybe:
            return []
        grown = api_names(ctx.layers)
        arity = declared_arity(ctx.layers)
        out: list[LayerFile] = []
        for path in maybe:
            code = ctx.code(path)
            apis = grown | _generated_api(ctx.layers, path, code)
            calls = [c for c in api_calls(path, code, apis) if ours(c, arity)]
            if calls:
                out.append(LayerFile(path, calls[0].line, f"calls {calls[0].api}"))
        return out

    def find(self, layers: Layers) -> list[Path]:
        return [f.path for f in layers.found.get(CODEMOD, [])]

    def locate(self, plan: Plan, mode: str) -> list[CallerTarget]:
        del mode  # the API grows in both modes
        return locate_callers(plan)

    def render(self, plan: Plan, mode: str, located: Sequence[CallerTarget]) -> list[Edit]:
        return render_callers(located)

    def verify(self, model: LayerModel) -> list[Evidence]:
        """Each call passes one argument more than the clean declaration takes, or, for a
        generated API (no declaration among the operator's files), carries optrace's
        `nullptr`."""
        layers = model.op.layers
        grown = api_names(layers)
        arity = declared_arity(layers)
        ev: list[Evidence] = []
        for path, data in model.data.items():
            code = mask(data)
            for call in api_calls(path, data, grown | _generated_api(layers, path, code)):
                if not ours(call, arity):
                    continue  # another function of that name: not this layer's
                wanted = arity.get(call.api)
                if wanted is not None and call.arity is not None:
                    ok = call.arity in wanted
                    takes = " or ".join(str(n) for n in sorted(wanted))
                    what = f"passes {call.arity} arguments before workspaceSize, the API takes {takes}"
                else:
                    ok = _carries_null(data, call)
                    what = "passes the profiling output" if ok else "passes no profiling output"
                ev.append(Evidence(path, call.line, f"{call.api} call: {what}"
                                   + ("" if ok else ": it no longer compiles"), ok))
        return ev


def _carries_null(data: bytes, call: ApiCall) -> bool:
    """Whether optrace's `nullptr` is where the buffer goes: the item before workspaceSize
    (OP_API_UT's last extra), marked as optrace's (its fragment or its line's comment)."""
    at = call.items[-1] if call.macro else call.items[-3] if len(call.items) >= 3 else None
    if at is None:
        return False
    s, e = at
    window = data[s : call.close_at] if call.macro else data[s : call.items[-2][0]]
    return data[s:e].strip() == NULL_BUFFER and b"optrace" in window
