"""Python fake / abstract / Meta implementations of the op return profiling_data too (G2).

DESCRIPTION: in mode B, every Python function registered as the op's fake, abstract or
Meta implementation — `@torch.library.register_fake("ns::op")`,
`@torch.library.impl_abstract("ns::op")`, `@torch.library.impl(lib, "op", "Meta")`, or
the call forms `torch.library.register_fake("ns::op", fn)` / `lib.impl("op", fn, "Meta")`
— returns one more tensor, last: `<first tensor argument>.new_empty((_OPTRACE_PROFILING_NUMEL,),
dtype=torch.int64)`, the 1-D int64 buffer the kernel fills. `_OPTRACE_PROFILING_NUMEL` is
a module constant added after the imports, computed from the same numbers as the C++
`OPTRACE_PROFILING_NUMEL` (`layer_common.python_numel_expr`). Mode A changes nothing.

Return forms: `return a, b` and `return (a, b)` gain `, buffer`; `return [a, b]` grows the
list; any other value (`return a`, `return tuple(outs)`) becomes `a, buffer` when the op
returned one tensor, else `(*value, buffer)` (`[*value, buffer]` for a `Tensor[]` op).
Every `return` of the function changes (nested functions and lambdas are not its returns).
Each rewritten statement is preceded by `# optrace-edit N` (N lines of the rewrite follow;
strip takes out what was added by its shape, nothing encoded); added lines end with
`  # optrace`.

Refused (OT313): a registration naming a function this file does not define, a fake
without parameters, a bare `return`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst

from optrace.codemods.layer import Evidence, LayerModel
from optrace.codemods.layer_common import (
    CODE_LAYER_SHAPE,
    HASH_MARK,
    buffer_core_type,
    input_error,
    marked_lines,
    python_numel_expr,
)
from optrace.codemods.python_callers_cst import (
    PythonSource,
    dotted,
    import_point,
    mode_b_sources,
    read_each,
    rewrite_insertions,
)
from optrace.codemods.python_files import expected_returns, fake_files, op_arity
from optrace.engine.edits import Edit
from optrace.engine.plan import Plan

CODEMOD = "python-fakes"
NUMEL_NAME = "_OPTRACE_PROFILING_NUMEL"
TORCH_ALIAS = "_optrace_torch"
_FAKE_FUNCS = ("register_fake", "impl_abstract")


def op_of(node: cst.BaseExpression) -> str | None:
    """The op an argument names: "ns::op.overload" / "op" strings, torch.ops.ns.op[.overload]."""
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        text = value if isinstance(value, str) else value.decode(errors="replace")
        return text.split("::")[-1].split(".")[0]
    name = dotted(node)
    parts = name.split(".")
    if len(parts) >= 4 and parts[0] == "torch" and parts[1] == "ops":
        return parts[3]
    return None


def _is_meta(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value in ("Meta", b"Meta")
    if isinstance(node, (cst.List, cst.Tuple)):
        return any(_is_meta(el.value) for el in node.elements)
    return dotted(node).endswith("DispatchKey.Meta")


@dataclass(frozen=True)
class FakeSite:
    """One registration of a fake: where it is and the function it registers."""

    line: int
    how: str
    function: cst.FunctionDef


def _registration(call: cst.Call, names: set[str]) -> tuple[str, list[cst.Arg]] | None:
    """(form, the remaining arguments) when `call` registers a fake / Meta impl of the op."""
    func = dotted(call.func).split(".")[-1]
    positional = [a for a in call.args if a.keyword is None]
    if func in _FAKE_FUNCS:
        if positional and op_of(positional[0].value) in names:
            return func, positional[1:]
        return None
    if func == "impl":
        keyed = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        ops = [i for i, a in enumerate(positional) if isinstance(a.value, cst.SimpleString)
               and op_of(a.value) in names]
        meta = any(_is_meta(a.value) for a in positional) or any(
            _is_meta(v) for k, v in keyed.items() if k in ("dispatch_key", "types"))
        if ops and meta:
            rest = [a for a in positional[ops[0] + 1 :] if not _is_meta(a.value)]
            return "impl Meta", rest
    return None


def fake_sites(src: PythonSource, names: Sequence[str]) -> list[FakeSite]:
    """The op's fake / abstract / Meta functions registered in one file, in file order."""
    wanted = set(names)
    # name -> (line, scope, definition): a name can be defined in several scopes (a method,
    # a nested helper) or twice in one (`if ...: def f ... else: def f ...`).
    defs: dict[str, list[tuple[int, cst.CSTNode | None, cst.FunctionDef]]] = {}
    sites: list[FakeSite] = []
    refs: list[tuple[int, str, cst.Arg, cst.Call]] = []

    def scope(node: cst.CSTNode) -> cst.CSTNode | None:
        """The function or class whose body holds `node`; None at module level."""
        parent = src.parent(node)
        while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
            parent = src.parent(parent)
        return parent

    def resolve(name: str, call: cst.Call, line: int) -> cst.FunctionDef | None:
        """The definition `name` means at the call: the last one before it in the call's own
        scope, else the last one in an enclosing function's or the module's (Python's
        lookup; class bodies are not enclosing scopes)."""
        here: cst.CSTNode | None = scope(call)
        first = True
        while True:
            found = [d for d_line, d_scope, d in defs.get(name, [])
                     if d_scope is here and (not first or d_line < line)]
            if found:
                return found[-1]
            if here is None:
                return None
            here = scope(here)
            while isinstance(here, cst.ClassDef):
                here = scope(here)
            first = False

    class Finder(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            defs.setdefault(node.name.value, []).append((src.line_of(node), scope(node), node))
            for dec in node.decorators:
                if isinstance(dec.decorator, cst.Call):
                    reg = _registration(dec.decorator, wanted)
                    if reg is not None:
                        sites.append(FakeSite(src.line_of(dec), reg[0], node))

        def visit_Call(self, node: cst.Call) -> None:
            parent = src.parent(node)
            if isinstance(parent, cst.Decorator) or (isinstance(parent, cst.Call) and parent.func is node):
                return  # a decorator, or the inner call of `impl(lib, "op", "Meta")(fn)`
            inner = node.func if isinstance(node.func, cst.Call) else None
            reg = _registration(inner if inner is not None else node, wanted)
            if reg is None:
                return
            args = [a for a in node.args if a.keyword is None] if inner is not None else reg[1]
            if args:  # `register_fake("ns::op", fn)`, `lib.impl("op", fn, "Meta")`, `impl(...)(fn)`
                refs.append((src.line_of(node), reg[0], args[0], node))
            else:
                raise input_error(CODE_LAYER_SHAPE, f"`{reg[0]}` of the op without a function", src.path,
                                  line=src.line_of(node))

    src.wrapper.visit(Finder())
    for line, how, arg, call in refs:
        target = resolve(arg.value.value, call, line) if isinstance(arg.value, cst.Name) else None
        if target is None:
            raise input_error(CODE_LAYER_SHAPE, f"`{how}` registers `{src.code(arg.value)}`, not a "
                              "function this file defines: its return cannot grow by profiling_data",
                              src.path, line=line)
        sites.append(FakeSite(line, how, target))
    sites.sort(key=lambda s: s.line)
    return sites


def own_returns(fn: cst.FunctionDef) -> list[cst.Return]:
    """The function's `return` statements (not those of nested functions / classes)."""
    out: list[cst.Return] = []

    class Returns(cst.CSTVisitor):
        def __init__(self) -> None:
            self.depth = 0

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            self.depth += 1
            return self.depth == 1

        def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
            self.depth -= 1

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            return False

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False

        def visit_Return(self, node: cst.Return) -> None:
            out.append(node)

    fn.visit(Returns())
    return out


def _first_tensor_param(fn: cst.FunctionDef) -> str | None:
    params = [*fn.params.posonly_params, *fn.params.params]
    names = [p for p in params if p.name.value not in ("self", "cls")]
    for p in names:
        ann = p.annotation
        text = cst.Module([]).code_for_node(ann.annotation) if ann is not None else ""
        if "Tensor" in text and not re.search(r"List|list|Sequence|Optional|\|", text):
            return p.name.value
    return names[0].name.value if names else None


def _torch_bound(module: cst.Module) -> bool:
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Import) and any(
                        dotted(a.name).split(".")[0] == "torch" and a.asname is None for a in small.names):
                    return True
    return False


