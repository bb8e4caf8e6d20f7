"""op_host registrations: which functions are the op's infer shape, infer dtype and tiling.

DESCRIPTION: reads the registrations that name the op's host functions — the
`IMPL_OP_INFERSHAPE(Op).InferShape(fn).InferDataType(fn2)`, `IMPL_OP_OPTILING(Op).Tiling(fn)`
and `IMPL_OP(Op)...` chains, and the older `this->SetInferShape(fn)` /
`.SetInferDataType(fn)` / `this->AICore().SetTiling(fn)` calls inside the op's OpDef — and
finds those functions' definitions among the op's host sources. The infer and tiling
codemods (and gate G2) edit and read only these: msopgen files keep many helpers that
take the same context (`static bool CheckTensorDim(gert::TilingContext *)`,
`IsPlatform910B(context)`), and a helper is never the registered function.

An op whose host code registers nothing (hand-written projects, snippets) falls back to
the functions taking the context type that no other function of those files calls: a
helper is called, a registered entry point is not.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from optrace.codemods.layer_common import clean_bytes, match_bracket, split_top
from optrace.engine.cache import by_content, once
from optrace.engine.cpp import CppFunction, functions, mask, param_name
from optrace.engine.discovery import CPP_EXTS, Layers, walk_files
from optrace.engine.edits import line_number
from optrace.engine.names import same_op
from optrace.engine.source import bracket_closes, read_regular

INFER_SHAPE = "infer shape"
INFER_DTYPE = "infer dtype"
TILING = "tiling"
CONTEXTS = {INFER_SHAPE: b"InferShapeContext", INFER_DTYPE: b"InferDataTypeContext", TILING: b"TilingContext"}

# The chain methods that register a function, per role.
_CHAIN_ROLES = {"InferShape": INFER_SHAPE, "InferDataType": INFER_DTYPE, "Tiling": TILING,
                "SetInferShape": INFER_SHAPE, "SetInferDataType": INFER_DTYPE, "SetTiling": TILING}
_IMPL_RE = re.compile(rb"\b(IMPL_OP_INFERSHAPE|IMPL_OP_OPTILING|IMPL_OP)\s*\(\s*([\w:]+)\s*\)")
_CHAIN_RE = re.compile(rb"\s*\.\s*([A-Za-z_]\w*)\s*(?:<[^;(){}]*>)?\s*\(")
_OPDEF_SET_RE = re.compile(rb"\b(SetInferShape|SetInferDataType|SetTiling)\s*\(")
_OPDEF_CLASS_RE = re.compile(rb"class\s+([A-Za-z_]\w*)\b[^;{]*\bOpDef\b[^;{]*\{")
# Possessive: with `\w*` and `[A-Za-z_]` free to split a name, `namespace a::bcdefgh...`
# not followed by `{` backtracked exponentially (the source fuzzer hung on one).
_NAMESPACE_RE = re.compile(rb"\bnamespace\s+((?:[A-Za-z_]\w*+\s*+(?:::\s*+)?)*+)\{")


def namespace_at(code: bytes, offset: int) -> tuple[str, ...]:
    """The named namespaces around `offset` of masked code, outermost first (anonymous
    ones are transparent): those whose `{` is before it and not closed by then (or never
    closed)."""
    ends, spans = _namespaces(code)
    at = bisect_right(ends, offset) - 1  # the last namespace opened before `offset`
    while at >= 0 and 0 <= spans[at][1] <= offset:  # closed by then: look further out
        at = spans[at][2]
    out: list[tuple[str, ...]] = []
    while at >= 0:  # what holds it holds `offset` too
        out.append(spans[at][0])
        at = spans[at][2]
    return tuple(name for names in reversed(out) for name in names)


@by_content(64, big=2)
def _namespaces(code: bytes) -> tuple[list[int], list[tuple[tuple[str, ...], int, int]]]:
    """Each namespace of a file, in order: where its head ends (just past the `{`), and
    (its names, the offset of its closing `}` or -1, the index of the namespace holding
    it or -1). Found once a file: each function asking for its namespaces, each of them
    matched anew, was cubic in a file pasted over itself."""
    closes = bracket_closes(code)
    ends: list[int] = []
    spans: list[tuple[tuple[str, ...], int, int]] = []
    open_ones: list[int] = []  # indexes of the namespaces not closed yet, outermost first
    for m in _NAMESPACE_RE.finditer(code):
        while open_ones and 0 <= spans[open_ones[-1]][1] < m.end():
            open_ones.pop()
        names = tuple(p for p in re.split(r"\s*::\s*", m.group(1).decode().strip()) if p)
        spans.append((names, closes.get(m.end() - 1, -1), open_ones[-1] if open_ones else -1))
        ends.append(m.end())
        open_ones.append(len(spans) - 1)
    return ends, spans


@dataclass(frozen=True)
class Registration:
    """`role` registered as `function` (as written, template arguments dropped; empty for a
    lambda) at path:line."""

    role: str
    function: str
    path: Path
    line: int
    namespace: tuple[str, ...] = ()  # the namespaces the registration is written in
    # For an `IMPL_OP...(Op).Role(fn)` chain at namespace scope: where the statement
    # starts and where the argument ends (-1 for OpDef class setters).
    statement: int = -1
    argument_end: int = -1

    @property
    def name(self) -> str:
        return self.function.split("::")[-1]

    def may_name(self, namespace: tuple[str, ...]) -> bool:
        """A definition in `namespace` is what this registration names, by C++ lookup
        from the registration's own namespace: `f` is found in that namespace or an
        enclosing one; `a::f` in a namespace ending with `a`."""
        qualifier = tuple(q for q in self.function.split("::")[:-1] if q)
        if qualifier:
            return namespace[len(namespace) - len(qualifier):] == qualifier
        return self.namespace[: len(namespace)] == namespace


@dataclass(frozen=True)
class HostFunction:
    """A registered (or, without registrations, fallback) host function and its context."""

    role: str
    path: Path
    function: CppFunction
    context: str  # the context parameter's name
    registration: Registration | None


_NOT_HOST = frozenset({"op_kernel", "op_api", "tests", "test", "examples", "docs"})


def host_files(layers: Layers) -> list[Path]:
    """C++ sources of the op's host side: the discovered OpDef / infer / tiling files and
    every other C++ file of the operator directory outside `op_kernel/`, `op_api/` and
    its tests, examples and docs. (Walked once in an `unchanged_files` stretch: the
    infer, tiling and aclnn layers each ask, a dozen times an operator.)"""
    return list(once(("host_files", id(layers)), lambda: _host_files(layers), layers))


def _host_files(layers: Layers) -> list[Path]:
    files = [f.path for key in ("op_def", "infer", "tiling") for f in layers.found.get(key, [])]
    depth = len(layers.op_dir.parts)  # the walk's paths start with the op dir's parts
    for path in walk_files(layers.op_dir, CPP_EXTS):
        if not _NOT_HOST.isdisjoint(path.parts[depth:]) or path in files:
            continue
        if path.suffix.lower() in (".cpp", ".cc", ".cxx", ".h", ".hpp"):
            files.append(path)
    return list(dict.fromkeys(files))


def _first_argument(data: bytes, code: bytes, open_at: int) -> tuple[str, int] | None:
    """The function a registration call names (empty: a lambda, or no argument) and the
    call's closing parenthesis; None when the parentheses do not close."""
    close = match_bracket(code, open_at)
    if close < 0:
        return None
    items = split_top(code, open_at + 1, close)
    if not items:
        return "", close
    text = data[items[0][0] : items[0][1]].decode(errors="replace").strip()
    if text.startswith("["):
        return "", close  # a lambda: nothing to name, nothing to edit
    text = re.sub(r"<[^<>]*>", "", text.lstrip("&").strip())
    return re.sub(r"\s+", "", text), close


