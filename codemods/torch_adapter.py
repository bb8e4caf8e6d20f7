"""Torch adapter: the profiling tensor through `EXEC_NPU_CMD` / `EXEC_KERNEL_CMD` (G2).

DESCRIPTION: give the op's launch a named profiling tensor, never a temporary. Mode B
allocates it right before the launch — `at::zeros({OPTRACE_PROFILING_NUMEL}, <first
tensor>.options().dtype(at::kLong))`, the element count infer uses, from the shared
`optrace_<op>_profiling.h` — passes it as the last `EXEC_NPU_CMD` argument and returns
it last (the return type follows: `std::tuple<..., at::Tensor>`, a lone `at::Tensor`
becomes a pair, a tensor vector just grows). Mode A passes an empty named optional
(`c10::optional<at::Tensor> profilingData = c10::nullopt;`) and keeps the return arity.
Direct-launch kernels (`EXEC_KERNEL_CMD`) get the buffer as one more kernel argument, at
the position the kernel entry has `profiling_data` (before workspace / tiling); mode A
passes a null pointer there.

Meta kernels registered for the op (`TORCH_LIBRARY_IMPL(ns, Meta, m)`) return the extra
output too, allocated on the meta device.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from optrace.codemods.kernel_entry import PROFILING_ARG, is_system_param
from optrace.codemods.layer import EXAMPLE_TORCH, Evidence, LayerExample, LayerModel, LocatingLayer
from optrace.codemods.layer_common import (
    CODE_LAYER_SHAPE,
    FRAG_CLOSE,
    FRAG_OPEN,
    NUMEL_MACRO,
    PROFILING_VAR,
    clean_bytes,
    fixed_count,
    fragment,
    include_edit,
    input_error,
    insert_lines,
    leading_ws,
    mask_keep_includes,
    match_bracket,
    sizes_header_path,
    split_top,
    starts_line,
    statement_start,
)
from optrace.codemods.strip import strip_bytes
from optrace.codemods.torch_schema import parse_schema
from optrace.engine.cache import by_content
from optrace.engine.cpp import (
    CppFunction,
    enclosing_function,
    functions,
    last_ident,
    mask,
    own_return_values,
    param_name,
    parameter_name,
    returns_in,
)
from optrace.engine.diagnostics import InputError
from optrace.engine.discovery import CPP_EXTS, LayerFile, Layers, SearchContext, repo_index
from optrace.engine.edits import REVIEW_WIDTH, Edit, line_number, line_start
from optrace.engine.names import op_key, same_op
from optrace.engine.plan import Plan
from optrace.engine.source import read_regular
from optrace.engine.vocabulary import LAUNCH_HINT, LINE_MARK, META_IMPL_RE, names_profiling
from optrace.engine.vocabulary import launch_pattern as vocabulary_launch_pattern

CODEMOD = "torch-adapter"


@dataclass(frozen=True)
class Launch:
    """One `EXEC_NPU_CMD(aclnn<Op>, ...)` / `EXEC_KERNEL_CMD(<op>, dim, ...)` call."""

    path: Path
    macro: str
    start: int
    open_at: int
    close_at: int
    args: tuple[tuple[int, int], ...]
    function: CppFunction | None
    line: int


def launch_pattern(layers: Layers) -> re.Pattern[bytes]:
    return vocabulary_launch_pattern(layers.op_name)  # the op in any spelling: `aclnnMoeGmmFFNGate`


def launches(path: Path, data: bytes, layers: Layers) -> list[Launch]:
    code = mask(data)
    out = []
    for m in launch_pattern(layers).finditer(code):
        open_at = code.index(b"(", m.start())
        close = match_bracket(code, open_at)
        if close < 0:
            raise input_error(CODE_LAYER_SHAPE, "unbalanced parentheses in the launch call", path, data,
                              m.start())
        macro = (m.group(1) or m.group(2)).decode()
        out.append(Launch(path, macro, m.start(), open_at, close, tuple(split_top(code, open_at + 1, close)),
                          enclosing_function(data, m.start()), line_number(data, m.start())))
    return out


def adapter_functions(layers: Layers) -> dict[Path, list[CppFunction]]:
    """The functions that launch the op, per adapter file."""
    out: dict[Path, list[CppFunction]] = {}
    for f in layers.found.get("torch_adapter", []):
        data = clean_bytes(f.path)
        fns = [ln.function for ln in launches(f.path, data, layers) if ln.function is not None]
        if fns:
            out[f.path] = fns
    return out


_IMPL_RE = re.compile(rb'\.\s*impl\s*\(\s*"(?:\w+::)?(\w+)(?:\.\w+)?"\s*,[^;]*?&?\s*([A-Za-z_][\w:]*)\s*\)')


def torch_names(layers: Layers) -> list[str]:
    """The op's names on the torch side: the kernel op's name, and every name registered
    (`m.impl("name", &fn)`) for a function that launches the op — a torch op is often
    named apart from its kernel (`get_dispatch_layout` launching `dispatch_layout`)."""
    names = [layers.op_name]
    launchers = {fn.name for fns in adapter_functions(layers).values() for fn in fns}
    files = [f.path for key in ("registration", "torch_adapter") for f in layers.found.get(key, [])]
    files += repo_index(layers.repo_root).mentioning(*[n.encode() for n in launchers])
    for path in dict.fromkeys(files):
        for name, fn in _impls(clean_bytes(path)):
            if fn in launchers and name not in names:
                names.append(name)
    return names


@by_content(64)
def _impls(data: bytes) -> tuple[tuple[str, str], ...]:
    """Every `m.impl("name", &fn)` of a file, in order: (name, fn unqualified); cached by
    content (asked for every operator, about the same shared registration files)."""
    return tuple((m.group(1).decode(), m.group(2).decode().split("::")[-1])
                 for m in _IMPL_RE.finditer(mask_keep_includes(data)))


def kernel_profiling_position(plan: Plan) -> int:
    """Where the kernel entry has (or will have) profiling_data among its parameters."""
    entry = plan.analysis.entry_fn
    names = [parameter_name(entry.src.raw, p) for p in entry.parameter_nodes()]
    if PROFILING_ARG in names:
        return names.index(PROFILING_ARG)
    return next((i for i, n in enumerate(names) if is_system_param(n)), len(names))


def hand_instrumented(plan: Plan) -> bool:
    """The kernel entry had profiling_data before optrace touched it (written by hand):
    then the other layers are the author's, and the gates judge them."""
    entry = plan.analysis.entry_fn
    clean = strip_bytes(entry.src.raw, entry.src.path)
    code = mask(clean)
    m = re.search(rb"\b" + re.escape(entry.name.encode()) + rb"\s*\(", code)
    if m is None:
        return False
    close = match_bracket(code, m.end() - 1)
    return re.search(rb"\b" + PROFILING_ARG.encode() + rb"\b", code[m.end() : close]) is not None