def grow_return(src: PythonSource, ret: cst.Return, extra: str, arity: str
                ) -> tuple[int, int, list[tuple[int, bytes]]]:
    """(statement start, end, insertions) making `ret` return `extra` last."""
    value = ret.value
    start, end = src.span(ret)
    if value is None:
        raise input_error(CODE_LAYER_SHAPE, "a bare `return` cannot return profiling_data", src.path,
                          line=src.line_of(ret))
    tail = f", {extra}".encode()
    if isinstance(value, (cst.Tuple, cst.List)) and value.elements:
        last = src.span(value.elements[-1].value)[1]
        return start, end, [(last, tail)]
    v_start, v_end = src.span(value)
    if arity == "single":
        return start, end, [(v_end, tail)]
    open_, close = (b"[*", b"]") if arity == "list" else (b"(*", b")")
    return start, end, [(v_start, open_), (v_end, tail + close)]


def constant_lines(src: PythonSource, torch_alias: bool, core_type: str | None = None) -> Edit:
    """The numel constant (and a torch import when the file binds none) after the imports;
    `core_type`: the kernel's one declared core type (`buffer_core_type`), else None."""
    lines = []
    if torch_alias:
        lines.append(f"import torch as {TORCH_ALIAS}".encode())
    lines.append(f"{NUMEL_NAME} = {python_numel_expr(core_type)}".encode())
    at = import_point(src)
    return Edit(src.path, at, at, marked_lines(src.data, at, lines, HASH_MARK), CODEMOD, "profiling numel")