def _chains(data: bytes, code: bytes, names: tuple[str, ...]) -> list[tuple[int, str, str, int, int]]:
    """The `IMPL_OP...(Op).Role(fn)` chains of the op: (the macro's offset, role, function
    as written, the role call's offset, the argument's end), the last one per role."""
    out: list[tuple[int, str, str, int, int]] = []
    for m in _IMPL_RE.finditer(code):
        if not any(same_op(m.group(2).decode().split("::")[-1], n) for n in names):
            continue
        pos = m.end()
        chain: dict[str, tuple[int, str, str, int, int]] = {}
        while True:
            call = _CHAIN_RE.match(code, pos)
            if call is None:
                break
            arg = _first_argument(data, code, call.end() - 1)
            if arg is None:
                break
            role = _CHAIN_ROLES.get(call.group(1).decode())
            if role is not None and not call.group(1).startswith(b"Set"):
                # The builder's setters keep the last function a chain gives a role.
                chain[role] = (m.start(), role, arg[0], call.start(), arg[1])
            pos = arg[1] + 1
        out.extend(chain.values())
    return out


_DEFINE_RE = re.compile(rb"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)\(([^()\n]*)\)", re.M)


def _registering_macros(data: bytes) -> dict[str, tuple[list[str], bytes, int, int]]:
    """Function-like macros of the file whose body registers (`#define REG(op, fn)
    IMPL_OP_OPTILING(op).Tiling(fn)`): name -> (parameters, body, the define's span)."""
    out: dict[str, tuple[list[str], bytes, int, int]] = {}
    for m in _DEFINE_RE.finditer(data):
        end = m.end()
        while True:  # the body runs on over backslash-newlines
            nl = data.find(b"\n", end)
            if nl < 0:
                nl = len(data)
                break
            if data[:nl].rstrip(b"\r").endswith(b"\\"):
                end = nl + 1
                continue
            break
        body = re.sub(rb"\\\r?\n", b" ", data[m.end() : nl])
        if _IMPL_RE.search(body):
            params = [p.strip().decode(errors="replace") for p in m.group(2).split(b",")]
            out[m.group(1).decode()] = (params, body, m.start(), nl)
    return out