def first_tensor_param(data: bytes, fn: CppFunction) -> str | None:
    for span in fn.params:
        text = data[span[0] : span[1]]
        if re.search(rb"\bTensor\b", text) and b"optional" not in text and b"List" not in text:
            return param_name(data, span)
    return None


# --- returning one more tensor ---------------------------------------------------------------


def return_type_growth(path: Path, data: bytes, type_span: tuple[int, int] | None) -> str | None:
    """How the declared return type takes one more `at::Tensor`: "tuple" (one more
    element), "tensor" (a lone tensor becomes a pair), None (no type; a vector, an alias
    of one, `auto`: the value carries the new element). Raises for `void`."""
    if type_span is None:
        return None
    start, end = type_span
    text = data[start:end]
    if re.search(rb"\btuple\s*<", text):
        return "tuple"
    if re.fullmatch(rb"(?:at::|torch::)?Tensor", text.strip()):
        return "tensor"
    if text.strip() == b"void":
        raise input_error(CODE_LAYER_SHAPE, "mode B returns profiling_data, but the adapter returns "
                          "void: use --mode A", path, data, start)
    return None  # std::vector<at::Tensor>, an alias of it, auto: the value carries the new element


def return_type_edits(path: Path, data: bytes, type_span: tuple[int, int] | None, codemod: str) -> list[Edit]:
    """The declared return type with one more `at::Tensor` (a vector type stays as is)."""
    growth = return_type_growth(path, data, type_span)
    if growth is None or type_span is None:
        return []
    start, end = type_span
    if growth == "tuple":
        code = mask(data)
        close = angle_close(code, code.index(b"<", start))
        return [fragment(path, close, b", at::Tensor", codemod, "return type")]
    return [Edit(path, start, start, FRAG_OPEN + b"std::tuple<" + FRAG_CLOSE, codemod, "return type"),
            fragment(path, end, b", at::Tensor>", codemod, "return type")]