def _file_edits(src: PythonSource, names: Sequence[str], arity: str, core_type: str | None) -> list[Edit]:
    sites = fake_sites(src, names)
    if not sites:
        return []
    alias = not _torch_bound(src.module)
    torch_name = TORCH_ALIAS if alias else "torch"
    spans: list[tuple[int, int, list[tuple[int, bytes]]]] = []
    done: set[int] = set()
    for site in sites:
        fn = site.function
        if id(fn) in done:
            continue
        done.add(id(fn))
        param = _first_tensor_param(fn)
        if param is None:
            raise input_error(CODE_LAYER_SHAPE, f"fake `{fn.name.value}` has no argument to take the device "
                              "of profiling_data from", src.path, line=src.line_of(fn))
        extra = f"{param}.new_empty(({NUMEL_NAME},), dtype={torch_name}.int64)"
        returns = own_returns(fn)
        if not returns:
            raise input_error(CODE_LAYER_SHAPE, f"fake `{fn.name.value}` returns nothing", src.path,
                              line=src.line_of(fn))
        spans.extend(grow_return(src, ret, extra, arity) for ret in returns)
    return [constant_lines(src, alias, core_type), *rewrite_insertions(src.path, src.data, spans, CODEMOD,
                                                           "returns profiling_data")]


def python_fake_edits(plan: Plan, mode: str) -> list[Edit]:
    layers = plan.analysis.layers
    found = mode_b_sources(plan, mode, fake_files(layers))
    if found is None:
        return []
    sources, names = found
    arity = op_arity(layers)
    core_type = buffer_core_type(plan.analysis.declared_cores)
    return [edit for src in sources for edit in _file_edits(src, names, arity, core_type)]


def fake_evidence(model: LayerModel) -> list[Evidence]:
    """Each fake / Meta implementation returns profiling_data last, as many values as the op."""
    expected = expected_returns(model.op)
    want = "" if expected is None else f" of {expected}"
    ev: list[Evidence] = []
    for path, src, sites in read_each(model, fake_sites, ev):
        done: set[int] = set()
        for site in sites:
            if id(site.function) in done:
                continue
            done.add(id(site.function))
            for ret in own_returns(site.function):
                value = ret.value
                items = list(value.elements) if isinstance(value, (cst.Tuple, cst.List)) else []
                last = src.code(items[-1].value if items else value) if value is not None else ""
                counted = bool(items) and not any(isinstance(el, cst.StarredElement) for el in items)
                n = len(items) if counted else None
                # What apply inserts (a buffer of the shared size), or a value named for it:
                # not any name that happens to contain "profiling" (`profiling_enabled`).
                named = re.fullmatch(r"\w*profiling_data\w*", last.strip()) is not None
                last_ok = NUMEL_NAME in last or named
                count_ok = n is None or expected is None or n == expected
                ok = last_ok and count_ok
                what = f"{site.how} `{site.function.name.value}`"
                note = (f"{what} returns profiling_data last" + (f" ({n}{want} outputs)" if n else "")
                        if ok else f"{what} returns {n} value(s), the op returns {expected}"
                        if not count_ok else f"{what} does not return profiling_data last")
                ev.append(Evidence(path, src.line_of(ret), note, ok))
    return ev