def _macro_chains(data: bytes, code: bytes, names: tuple[str, ...]) -> list[tuple[int, str, str]]:
    """Registrations written through a macro of the file (ops-nn's
    `IMPL_OP_OPTILING_LEGACY(Op, TilingFunc, ParseFunc, CompileInfo)`): each use expanded
    (its arguments for the parameters, token-wise) and read like a chain. (the use's
    offset, role, function)."""
    out = []
    macros = _registering_macros(data)
    for name, (params, body, define_start, define_end) in macros.items():
        for use in re.finditer(rb"\b" + re.escape(name.encode()) + rb"\s*\(", code):
            if define_start <= use.start() < define_end:
                continue  # the #define itself
            close = match_bracket(code, use.end() - 1)
            if close < 0:
                continue
            args = [data[s:e].strip() for s, e in split_top(code, use.end(), close)]
            if len(args) != len(params):
                continue
            expanded = _substitute(body, dict(zip(params, args, strict=True)))
            for _at, role, function, _call, _end in _chains(expanded, mask(expanded), names):
                out.append((use.start(), role, function))
    return out


def _substitute(body: bytes, by_param: dict[str, bytes]) -> bytes:
    """A macro body with its parameters replaced, token by token."""
    return re.sub(rb"\b[A-Za-z_]\w*\b", lambda t: by_param.get(t.group(0).decode(), t.group(0)), body)


@by_content(64)
def _registrations(path: Path, data: bytes, names: tuple[str, ...]) -> tuple[Registration, ...]:
    # by content: `check` asks for the registrations of the same host files once per
    # layer and role (a dozen times an operator)
    code = mask(data)
    out: list[Registration] = [
        Registration(role, function, path, line_number(data, call), namespace_at(code, at), at, end)
        for at, role, function, call, end in _chains(data, code, names)]
    # Through a macro: no statement of ours to wrap (an unresolved one stays unwrapped).
    out.extend(Registration(role, function, path, line_number(data, at), namespace_at(code, at))
               for at, role, function in _macro_chains(data, code, names))
    for cls in _OPDEF_CLASS_RE.finditer(code):
        if not any(same_op(cls.group(1).decode(), n) for n in names):
            continue
        close = match_bracket(code, cls.end() - 1)
        for m in _OPDEF_SET_RE.finditer(code, cls.end(), close if close > 0 else len(code)):
            arg = _first_argument(data, code, m.end() - 1)
            if arg is not None:
                out.append(Registration(_CHAIN_ROLES[m.group(1).decode()], arg[0], path,
                                        line_number(data, m.start()), namespace_at(code, m.start())))
    return tuple(out)


def op_names(layers: Layers, files: list[Path], clean: bool = True) -> tuple[str, ...]:
    """The names the op registers under: its own, and its OpDef class's (a directory may
    be named apart from the op it defines)."""
    names = [layers.op_name]
    for path in [f.path for f in layers.found.get("op_def", [])]:
        data = _bytes(path, clean)
        classes = [m.group(1).decode() for m in _OPDEF_CLASS_RE.finditer(mask(data))]
        if len(classes) == 1 and classes[0] not in names:
            names.append(classes[0])
    return tuple(names)


def registrations(layers: Layers, clean: bool = True) -> list[Registration]:
    """Every registration of the op's infer / tiling functions in its host files."""
    return list(once(("registrations", id(layers), clean), lambda: _all_registrations(layers, clean), layers))


def _all_registrations(layers: Layers, clean: bool) -> list[Registration]:
    files = host_files(layers)
    names = op_names(layers, files, clean)
    out: list[Registration] = []
    for path in files:
        out.extend(_registrations(path, _bytes(path, clean), names))
    return out


def _bytes(path: Path, clean: bool) -> bytes:
    try:
        return clean_bytes(path) if clean else read_regular(path)
    except OSError:
        return b""