def angle_close(code: bytes, open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(code)):
        if code[i] == 0x3C:
            depth += 1
        elif code[i] == 0x3E:
            depth -= 1
            if depth == 0:
                return i
    return len(code)


def returned_values(path: Path, data: bytes, fn: CppFunction) -> list[tuple[str, int, int, int]]:
    """Each of the function's own returns and how it hands profilingData back last:
    `(how, return keyword, value start, value end)`, how being "braces" (`{a, b}`),
    "tuple" (`std::tuple<...>(...)`), "call" (`make_tuple` / `forward_as_tuple` /
    `tie`), "push" (a returned vector: a `push_back` line before the return) or "wrap" (a
    value becomes `{value, profilingData}`). Raises for a returned vector optrace cannot
    append to."""
    code = mask(data)
    out: list[tuple[str, int, int, int]] = []
    vector = fn.type_span is not None and not re.search(
        rb"\btuple\s*<|^\s*(?:at::|torch::)?Tensor\s*$", data[fn.type_span[0] : fn.type_span[1]])
    for start, expr_start, expr_end in own_return_values(code, fn):
        expr = code[expr_start:expr_end]
        if expr.startswith(b"{") and match_bracket(code, expr_start) == expr_end - 1:
            out.append(("braces", start, expr_start, expr_end))
            continue
        call = re.match(rb"(?:std::)?(make_tuple|forward_as_tuple|tie|tuple\s*<)", expr)
        if call is not None and expr.endswith(b")"):
            how = "tuple" if call.group(1).startswith(b"tuple") else "call"
            out.append((how, start, expr_start, expr_end))
            continue
        if vector:
            if not re.fullmatch(rb"[A-Za-z_]\w*", expr) or not starts_line(data, start):
                raise input_error(CODE_LAYER_SHAPE, "cannot append profiling_data to this returned vector",
                                  path, data, start)
            out.append(("push", start, expr_start, expr_end))
            continue
        out.append(("wrap", start, expr_start, expr_end))
    return out


def return_value_edits(path: Path, data: bytes, fn: CppFunction, codemod: str) -> list[Edit]:
    """Every `return` of the function hands profilingData back as the last value."""
    code = mask(data)
    edits: list[Edit] = []
    for how, start, expr_start, expr_end in returned_values(path, data, fn):
        if how == "tuple":
            close = angle_close(code, code.index(b"<", expr_start))
            edits.append(fragment(path, close, b", at::Tensor", codemod, "return"))
        if how in ("braces", "tuple", "call"):
            edits.append(fragment(path, expr_end - 1, b", " + PROFILING_VAR.encode(), codemod, "return"))
        elif how == "push":
            edits.append(insert_lines(path, data, line_start(data, start), [
                leading_ws(data, start) + code[expr_start:expr_end] + b".push_back(" + PROFILING_VAR.encode()
                + b");"], codemod, "return"))
        else:
            edits.append(Edit(path, expr_start, expr_start, FRAG_OPEN + b"{" + FRAG_CLOSE, codemod, "return"))
            edits.append(fragment(path, expr_end, b", " + PROFILING_VAR.encode() + b"}", codemod, "return"))
    return edits


# --- the codemod ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchSite:
    """A launch without the profiling tensor: the statement its declaration goes before,
    the tensor whose options it takes (mode B), and whether the launcher's return type
    and returns grow here (mode B, its function's first launch)."""

    launch: Launch
    function: CppFunction
    statement: int
    tensor: str | None
    returns: bool


@dataclass(frozen=True)
class MetaSite:
    """A Meta kernel of the op that returns the buffer too (mode B): a declaration whose
    return type grows (`tensor` None), or a definition allocating it from `tensor`."""

    function: CppFunction
    tensor: str | None


@dataclass(frozen=True)
class AdapterTarget:
    """One file the torch adapter codemod writes (located; the text is
    `render_torch_adapter`'s): its launches, its Meta kernels, and whether the sizes
    header's include goes first. Mode B's tensor and a Meta kernel's name the size macro."""

    path: Path
    data: bytes  # the clean bytes
    launches: tuple[LaunchSite, ...]
    metas: tuple[MetaSite, ...]
    include: bool
    mode: str

    @property
    def sizes(self) -> bool:
        return (self.mode == "B" and bool(self.launches)) or any(m.tensor is not None for m in self.metas)


def locate_torch_adapter(plan: Plan, mode: str) -> list[AdapterTarget]:
    """The adapter files with launches to give the tensor, then (mode B) the files
    defining the op's Meta kernels apart. Raises what refuses the mode: a launch outside a
    function or sharing its line, a launcher that also launches an instrumented kernel,
    and in mode B one without a tensor parameter, returning void, or returning a vector
    it cannot append to (a Meta kernel's returns alike)."""
    layers = plan.analysis.layers
    if hand_instrumented(plan):
        return []
    out: list[AdapterTarget] = []
    metas = meta_kernel_files(layers) if mode == "B" else {}
    for layer_file in layers.found.get("torch_adapter", []):
        path = layer_file.path
        data = clean_bytes(path)
        done: set[int] = set()
        sites: list[LaunchSite] = []
        for launch in launches(path, data, layers):
            if any("profiling" in last_ident(data[s:e]).lower() for s, e in launch.args):
                continue
            fn = launch.function
            if fn is None:
                raise input_error(CODE_LAYER_SHAPE, f"`{launch.macro}` outside a function", path, data,
                                  launch.start)
            other = _instrumented_neighbour(path, fn.name, layers)
            if other is not None:
                raise input_error(CODE_LAYER_SHAPE, f"`{fn.name}` also launches `{other}`, which is "
                                  "instrumented: one torch op returning the profiling buffers of two "
                                  "kernels is not supported (strip the other operator first)", path, data,
                                  launch.start)
            stmt, tensor = _launch_site(path, data, launch, fn, mode)
            grows = mode == "B" and fn.start not in done
            if grows:
                declared = python_schema(path, layers, fn.name)
                if declared is not None:
                    py, line, name = declared
                    raise input_error(CODE_LAYER_SHAPE, f"the schema of `{name}` is a Python string "
                                      f"here, which optrace does not edit: `{fn.name}` "
                                      f"({path.name}) would return one more tensor than the schema "
                                      "and its Python Meta declare", py, line=line)
                done.add(fn.start)
                return_type_growth(path, data, fn.type_span)
                returned_values(path, data, fn)
            sites.append(LaunchSite(launch, fn, stmt, tensor, grows))
        meta = _meta_sites(path, data, metas.get(path, set())) if mode == "B" else []
        if sites or meta:
            out.append(AdapterTarget(path, data, tuple(sites), tuple(meta), mode == "B", mode))
    if mode == "B":
        # Meta kernels registered or defined apart from the adapter (`torch_binding_meta.cpp`).
        adapters = {f.path for f in layers.found.get("torch_adapter", [])}
        for path, names in metas.items():
            if path in adapters:
                continue
            data = clean_bytes(path)
            meta = _meta_sites(path, data, names)
            if meta:  # a definition names the size macro: the header's include goes first
                out.append(AdapterTarget(path, data, (), tuple(meta), any(m.tensor is not None for m in meta),
                                         mode))
    return out


def torch_adapter_edits(plan: Plan, mode: str) -> list[Edit]:
    return render_torch_adapter(plan, mode, locate_torch_adapter(plan, mode))