def _context_param(data: bytes, fn: CppFunction, role: str) -> str | None:
    for span in fn.params:
        if CONTEXTS[role] in data[span[0] : span[1]]:
            return param_name(data, span)
    return None


def host_functions(layers: Layers, role: str, clean: bool = True) -> list[HostFunction]:
    """The op's `role` functions (INFER_SHAPE, INFER_DTYPE or TILING): the definitions of
    the functions its registrations name, in the host files; without any registration
    of the op, the functions taking the role's context that no function of those files
    calls."""
    return list(_found(layers, role, clean)[0])


def _found(layers: Layers, role: str, clean: bool) -> tuple[list[HostFunction], frozenset[Registration]]:
    """`host_functions`, and the registrations that name a function defined in the host
    files (each function is listed once, with the first registration naming it)."""
    return once(("host_functions", id(layers), role, clean),
                lambda: _host_functions(layers, role, clean), layers)


def _host_functions(layers: Layers, role: str,
                    clean: bool) -> tuple[list[HostFunction], frozenset[Registration]]:
    files = host_files(layers)
    regs = registrations(layers, clean)
    texts = {path: _bytes(path, clean) for path in files}
    out: list[HostFunction] = []
    matched: set[Registration] = set()
    if regs:
        for reg in regs:
            if reg.role != role or not reg.name:
                continue
            same_name = []
            for path, data in texts.items():
                for fn in functions(data):
                    if fn.body_open < 0 or fn.name != reg.name:
                        continue
                    ctx = _context_param(data, fn, role)
                    if ctx is not None:
                        found = HostFunction(role, path, fn, ctx, reg)
                        same_name.append((namespace_at(mask(data), fn.start), found))
            # The one C++ lookup finds (`Tiling4X` beside an `arch35::Tiling4X`), else all.
            looked_up = [f for ns, f in same_name if reg.may_name(ns)]
            out.extend(looked_up or [f for _ns, f in same_name])
            if same_name:
                matched.add(reg)
        return _unique(out), frozenset(matched)
    # Nothing registers the op here: the context-taking functions nothing else calls.
    called: set[str] = set()
    defined: list[tuple[Path, bytes, CppFunction]] = []
    for path, data in texts.items():
        code = mask(data)
        for fn in functions(data):
            if fn.body_open < 0:
                continue
            defined.append((path, data, fn))
            called.update(m.group(1).decode() for m in
                          re.finditer(rb"\b([A-Za-z_]\w*)\s*\(", code[fn.body_open : fn.body_close]))
    for path, data, fn in defined:
        ctx = _context_param(data, fn, role)
        if ctx is not None and fn.name not in called:
            out.append(HostFunction(role, path, fn, ctx, None))
    return _unique(out), frozenset(matched)


def _unique(found: list[HostFunction]) -> list[HostFunction]:
    seen: set[tuple[Path, int]] = set()
    out = []
    for f in found:
        key = (f.path, f.function.start)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def unresolved(layers: Layers, role: str, clean: bool = True) -> list[Registration]:
    """Registrations of `role` whose function optrace cannot read here: a lambda, or a
    function defined outside the op's host files (a shared library's
    `Ops::Base::InferShape4Elewise`)."""
    # A registration whose function is defined here is not wrapped, even where that
    # definition is listed with another registration of the same name (ops-nn registers
    # its infer dtype function both in op_host and in op_graph, each file defining one).
    found = _found(layers, role, clean)[1]
    return [r for r in registrations(layers, clean) if r.role == role and r not in found]


def callees(layers: Layers, fn: HostFunction, clean: bool = True) -> list[tuple[Path, bytes, CppFunction]]:
    """`fn` and the functions of the host files it calls, directly or not (by name)."""
    texts = {path: _bytes(path, clean) for path in host_files(layers)}
    by_name: dict[str, list[tuple[Path, bytes, CppFunction]]] = {}
    for path, data in texts.items():
        for f in functions(data):
            if f.body_open >= 0:
                by_name.setdefault(f.name, []).append((path, data, f))
    start = (fn.path, texts.get(fn.path, b""), fn.function)
    out = [start]
    seen = {(fn.path, fn.function.start)}
    i = 0
    while i < len(out):
        _path, data, f = out[i]
        i += 1
        code = mask(data)
        for m in re.finditer(rb"\b([A-Za-z_]\w*)\s*\(", code[f.body_open : f.body_close]):
            for target in by_name.get(m.group(1).decode(), []):
                key = (target[0], target[2].start)
                if key not in seen:
                    seen.add(key)
                    out.append(target)
    return out