def render_torch_adapter(plan: Plan, mode: str, located: Sequence[AdapterTarget]) -> list[Edit]:
    """Each located file's sizes include (first: insertions at one offset concatenate in
    order, and a function may start where the include goes), its launches' tensor, the
    launchers' returns (mode B), then its Meta kernels."""
    layers = plan.analysis.layers
    host = [f.path for key in ("infer", "op_def", "torch_adapter") for f in layers.found.get(key, [])]
    header = sizes_header_path(layers.op_dir, host)
    kernel_pos = kernel_profiling_position(plan)
    edits: list[Edit] = []
    for target in located:
        path, data = target.path, target.data
        if target.include:
            inc = include_edit(path, data, header, CODEMOD)
            if inc is not None:
                edits.append(inc)
        for site in target.launches:
            edits.extend(_launch_edits(path, data, site, mode, kernel_pos))
            if site.returns:
                edits.extend(return_type_edits(path, data, site.function.type_span, CODEMOD))
                edits.extend(return_value_edits(path, data, site.function, CODEMOD))
        edits.extend(_meta_edits(path, data, target.metas))
    return edits


_TESTS = frozenset({"test", "tests", "ut", "st"})


def python_schema(adapter: Path, layers: Layers, launcher: str) -> tuple[Path, int, str] | None:
    """A schema of the op written as a Python string beside the binding (an op builder's
    `schema()`, a `torch.library` `define`): ops-nn's `torch_extension/` keeps the C++
    binding in `csrc/` and its schema and Meta in Python. (file, line, name) of the first;
    test folders aside. Mode B grows the binding's returns and nothing grows these. The
    op's names: its torch names and the launching function's (`swiglu_group_backward`
    launches `SwigluGroupGrad`, bound by pybind11 under its own name)."""
    keys = {op_key(n) for n in [*torch_names(layers), launcher]}
    if adapter.is_relative_to(layers.op_dir):
        top, files = layers.op_dir, sorted(layers.op_dir.rglob("*.py"))
    else:  # a binding of the repository's own (`csrc/`): its folder and the one above, not the tree
        top = adapter.parent.parent
        files = sorted({*adapter.parent.glob("*.py"), *top.glob("*.py")})
    for py in files:
        if _TESTS & {part.lower() for part in py.relative_to(top).parts[:-1]} or not py.is_file():
            continue
        try:
            found = _schemas_in(read_regular(py))
        except OSError:
            continue  # unreadable, or not a regular file (a link optrace does not follow)
        for line, name in found:
            if op_key(name) in keys:
                return py, line, name
    return None


@by_content(64)
def _schemas_in(data: bytes) -> tuple[tuple[int, str], ...]:
    """(line, op name) of each string constant of a Python file that parses as a torch
    schema (adjacent literals are one constant)."""
    if b"->" not in data:
        return ()
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return ()
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "->" in node.value:
            m = _SCHEMA_HEAD_RE.match(node.value)
            if m is None:
                continue
            try:
                parse_schema(node.value)
            except ValueError:
                continue
            out.append((node.lineno, m.group(1)))
    return tuple(out)


_SCHEMA_HEAD_RE = re.compile(r"\s*(?:\w+::)?(\w+)(?:\.\w+)?\s*\(")


def _instrumented_neighbour(path: Path, fn_name: str, layers: Layers) -> str | None:
    """Another kernel launched from the same adapter function that already passes a
    profiling tensor (as the file is now, with other operators' changes)."""
    current = read_regular(path)
    if current == strip_bytes(current, path):
        return None
    code = mask(current)
    for fn in functions(current):
        if fn.name != fn_name or fn.body_open < 0:
            continue
        launch_re = re.compile(rb"\bEXEC_(?:NPU|KERNEL)_CMD\w*\s*\(\s*(\w+)")
        for m in launch_re.finditer(code, fn.body_open, fn.body_close):
            target = m.group(1).decode()
            if target == layers.op_name or (target.startswith("aclnn")
                                             and same_op(target[len("aclnn"):], layers.op_name)):
                continue
            open_at = code.index(b"(", m.start())
            close = match_bracket(code, open_at)
            args = split_top(code, open_at + 1, close) if close > 0 else []
            if any("profiling" in last_ident(current[s:e]).lower() for s, e in args):
                return target
    return None


def _launch_site(path: Path, data: bytes, launch: Launch, fn: CppFunction,
                 mode: str) -> tuple[int, str | None]:
    """Where the launch's statement starts and (mode B) the tensor parameter the buffer
    takes its device and options from; raises when the statement shares its line or
    (mode B) the function has no tensor parameter."""
    stmt = statement_start(mask(data), launch.start)
    if not starts_line(data, stmt):
        raise input_error(CODE_LAYER_SHAPE, f"`{launch.macro}` shares its line with other code", path, data,
                          launch.start)
    if mode != "B":
        return stmt, None
    tensor = first_tensor_param(data, fn)
    if tensor is None:
        raise input_error(CODE_LAYER_SHAPE, f"`{fn.name}` has no tensor parameter to take the device "
                          "and options of profiling_data from", path, data, launch.start)
    return stmt, tensor


def _launch_edits(path: Path, data: bytes, site: LaunchSite, mode: str, kernel_pos: int) -> list[Edit]:
    launch, stmt = site.launch, site.statement
    indent = leading_ws(data, stmt)
    direct = launch.macro == "EXEC_KERNEL_CMD"
    if mode == "B":
        decl = (f"at::Tensor {PROFILING_VAR} = at::zeros({{{NUMEL_MACRO}}}, "
                f"{site.tensor}.options().dtype(at::kLong));")
    elif direct:
        decl = f"void *{PROFILING_VAR} = nullptr;  // mode A: no profiling buffer"
    else:
        decl = f"c10::optional<at::Tensor> {PROFILING_VAR} = c10::nullopt;  // mode A: optional, left out"
    edits = [insert_lines(path, data, line_start(data, stmt), [indent + decl.encode()], CODEMOD,
                          "profiling tensor")]
    if direct and 2 + kernel_pos < len(launch.args):
        at = launch.args[2 + kernel_pos][0]
        edits.append(fragment(path, at, PROFILING_VAR.encode() + b", ", CODEMOD, "kernel argument"))
    else:
        edits.append(fragment(path, launch.args[-1][1], b", " + PROFILING_VAR.encode(), CODEMOD,
                              "last output"))
    return edits


_META_RE = META_IMPL_RE


def meta_functions(data: bytes, op_names: Sequence[str]) -> list[str]:
    """Names of the Meta kernels registered for the op (under any of its names) here."""
    code = mask(data)
    names = []
    alternatives = b"|".join(re.escape(n.encode()) for n in op_names)
    for m in _META_RE.finditer(code):
        close = match_bracket(code, m.end() - 1)
        body = data[m.end() : close]
        for impl in re.finditer(rb'\.impl\s*\(\s*"(?:\w+::)?(?:' + alternatives
                                + rb')"\s*,\s*(?:TORCH_FN\s*\()?\s*&?\s*([\w:]+)', body):
            names.append(impl.group(1).decode().split("::")[-1])
    return names


def meta_kernel_files(layers: Layers) -> dict[Path, set[str]]:
    """The op's Meta kernels by the file defining them. They are registered
    (`TORCH_LIBRARY_IMPL(ns, Meta, m)`, by the op's registered names) in the adapter's file
    or a registration file, and defined there or in another source naming them (the
    function in a `*_meta.cpp`, registered from the binding): that file is edited, or the
    fake-tensor path would keep the old outputs."""
    names = torch_names(layers)
    out: dict[Path, set[str]] = {}
    seen: set[Path] = set()
    for layer_file in [*layers.found.get("torch_adapter", []), *layers.found.get("registration", [])]:
        path = layer_file.path
        if path in seen:
            continue
        seen.add(path)
        try:
            data = clean_bytes(path)
        except OSError:
            continue
        metas = set(meta_functions(data, names))
        if not metas:
            continue
        here = metas & {fn.name for fn in functions(data) if fn.body_open >= 0}
        if here:
            out.setdefault(path, set()).update(here)
        for name in sorted(metas - here):
            where = _defined_elsewhere(layers, name, path)
            if where is not None:
                out.setdefault(where, set()).add(name)
                out.setdefault(path, set()).add(name)  # its declaration here grows alike
    return out


def _defined_elsewhere(layers: Layers, name: str, registering: Path) -> Path | None:
    """The C++ source defining `name` (a Meta kernel registered in `registering`), the
    registering file's folder first; None when no source defines it."""
    found = [p for p in repo_index(layers.repo_root).mentioning(name.encode())
             if p != registering and p.suffix in CPP_EXTS]
    for path in sorted(found, key=lambda p: (p.parent != registering.parent, p.as_posix())):
        try:
            data = clean_bytes(path)
        except OSError:
            continue
        if any(fn.name == name and fn.body_open >= 0 for fn in functions(data)):
            return path
    return None


def _meta_sites(path: Path, data: bytes, names: set[str]) -> list[MetaSite]:
    """The Meta kernels named `names` here that change: declarations whose return type
    grows, definitions without the buffer that have a tensor parameter. Raises what
    their return type or returns refuse."""
    if not names:
        return []
    code = mask(data)
    out: list[MetaSite] = []
    for fn in functions(data, declarations=True):
        if fn.name not in names:
            continue
        if fn.body_open < 0:  # a declaration of one defined elsewhere: its return type
            if return_type_growth(path, data, fn.type_span) is not None:
                out.append(MetaSite(fn, None))
            continue
        if re.search(rb"\b" + PROFILING_VAR.encode() + rb"\b", code[fn.body_open : fn.body_close]):
            continue
        tensor = first_tensor_param(data, fn)
        if tensor is None:
            continue
        return_type_growth(path, data, fn.type_span)
        returned_values(path, data, fn)
        out.append(MetaSite(fn, tensor))
    return out


def _meta_edits(path: Path, data: bytes, sites: Sequence[MetaSite]) -> list[Edit]:
    code = mask(data)
    edits: list[Edit] = []
    for site in sites:
        fn = site.function
        if site.tensor is None:
            edits.extend(return_type_edits(path, data, fn.type_span, CODEMOD))
            continue
        first = fn.body_open + 1
        while code[first] in b" \t\r\n":
            first += 1
        indent = leading_ws(data, first)
        options = f"{site.tensor}.options().dtype(at::kLong).device(at::kMeta));".encode()
        decl = [indent + f"at::Tensor {PROFILING_VAR} = at::empty({{{NUMEL_MACRO}}}, ".encode() + options]
        if len(decl[0] + LINE_MARK) > REVIEW_WIDTH:  # the options on a line of their own
            decl = [decl[0][: -len(options) - 1], indent + b"    " + options]
        edits.append(insert_lines(path, data, line_start(data, first), decl, CODEMOD,
                                  "meta profiling tensor"))
        edits.extend(return_type_edits(path, data, fn.type_span, CODEMOD))
        edits.extend(return_value_edits(path, data, fn, CODEMOD))
    return edits


class TorchAdapterLayer(LocatingLayer[AdapterTarget]):
    NAME: ClassVar[str] = "torch_adapter"
    DESCRIPTION: ClassVar[str] = ("torch adapter (EXEC_NPU_CMD / EXEC_KERNEL_CMD): passes and returns the "
                                  "buffer")
    FOUND_KEY: ClassVar[str | None] = "torch_adapter"
    TITLE: ClassVar[str] = "torch adapter (EXEC_NPU_CMD / EXEC_KERNEL_CMD)"
    EXAMPLES: ClassVar[tuple[LayerExample, ...]] = (LayerExample(
        path="csrc/demo_op_adapter.cpp",
        files=EXAMPLE_TORCH,
        changes=(
            ('#include "functions.h"\n',
             '#include "functions.h"\n'
             '#include "../demo_op/op_host/optrace_demo_op_profiling.h"  // optrace\n'),
            ("at::Tensor demo_op(",
             "/*optrace<*/std::tuple</*>optrace*/at::Tensor/*optrace<*/, at::Tensor>/*>optrace*/"
             " demo_op("),
            ("    EXEC_NPU_CMD(aclnnDemoOp, x, y);\n    return y;\n",
             "    at::Tensor profilingData = at::zeros({OPTRACE_PROFILING_NUMEL}, "
             "x.options().dtype(at::kLong));"
             "  // optrace\n"
             "    EXEC_NPU_CMD(aclnnDemoOp, x, y/*optrace<*/, profilingData/*>optrace*/);\n"
             "    return /*optrace<*/{/*>optrace*/y/*optrace<*/, profilingData}/*>optrace*/;\n"),
        ),
    ),)

    def search(self, ctx: SearchContext) -> list[LayerFile]:
        """Files launching the op (EXEC_NPU_CMD / EXEC_KERNEL_CMD) anywhere in the
        repository; direct-launch projects keep the launcher in op_host/."""
        return [ctx.at(path, code, ctx.exec_re.pattern, "EXEC_*_CMD call")
                for path, code in ctx.cpp_candidates()
                if LAUNCH_HINT in code and ctx.exec_re.search(code)]

    def find(self, layers: Layers) -> list[Path]:
        found = [f.path for f in layers.found.get("torch_adapter", [])]
        # Its codemod also edits the op's Meta kernels registered apart from the adapter
        # (`torch_binding_meta.cpp`): their file is this layer's too, or strip would not
        # visit it when no other layer happens to claim it (the source fuzzer found one:
        # a Meta kernel whose return type no longer parsed).
        found.extend(path for path in meta_kernel_files(layers) if path not in found)
        return found

    def locate(self, plan: Plan, mode: str) -> list[AdapterTarget]:
        return locate_torch_adapter(plan, mode)

    def render(self, plan: Plan, mode: str, located: Sequence[AdapterTarget]) -> list[Edit]:
        return render_torch_adapter(plan, mode, located)

    def verify(self, model: LayerModel) -> list[Evidence]:
        op = model.op
        kernel_pos = op.facts.kernel_position
        ev: list[Evidence] = []
        metas: dict[Path, set[str]] | None = None
        for path, data in model.data.items():
            try:
                found = launches(path, data, op.layers)
            except InputError as exc:
                ev.append(Evidence(path, exc.diagnostic.line, exc.diagnostic.message, False))
                continue
            for ln in found:
                names = [last_ident(data[s:e]) for s, e in ln.args]
                direct = ln.macro == "EXEC_KERNEL_CMD"
                want = (2 + kernel_pos) if direct and kernel_pos is not None else len(names) - 1
                got = next((i for i, n in enumerate(names) if names_profiling(n)), None)
                if got is None:
                    ev.append(Evidence(path, ln.line, f"{ln.macro} does not pass a profiling tensor", False))
                    continue
                arg = data[ln.args[got][0] : ln.args[got][1]].strip()
                named = re.fullmatch(rb"[A-Za-z_]\w*", arg) is not None
                ok = got == want and named
                ev.append(Evidence(path, ln.line, f"{ln.macro}: `{names[got]}` is argument {got + 1}"
                                   + ("" if got == want else f", expected {want + 1}")
                                   + ("" if named else " (a temporary, not a named variable)"), ok))
                if op.mode == "B" and ln.function is not None:
                    ev.append(self._returned(path, data, ln.function))
                    if ln.function.type_span is not None:
                        text = data[ln.function.type_span[0] : ln.function.type_span[1]]
                        if re.search(rb"\btuple\s*<", text):
                            op.facts.adapter_returns = fixed_count(text)
            if op.mode == "B":
                if metas is None:
                    metas = meta_kernel_files(op.layers)
                ev.extend(self._meta_kernels(path, data, metas.get(path, set())))
        return ev

    @classmethod
    def _meta_kernels(cls, path: Path, data: bytes, metas: set[str]) -> list[Evidence]:
        """Mode B: the op's Meta kernels defined here (wherever they are registered) return
        the buffer too, or fake tensors (torch.compile, the abstract path) would see one
        output fewer than the device kernel gives."""
        out = []
        for fn in functions(data):
            if fn.name in metas and fn.body_open >= 0:
                e = cls._returned(path, data, fn)
                out.append(Evidence(path, e.line, f"Meta kernel {e.note}", e.ok))
        return out

    @staticmethod
    def _returned(path: Path, data: bytes, fn: CppFunction) -> Evidence:
        """Mode B: the launcher returns the buffer (last in its tuple, or pushed last)."""
        rets = returns_in(mask(data), fn)
        returned = any(names_profiling(data[s:e])
                       for s, e in rets) or b".push_back(" + PROFILING_VAR.encode() in \
            data[fn.body_open : fn.body_close]
        return Evidence(path, fn.line, f"`{fn.name}` returns the profiling tensor last" if returned
                        else f"`{fn.name}` does not return the profiling tensor (mode B)", returned)
