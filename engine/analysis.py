"""Operator analysis: parse the include tree, index functions, build the call graph.

`analyse_operator` is the engine's front door: directory in, `Analysis` out. It reads
files and nothing else; the trace tree is built from it by `optrace.engine.planner`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
from tree_sitter import Node

from optrace.engine.codes import OT010, OT011, OT020, OT021, OT022
from optrace.engine.config import Config, load_config
from optrace.engine.core_config import CoreDeclaration, from_binary_metadata, from_kernel, from_op_host
from optrace.engine.cpp import (
    CodeIndex,
    FunctionDef,
    LocalDecl,
    ParsedFile,
    base_type_name,
    local_type_at,
    new_parser,
    parse_file,
    scoped_locals,
    text_of,
)
from optrace.engine.diagnostics import Diagnostic, InputError
from optrace.engine.discovery import (
    Layers,
    LayerSearch,
    default_repo_root,
    discover,
    repo_index,
    resolve_operator_dir,
)
from optrace.engine.includes import HeaderSearch, IncludeGraph, build_include_graph
from optrace.engine.model import TracePoint
from optrace.engine.source import (
    VECTOR_SCOPE,
    blank_comments,
    blank_conditionals,
    decode,
    directive_matches,
    normalise,
    qualifier_macros,
    vector_scope_macros,
)
from optrace.engine.vocabulary import TRACE_POINT_CALL

# Device primitives that block until another core / rank arrives: phase boundaries.
# Launches of a SIMT / vector function (`Simt::VF_CALL<Fn<T>>(dims, args...)`,
# `asc_vf_call<Fn>(...)`): the launched function runs per thread, so it is measured at the
# launch and never gets points of its own; a function that launches one does real work.
VF_LAUNCHERS = frozenset({"VF_CALL", "asc_vf_call"})
_VF_LAUNCH_RE = re.compile(rb"\b(?:VF_CALL|asc_vf_call)\s*<\s*([A-Za-z_][\w:]*)")


def vf_target(text: bytes) -> str | None:
    """The function a VF launch statement runs (`OpForeachExpm1Simt`), if it is one."""
    m = _VF_LAUNCH_RE.search(text)
    return m.group(1).decode().split("::")[-1] if m else None


BLOCKING_PRIMITIVES = frozenset(
    {
        "CrossCoreWaitFlag",
        "SyncAll",
        "CrossCoreBarrier",
        "IBWait",
        "WaitEvent",
        "HcclWait",
        "Wait",
        "SyncAllCores",
    }
)
# Primitives that release a partner: the other half of a cross-core / cross-rank handshake.
SET_PRIMITIVES = frozenset({"CrossCoreSetFlag", "IBSet", "NotifyEvent"})
HOT_WORDS = ("dequant", "deq", "quant", "wait", "sync", "send", "recv", "receive", "copy",
             "barrier")
_EXISTING_RE = re.compile(rb"MoeTracing\s*(?:<[^>]*>)?\s*\(\s*" + TRACE_POINT_CALL)


# The optrace device runtime itself (the header apply writes beside the entry) is not operator
# code: its functions are never call targets and its calls never count as statements,
# so planning an instrumented tree gives the same plan as before (apply is idempotent).
RUNTIME_NAMES = frozenset({"MoeTracing", "MoeTracingFingerprint", "SetMoeProfilePtr", "OptraceEntryBegin",
                           "MoeProfileWriteBack", "WriteRecord"})
RUNTIME_SCOPES = frozenset({"optrace_detail"})


@dataclass
class CallSite:
    """A call in a function body: its node, the name called and the definitions it may reach."""

    node: Node
    name: str
    callees: list[FunctionDef]


@dataclass
class Analysis:
    """Everything planning, apply and check read of one operator: its layers, config, include
    graph, parsed files, code index and call graph."""

    layers: Layers
    config: Config
    includes: IncludeGraph
    parsed: dict[Path, ParsedFile]
    index: CodeIndex
    # caller id -> callee id (FunctionDef.id); nodes carry label / file / line, edges the
    # line of the call.
    callgraph: nx.DiGraph
    entry_fn: FunctionDef
    mixed: bool
    kernel_cores: frozenset[str]
    # What declares the core types (the kernel's KERNEL_TASK_TYPE, else its compiled
    # metadata or OpDef config; empty: nothing does, and kernel_cores is inferred): the
    # buffer layout trusts only a declaration.
    declared_cores: frozenset[str] = frozenset()
    core_declaration: CoreDeclaration | None = None
    existing: list[TracePoint] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    phase_work: set[str] = field(default_factory=set)
    heavy: set[str] = field(default_factory=set)  # heavy itself or calls something heavy
    hot: set[str] = field(default_factory=set)  # handshakes, hot names with content, spin loops
    walked: set[str] = field(default_factory=set)  # functions whose calls are in the graph
    # function id -> number of call sites reaching it (over reachable code)
    call_counts: dict[str, int] = field(default_factory=dict)
    # The names that open a block compiled as a vector function: `__VEC_SCOPE__` and the
    # macros the tree defines to it (`#define VF_BLOCK __VEC_SCOPE__`).
    vector_scopes: frozenset[str] = frozenset({VECTOR_SCOPE})
    _calls: dict[tuple[Path, int, int, str], CallSite] = field(default_factory=dict)
    _sizes: dict[str, tuple[int, bool]] = field(default_factory=dict)
    _spin: dict[tuple[str, int, int], bool] = field(default_factory=dict)
    _scoped: dict[str, dict[str, list[LocalDecl]]] = field(default_factory=dict)
    _macros: dict[str, FunctionMacro] | None = None
    # (text, calling class) -> what a qualified call resolves to (`_resolve_qualified`):
    # most calls of a kernel are `AscendC::DataCopy(...)`-like, the same few texts.
    _qualified: dict[tuple[str, str], tuple[str, tuple[FunctionDef, ...]]] = field(default_factory=dict)

    # --- per-function facts ---------------------------------------------------------
    def local_type(self, fn: FunctionDef, name: str, offset: int) -> str | None:
        """The declared type of a local or parameter `name` as seen at `offset` in fn."""
        scoped = self._scoped.get(fn.id)
        if scoped is None:
            scoped = self._scoped[fn.id] = scoped_locals(fn.src, fn)
        return local_type_at(scoped, name, offset) or fn.params.get(name)

    def name_type(self, fn: FunctionDef, name: str, offset: int) -> str | None:
        """The declared type of `name` at `offset` in fn: a local, a parameter, else a
        member of fn's class."""
        tname = self.local_type(fn, name, offset)
        if tname is None and fn.scope in self.index.classes:
            tname = self.index.classes[fn.scope].fields.get(name)
        return tname

    def function_macros(self) -> dict[str, FunctionMacro]:
        """`#define NAME(params) body` of every file read, by name (the first wins)."""
        if self._macros is None:
            self._macros = {}
            for parsed in self.parsed.values():
                for macro in scan_function_macros(blank_comments(parsed.src.raw)):
                    self._macros.setdefault(macro.name, macro)
        return self._macros

    def macro_work(self, name: str) -> tuple[int, bool]:
        """(statements, holds a loop) of a function-like macro's definition, macros it
        uses followed a few levels deep; (0, False) for a name no file defines."""
        stmts, has_loop = 0, False
        seen: set[str] = set()
        todo = [name]
        macros = self.function_macros()
        while todo and len(seen) < _MACRO_WORK_DEPTH:
            macro = macros.get(todo.pop())
            if macro is None or macro.name in seen:
                continue
            seen.add(macro.name)
            body = _DO_WHILE_0_RE.sub(";", macro.body)
            stmts += body.count(";")
            has_loop = has_loop or _LOOP_RE.search(body) is not None
            todo += [m.group(1) for m in _MACRO_USE_RE.finditer(body) if m.group(1) in macros]
        return stmts, has_loop

    def add_macro_calls(self, caller: FunctionDef, callees: list[FunctionDef]) -> None:
        """Calls a macro's expansion makes (`INIT_AND_PROCESS;` running `op.Process()`):
        edges in the call graph like any call, so what they reach counts as reached and
        their loops and waits make the caller's work."""
        new = [c for c in callees if not self.callgraph.has_edge(caller.id, c.id) and c.id != caller.id]
        if not new:
            return
        for callee in new:
            self.callgraph.add_edge(caller.id, callee.id, line=caller.line)
            self.call_counts[callee.id] = self.call_counts.get(callee.id, 0) + 1
        _extend_callgraph(self, [c for c in new if c.id not in self.walked])

    def call_site(self, fn: FunctionDef, call: Node) -> CallSite:
        # The path itself, not its text: a Path keeps its hash, str() of it is built anew
        # (this runs for every call of every walk, millions of times on a large forest).
        key = (fn.src.path, call.start_byte, call.end_byte, fn.id)
        site = self._calls.get(key)
        if site is None:
            name, callees = resolve_call(self, fn, call)
            if name in RUNTIME_NAMES:
                callees = []
            site = CallSite(call, name, callees)
            self._calls[key] = site
        return site

    def is_substantial(self, fn: FunctionDef) -> bool:
        """Worth its own region: does phase work or has real size, itself or through
        what it calls (a two-line `Process()` that runs the gather loop is the gather)."""
        if fn.id in self.phase_work or fn.id in self.heavy:
            return True
        return self.is_heavy(fn)

    def is_heavy(self, fn: FunctionDef) -> bool:
        stmts, has_loop = self.size_of(fn)
        return stmts >= 8 or (has_loop and stmts >= 3)

    def size_of(self, fn: FunctionDef) -> tuple[int, bool]:
        """(expression statements, contains a loop), computed once per function."""
        cached = self._sizes.get(fn.id)
        if cached is None:
            stmts = 0
            has_loop = False
            for node in fn.nodes_in(fn.body, ("expression_statement", "for_statement",
                                             "while_statement", "do_statement", "for_range_loop",)):
                if node.type == "expression_statement":
                    if fn.src.text[node.start_byte : node.start_byte + 10] != b"MoeTracing":
                        stmts += 1
                    text = fn.src.text[node.start_byte : node.end_byte]
                    if vf_target(text):
                        has_loop = True  # a launch of a thread grid: a loop in all but name
                    elif _MATMUL_RUN_RE.search(text):
                        # `mm.IterateAll(c)`: the matmul API's run over every tile of the
                        # product (gru's input matmul, seven lines that set it up and run it)
                        has_loop = True
                    elif (m := _MACRO_STMT_RE.match(fn.src.text, node.start_byte)) is not None:
                        # `PROCESS_TILES(tiling);`: a macro whose definition holds the loop
                        # is the function's work, written elsewhere
                        # (a macro of a few statements and no loop, a pipe sync, stays one)
                        more, looped = self.macro_work(m.group(1).decode(errors="replace"))
                        if looped:
                            stmts += more
                            has_loop = True
                else:
                    has_loop = True
            cached = self._sizes[fn.id] = (stmts, has_loop)
        return cached


# A statement that is a call of an upper-case name: a macro, by the usual spelling.
# A statement that runs a whole matrix product through the matmul API (its loop over tiles
# is in the library).
_MATMUL_RUN_RE = re.compile(rb"(?:\.|->)\s*(?:IterateAll|IterateBatch|IterateNBatch)\s*[<(]")
_MACRO_STMT_RE = re.compile(rb"[ \t]*([A-Z_][A-Z0-9_]*)[ \t]*\(")
_MACRO_USE_RE = re.compile(r"\b([A-Z_][A-Z0-9_]*)\s*\(")
_LOOP_RE = re.compile(r"\b(?:for|while)\s*\(")
# `do { ... } while (0)` wraps a macro's statements; its `while` is not a loop
_DO_WHILE_0_RE = re.compile(r"\}\s*while\s*\(\s*(?:0|false)\s*\)")
_MACRO_WORK_DEPTH = 8  # macros followed through one macro's definition


@dataclass(frozen=True)
class FunctionMacro:
    """A `#define` the call graph expands: function-like (`NAME(params) body`) or object-like."""

    name: str
    params: tuple[str, ...]
    body: str
    object_like: bool = False  # `#define NAME body`: used as `NAME;`, no arguments

    def expand(self, args: list[str]) -> str:
        """The body with its parameters replaced (`__VA_ARGS__` takes the rest)."""
        values = dict(zip(self.params, args, strict=False))
        if self.params and self.params[-1] == "...":
            values["__VA_ARGS__"] = ", ".join(args[len(self.params) - 1:])
        return re.sub(r"\b[A-Za-z_]\w*\b", lambda m: values.get(m.group(0), m.group(0)), self.body)


_DEFINE_RE = re.compile(rb"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)\(([^)]*)\)((?:[^\n]*\\\r?\n)*[^\n]*)",
                        re.M)


_OBJECT_DEFINE_RE = re.compile(rb"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+((?:[^\n]*\\\r?\n)*[^\n]*)",
                               re.M)


def scan_function_macros(code: bytes) -> list[FunctionMacro]:
    """Function-like macro definitions (continuation lines joined), comments blanked, and
    object-like ones whose body calls a method (`#define INIT_AND_PROCESS op.Init(...);
    op.Process()`): a kernel runs its class through either."""
    out = []
    for m in directive_matches(_DEFINE_RE, code):
        params = tuple(p.strip() for p in decode(m.group(2)).split(",") if p.strip())
        body = re.sub(r"\\\r?\n", " ", decode(m.group(3)))
        out.append(FunctionMacro(decode(m.group(1)), params, body))
    for m in directive_matches(_OBJECT_DEFINE_RE, code):
        if b"(" not in m.group(2) or not re.search(rb"(?:\.|->)\s*\w+\s*\(", m.group(2)):
            continue
        body = re.sub(r"\\\r?\n", " ", decode(m.group(2)))
        out.append(FunctionMacro(decode(m.group(1)), (), body, object_like=True))
    return out


def split_arguments(text: str) -> list[str]:
    """`a, Foo<b, c>, (d, e)` -> three arguments (brackets nest)."""
    args: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch in "(<[{":
            depth += 1
        elif ch in ")>]}":
            depth -= 1
        if ch == "," and depth == 0:
            args.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        args.append("".join(cur).strip())
    return args


_TEMPLATE_KEYWORD_RE = re.compile(r"::\s*template\s+")


def callee_name(src_text: str) -> str:
    return base_type_name(src_text) if "<" in src_text else src_text.split("::")[-1].strip()


def _receiver_classes(an: Analysis, fn: FunctionDef, name: list[str], at: int) -> set[str]:
    """Classes of a receiver named by a local, a parameter or a field of fn's class."""
    if not name or not name[0]:
        return set()
    tname = an.name_type(fn, name[0], at)
    if tname is None:
        return set()
    return _type_classes(an, fn, tname)


def _type_classes(an: Analysis, fn: FunctionDef, spelled: str) -> set[str]:
    """The classes a type spelled in fn may be: a template parameter of fn's class
    template is a class deriving from it (CRTP: `Derived *d = static_cast<Derived *>(this)`),
    else what the index resolves."""
    info = an.index.classes.get(fn.scope)
    if info is not None and base_type_name(spelled) in info.template_params:
        return set(an.index.derived_from(fn.scope))
    return an.index.resolve_class(spelled, fn.scope)


# `static_cast<Derived *>(this)`, the CRTP base's way to its derived class's steps.
_THIS_CAST_RE = re.compile(r"\(?\s*(?:static|reinterpret)_cast\s*<\s*(?:const\s+)?([\w:]+(?:<[^()]*>)?)"
                           r"\s*(?:const\s*)?\*\s*>\s*\(\s*this\s*\)\s*\)?")


def resolve_call(an: Analysis, fn: FunctionDef, call: Node) -> tuple[str, list[FunctionDef]]:
    """The project functions a call expression may reach (empty for intrinsics)."""
    idx = an.index
    src = fn.src
    func = call.child_by_field_name("function")
    if func is None:
        return "", []
    if func.type == "field_expression":
        arg = func.child_by_field_name("argument")
        field_node = func.child_by_field_name("field")
        if field_node is None or arg is None:
            return "", []
        name = text_of(src, field_node)
        if field_node.type == "template_method":
            inner = field_node.child_by_field_name("name")
            name = text_of(src, inner) if inner is not None else name
        name = name.replace("template ", "").strip()
        if name.startswith("operator__"):
            name = "operator()"
        recv = text_of(src, arg).strip()
        classes: set[str] = set()
        cast = _THIS_CAST_RE.fullmatch(recv)
        if recv == "this":
            classes = {fn.scope}
        elif cast is not None:
            classes = _type_classes(an, fn, cast.group(1))
        else:
            path = [re.sub(r"\[.*?\]", "", p).strip("*&() ") for p in re.split(r"->|\.", recv.lstrip("*&("))]
            if path[0] == "this":
                path = path[1:]
            classes = _receiver_classes(an, fn, path[:1], call.start_byte)
            # `holder.kernel.Process()`: each further name is a field of the classes so far
            for member in path[1:]:
                types = {t for c in classes if c in idx.classes
                         for t in [idx.classes[c].fields.get(member)] if t}
                classes = set().union(*(idx.resolve_class(t, fn.scope) for t in types))
            if not classes and len(path) > 1:
                classes = _receiver_classes(an, fn, path[-1:], call.start_byte)
        if classes:
            return name, idx.methods(classes, name)
        # Unknown receiver: accept only a method name defined in exactly one class.
        cands = [f for f in idx.by_name.get(name, ()) if f.scope]
        if len({f.scope for f in cands}) == 1 and name not in ("Init", "Process", "operator()"):
            return name, cands
        return name, []
    if func.type == "identifier":
        name = text_of(src, func)
        # `gemm(params)` on an object of a known class: its operator().
        tname = an.name_type(fn, name, call.start_byte)
        if tname is not None:
            classes = idx.resolve_class(tname, fn.scope)
            if classes:
                return name, idx.methods(classes, "operator()")
        cands = idx.by_name.get(name, [])
        same_scope = [f for f in cands if f.scope == fn.scope]
        if not same_scope and fn.scope:  # a method inherited from a base class
            same_scope = idx.methods({fn.scope}, name)
        free = same_scope or [f for f in cands if not f.scope]
        # `SyncFunc(g)` inside namespace `gather` is gather's own when it has one.
        near = [f for f in free if fn.namespace and f.namespace == fn.namespace]
        return name, near or free
    if func.type in ("qualified_identifier", "template_function"):
        key = (text_of(src, func), fn.scope)
        known = an._qualified.get(key)
        if known is None:
            name, found = _resolve_qualified(an, *key)
            known = an._qualified[key] = (name, tuple(found))
        return known[0], list(known[1])
    return "", []


def _resolve_qualified(an: Analysis, text: str, caller_scope: str) -> tuple[str, list[FunctionDef]]:
    """What a call of a qualified name (`ns::F`, `Base::template Step<T>`) reaches, from
    its text and the calling function's class alone."""
    idx = an.index
    # `Base::template Step(this)`: the keyword that tells a dependent name is a template
    spelled = _TEMPLATE_KEYWORD_RE.sub("::", text)
    name = callee_name(spelled)
    scope_part = spelled.split("<")[0]
    scope = scope_part.split("::")[-2] if scope_part.count("::") >= 1 else ""
    cands = idx.by_name.get(name, [])
    if scope and any(f.scope == scope for f in cands):
        return name, [f for f in cands if f.scope == scope]
    # `Base::Step()` / `Derived::Step()`: the class (through an alias of the caller's
    # class too) and what it inherits.
    owners = idx.resolve_class(scope, caller_scope) if scope else set()
    inherited = idx.methods(owners, name) if owners else []
    if inherited:
        return name, inherited
    # `gather::SyncFunc(g)`: the function of that namespace, not its namesakes
    in_ns = [f for f in cands if scope and not f.scope
             and (f.namespace == scope or f.namespace.endswith("::" + scope))]
    if in_ns:
        return name, in_ns
    same = [f for f in cands if f.scope in ("", caller_scope)]
    return name, same


def _collect_existing(an: Analysis) -> None:
    # The functions of each file, in index order, found once: an instrumented operator has
    # hundreds of points, and comparing every function's path for each was a tenth of check.
    by_file: dict[Path, list[FunctionDef]] = {}
    for fn in an.index.functions.values():
        by_file.setdefault(fn.src.path, []).append(fn)
    for path, parsed in an.parsed.items():
        code = blank_comments(parsed.src.raw)
        # The innermost body holding each point (bodies nest or are apart): one sweep over
        # the bodies by where they start, as the points come in order, with the bodies
        # still open on a stack — asking every function for every point was quadratic.
        functions = sorted(by_file.get(path, []), key=lambda f: (f.body.start_byte, -f.body.end_byte))
        open_bodies: list[FunctionDef] = []
        next_fn = 0
        for m in _EXISTING_RE.finditer(code):
            if m.group(2) not in (b"B", b"E"):
                continue  # not a point planning can pair; check reports it (OT401)
            line = parsed.src.line_of(m.start())
            while next_fn < len(functions) and functions[next_fn].body.start_byte <= m.start():
                open_bodies.append(functions[next_fn])
                next_fn += 1
            while open_bodies and open_bodies[-1].body.end_byte <= m.start():
                open_bodies.pop()
            owner = open_bodies[-1].id if open_bodies else None
            an.existing.append(
                TracePoint(decode(m.group(1)), decode(m.group(2)), path, line, m.start(), m.end(),
                           function=owner)
            )


def _kernel_cores(
    an_files: dict[Path, ParsedFile], declared: CoreDeclaration | None
) -> tuple[bool, frozenset[str]]:
    if declared is not None:
        return len(declared.cores) > 1, declared.cores
    markers = re.compile(rb"operator\s*\(\s*\)\s*<\s*(?:AscendC::)?AI[CV]|g_coreType|ASCEND_IS_AIC")
    for parsed in an_files.values():
        if markers.search(blank_comments(parsed.src.raw)):
            return True, frozenset({"AIC", "AIV"})
    return False, frozenset({"AIV"})


def declare_cores(layers: Layers, entry_path: Path, entry_src: bytes) -> CoreDeclaration | None:
    """What declares the kernel's core types (engine/core_config.py): the kernel, else
    its compiled metadata, else the OpDef's config. None: nothing does."""
    assert layers.entry is not None
    op_host = [hit.path for hit in layers.found.get("op_def", [])]
    return (from_kernel(entry_path, entry_src)
            or from_binary_metadata(layers.op_dir, (layers.op_name, layers.camel, layers.entry.name))
            or from_op_host(op_host))


def analyse_operator(op_dir: Path, repo_root: Path | None = None,
                     searches: Sequence[LayerSearch] = ()) -> Analysis:
    """Discover, parse and index one operator (its layers' files by `searches`, the
    registry's layers: none for the kernel alone). Raises InputError on unusable input."""
    op_dir = resolve_operator_dir(op_dir)
    root = (repo_root or default_repo_root(op_dir)).resolve()
    config = load_config(root, op_dir)
    layers = discover(op_dir, root, config, searches)
    assert layers.entry is not None and layers.kernel_dir is not None
    include_dirs = (*config.include_dirs, layers.kernel_dir, op_dir)
    # Headers are searched for across the repository only when it is one (a `.git` or
    # `optrace.toml` marks it, or the user named it): a guessed root may hold anything.
    marked = repo_root is not None or (root / ".git").exists() or (root / "optrace.toml").is_file()
    search = HeaderSearch(root, repo_index(layers.repo_root).sources) if marked else None
    # Only the repository and the include dirs the config names are read.
    includes = build_include_graph(layers.entry.path.resolve(), include_dirs, search,
                                   allowed=(root, *config.include_dirs))
    diagnostics = list(layers.diagnostics) + list(includes.diagnostics)
    if layers.entry.path.resolve() not in includes.files:
        bad = includes.diagnostics[0] if includes.diagnostics else Diagnostic(
            OT011, "cannot read the kernel entry", layers.entry.path, 0
        )
        raise InputError(bad)

    # Qualifier-like macros anywhere in the tree are blanked everywhere.
    blank = set(config.qualifiers)
    vector_scopes = {VECTOR_SCOPE}
    for src in includes.files.values():
        found = qualifier_macros(src.raw, config.qualifiers)
        blank |= found
        if found and VECTOR_SCOPE.encode() in src.raw:
            vector_scopes |= vector_scope_macros(src.raw, found)
    parser = new_parser()
    entry_file = layers.entry.path.resolve()
    parsed: dict[Path, ParsedFile] = {}
    index = CodeIndex()
    reusable: dict[tuple[Path, bytes, bytes], ParsedFile] = {}
    for path, src in includes.files.items():
        src.text = normalise(src.raw, blank)
        entry_line = layers.entry.line if path.resolve() == entry_file else 0
        key = (path, src.raw, src.text)
        pf = _recent_parse(key) if not entry_line else None
        if pf is not None:
            src = includes.files[path] = pf.src  # one SourceFile per parse: the same bytes
        else:
            pf = parse_file(parser, src)
        if not entry_line:
            reusable[key] = pf
        if pf.error_lines and entry_line and not _parse_score(pf, entry_line)[0]:
            # A conditional that splits a statement (`} else if` under `#if`, two heads for
            # one parameter list) leaves the entry unparsed: read the first arm of each
            # conditional instead, if the entry then parses (offsets are the same; the
            # other arms are not planned). Only for the entry: elsewhere a partial parse
            # loses less than the arms' variants would.
            as_written = src.text
            src.text = blank_conditionals(as_written)
            union = parse_file(parser, src)
            if _parse_score(union, entry_line) > _parse_score(pf, entry_line):
                diagnostics.append(Diagnostic(
                    OT022, "preprocessor conditionals split the entry's statements here: read "
                    "as the first arm of each conditional (the other arms are not planned)",
                    path, _split_at(union, entry_line) or pf.error_lines[0]))
                pf = union
            else:
                src.text = as_written
        parsed[path] = pf
        if pf.error_lines:
            diagnostics.append(
                Diagnostic(
                    OT020,
                    f"does not fully parse ({len(pf.error_lines)} region(s)); "
                    "analysis continues with what parsed",
                    path,
                    pf.error_lines[0],
                )
            )
        index.add_file(pf)
    for includer, line, target in includes.missing:
        diagnostics.append(
            Diagnostic(OT021, f"header not found: \"{target}\" (absent submodule?)", includer,
                       line)
        )

    entry_path = layers.entry.path.resolve()
    entry_fn = _find_entry_fn(index, entry_path, layers.entry.line, layers.entry.name)
    if entry_fn is None:
        raise InputError(unreadable_entry(layers.entry.name, entry_path, layers.entry.line,
                                          parsed.get(entry_path)))
    declaration = declare_cores(layers, entry_path, includes.files[entry_path].raw)
    mixed, cores = _kernel_cores(parsed, declaration)
    an = Analysis(layers, config, includes, parsed, index, nx.DiGraph(), entry_fn, mixed, cores,
                  declaration.cores if declaration is not None else frozenset(),
                  declaration, diagnostics=diagnostics, vector_scopes=frozenset(vector_scopes))
    _build_callgraph(an)
    _collect_existing(an)
    _RECENT_PARSES[:] = [reusable, *_RECENT_PARSES[:1]]
    return an


# The parses of this process's last two analyses, by (path, bytes, normalised bytes): apply
# proves its result by analysing the tree as it would be, where most files of the include
# closure are the bytes it has just parsed (apply edits the entry and the headers that get
# points). A tree-sitter tree is never changed once made, and a parse is a function of
# the bytes. The entry file is left out: its parse may be replaced by a reading of the
# first arm of each conditional, which changes its SourceFile's text.
_RECENT_PARSES: list[dict[tuple[Path, bytes, bytes], ParsedFile]] = []


def _recent_parse(key: tuple[Path, bytes, bytes]) -> ParsedFile | None:
    for recent in _RECENT_PARSES:
        pf = recent.get(key)
        if pf is not None:
            return pf
    return None


def _split_at(pf: ParsedFile, entry_line: int) -> int:
    """The line of the first conditional directive inside the entry (0: none there)."""
    start = pf.src.line_starts[entry_line - 1] if entry_line else len(pf.src.raw)
    m = re.compile(rb"^[ \t]*#[ \t]*(?:if|ifdef|ifndef|elif|else)\b", re.M).search(pf.src.raw, start)
    return pf.src.line_of(m.start()) if m else 0


def _parse_score(pf: ParsedFile, entry_line: int) -> tuple[bool, int]:
    """The kernel entry parsed as a function first (a split conditional hides the whole
    function, while an argument tree-sitter dislikes costs one error), then fewer error
    regions."""
    assert pf.nodes is not None
    has_entry = entry_line > 0 and any(
        pf.src.line_of(f.start_byte) <= entry_line <= pf.src.line_of(f.end_byte)
        and f.child_by_field_name("body") is not None
        # a head whose parameter list holds another head (`#else template <...> void f(`)
        # is not the entry read right
        and (decl := f.child_by_field_name("declarator")) is not None and not decl.has_error
        for f in pf.nodes.within(pf.tree.root_node, ("function_definition",)))
    return has_entry, -len(pf.error_lines)


@dataclass(frozen=True)
class Unfollowed:
    """A call the call graph could not follow: where, what was called, and why."""

    path: Path
    line: int
    call: str
    why: str


# Types whose methods are the AscendC / matmul library's, not the operator's: a call on
# one is an intrinsic, never a call the graph should have followed.
_LIBRARY_TYPES = re.compile(r"^(?:AscendC|matmul|Catlass|catlass|std|Act|Arch|Gemm|Epilogue)::|"
                            r"^(?:LocalTensor|GlobalTensor|TQue|TQueBind|TPipe|TBuf|TBufPool|Matmul\w*|"
                            r"MatmulImpl|TensorDesc|Shape|Layout\w*|DataCopy\w*Params|\w*Params|\w*Tiling\w*|"
                            r"GM_ADDR|half|float|bfloat16_t|u?int\d+_t|int|bool|auto)\b")
_STEP_DEPTH = 3  # the entry, the kernel class's steps, what they call


def unfollowed_calls(an: Analysis) -> list[Unfollowed]:
    """Calls from the entry and, three levels down, from what it reaches, that the graph
    could not follow, each with its reason: where a trace stops short without a word."""
    out: list[Unfollowed] = []
    seen: set[str] = set()
    reported: set[tuple[Path, int]] = set()
    level = [an.entry_fn]
    for _ in range(_STEP_DEPTH):
        nxt: list[FunctionDef] = []
        for fn in level:
            if fn.id in seen:
                continue
            seen.add(fn.id)
            for call in fn.nodes_in(fn.body, ("call_expression",)):
                site = an.call_site(fn, call)
                if site.callees:
                    nxt.extend(c for c in site.callees if c.id not in seen)
                    continue
                why = _why_unfollowed(an, fn, call, site.name)
                if why is not None:
                    where = (fn.src.path, fn.src.line_of(call.start_byte))
                    if where in reported:
                        continue
                    reported.add(where)
                    spelled = " ".join(text_of(fn.src, call).split())
                    spelled = spelled if len(spelled) <= 60 else spelled[:57] + "..."
                    out.append(Unfollowed(*where, spelled, why))
        level = nxt
    return out


def _why_unfollowed(an: Analysis, fn: FunctionDef, call: Node, name: str) -> str | None:
    """Why a call with no callee is one the graph should have followed, or None for a
    library intrinsic, a macro or a call of no type optrace knows."""
    func = call.child_by_field_name("function")
    if func is None or name in RUNTIME_NAMES:
        return None
    if func.type in ("parenthesized_expression", "pointer_expression"):
        # `(*fn)(x)` is a call through a pointer; `(GM_ADDR)(p)` is a C-style cast.
        if text_of(fn.src, func).strip("( ").startswith("*"):
            return "a call through a function pointer: its target is chosen at run time"
        return None
    if func.type == "identifier":
        tname = an.local_type(fn, name, call.start_byte)
        if tname is not None and ("(*" in tname or "function" in tname or tname.endswith("*")):
            return f"a call through the function pointer `{name}`: its target is chosen at run time"
        return None
    if func.type != "field_expression":
        return None
    arg = func.child_by_field_name("argument")
    if arg is None:
        return None
    recv = text_of(fn.src, arg).strip()
    head = re.split(r"->|\.|\[", recv.lstrip("*&("), maxsplit=1)[0].strip("() ")
    if not head or head == "this" or "_cast" in recv:
        return None
    tname = an.name_type(fn, head, call.start_byte)
    if tname is None or _LIBRARY_TYPES.search(tname.strip()):
        return None
    base = base_type_name(tname)
    info = an.index.classes.get(fn.scope)
    if info is not None and base in info.template_params:
        return (f"a dependent name: `{head}` has the type of the template parameter `{base}`, "
                "and no class in the files read derives from this one to bind it")
    classes = an.index.resolve_class(tname, fn.scope)
    if not classes:
        if not base or not base[:1].isupper() or base.isupper():
            return None  # a macro-made or builtin type: nothing to follow
        # The CANN headers are absent everywhere; name the operator's own first.
        missing = [t for _, _, t in an.includes.missing
                   if not t.startswith(("kernel_operator", "kernel_tiling", "lib/"))]
        absent = f" (absent headers: {', '.join(missing[:2])}{', ...' if len(missing) > 2 else ''})" \
            if missing else ""
        return f"the class `{base}` of `{head}` is not in the files read{absent}"
    unresolved = [b for c in classes for b in (an.index.classes[c].bases if c in an.index.classes else [])
                  if not an.index.resolve_class(base_type_name(b), c)]
    if unresolved:
        return (f"`{base}` has no method `{name}` in the files read; it may come from its base "
                f"`{unresolved[0]}`, which is not")
    return f"`{base}` has no method `{name}` in the files read"


def unreadable_entry(name: str, path: Path, line: int, pf: ParsedFile | None) -> Diagnostic:
    """OT010 for an entry discovery found but the parse holds no function for: the
    construct tree-sitter could not read, by its line and text (the first parse error at
    or after the entry's line, else the last before it)."""
    errors = pf.error_lines if pf is not None else []
    after = [n for n in errors if n >= line]
    at = after[0] if after else (errors[-1] if errors else 0)
    if pf is None or not at:
        return Diagnostic(OT010, f"kernel entry `{name}` is declared here but no function definition "
                          "of that name could be read from the file", path, line)
    start = pf.src.line_starts[at - 1]
    end = pf.src.raw.find(b"\n", start)
    line_bytes = pf.src.raw[start : end if end >= 0 else len(pf.src.raw)]
    text = " ".join(line_bytes.decode("utf-8", "replace").split())
    shown = text if len(text) <= 80 else text[:77] + "..."
    return Diagnostic(OT010, f"kernel entry `{name}` is not read as a function: the construct at line "
                      f"{at} does not parse (`{shown}`); rewrite it, or tell optrace the entry's shape "
                      "in an issue with that line", path, line)


def _find_entry_fn(index: CodeIndex, path: Path, line: int, name: str) -> FunctionDef | None:
    """The definition discovery saw: same file and name, nearest line."""
    cands = [fn for fn in index.by_name.get(name, ()) if fn.src.path == path and not fn.scope]
    return min(cands, key=lambda fn: abs(fn.line - line)) if cands else None


def _build_callgraph(an: Analysis) -> None:
    """Edges caller -> callee over every reachable function; marks phase work."""
    _extend_callgraph(an, [an.entry_fn])


def _extend_callgraph(an: Analysis, roots: list[FunctionDef]) -> None:
    """Walk the calls from `roots` into the graph (functions already in it are not walked
    again), then mark phase work and heavy functions over the whole graph."""
    g = an.callgraph
    hot = an.hot
    todo = list(roots)
    seen = an.walked
    while todo:
        fn = todo.pop()
        if fn.id in seen:
            continue
        seen.add(fn.id)
        g.add_node(fn.id, label=fn.display, file=str(fn.src.path), line=fn.line)
        # A hot name marks phase work only with real content: `SyncFunc` wrapping one
        # intra-core SetFlag/WaitFlag pair is pipeline plumbing, not a phase boundary.
        named_hot = any(w in _words(fn.name) for w in ("wait", "sync", "send", "recv", "receive",
                                                      "barrier"))
        if named_hot and _has_content(an, fn):
            hot.add(fn.id)
        for call in fn.nodes_in(fn.body, ("call_expression",)):
            site = an.call_site(fn, call)
            if (site.name in BLOCKING_PRIMITIVES or site.name in SET_PRIMITIVES) and not site.callees:
                hot.add(fn.id)  # a handshake: its function is on the pipeline's path
            for callee in site.callees:
                if callee.id == fn.id:
                    continue
                g.add_edge(fn.id, callee.id, line=fn.src.line_of(call.start_byte))
                an.call_counts[callee.id] = an.call_counts.get(callee.id, 0) + 1
                todo.append(callee)
        for loop in fn.nodes_in(fn.body, ("while_statement", "do_statement", "for_statement",)):
            if is_spin_loop(an, fn, loop):
                hot.add(fn.id)
    an.phase_work = _with_callers(g, hot)  # every caller of phase work holds phase work
    an.heavy = _with_callers(g, [fid for fid in g.nodes if an.is_heavy(an.index.functions[fid])])
    # Spin-wait answers above were given before phase work was known; ask again later.
    an._spin.clear()


def _with_callers(g: nx.DiGraph, seeds: Iterable[str]) -> set[str]:
    """The seeds and every function calling one of them, directly or not: one walk up
    the graph from all of them (a walk per seed went over the same callers again and
    again)."""
    out = set(seeds)
    todo = list(out)
    while todo:
        for caller in g.predecessors(todo.pop()):
            if caller not in out:
                out.add(caller)
                todo.append(caller)
    return out


def _has_content(an: Analysis, fn: FunctionDef) -> bool:
    stmts, loops = an.size_of(fn)
    return loops or stmts >= 4


def _words(name: str) -> list[str]:
    return kebab(name).split("-")


@functools.lru_cache(maxsize=8192)
def kebab(name: str) -> str:
    """`SendTokenCount` / `send_token_count` / `GMM1Finished` -> `send-token-count` ..."""
    name = name.strip("_")
    name = re.sub(r"^(m_|g_)", "", name)
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1-\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", s)
    s = re.sub(r"[^A-Za-z0-9]+", "-", s).strip("-").lower()
    return re.sub(r"-{2,}", "-", s)


_TRACE_ARGS = re.compile(TRACE_POINT_CALL.decode() + r"|OptraceEnd\s+\w+")
_SPIN_HINT = re.compile(r"flag|ready|status|state|signal|spin|wait|expect|arriv", re.I)


def is_spin_loop(an: Analysis, fn: FunctionDef, loop: Node) -> bool:
    """A busy-wait: no nested loop, no substantial call, polls a flag until it breaks out."""
    key = (fn.id, loop.start_byte, loop.end_byte)
    cached = an._spin.get(key)
    if cached is None:
        cached = an._spin[key] = _is_spin_loop(an, fn, loop)
    return cached


def _is_spin_loop(an: Analysis, fn: FunctionDef, loop: Node) -> bool:
    """A loop is a spin wait when its exit condition is re-loaded in its body from memory
    another core or rank writes, and the body moves no payload: no nested loop, no
    substantial call, no copy into global memory. A wait primitive, a flag read or a
    status copy and its reduction are what such a body holds (docs/rules.md "Loops")."""
    if loop.type not in ("while_statement", "do_statement", "for_statement"):
        return False
    body = loop.child_by_field_name("body")
    if body is None:
        return False
    if fn.nodes_in(body, ("for_statement", "while_statement", "do_statement", "for_range_loop")):
        return False
    if loop.type == "for_statement" and loop.child_by_field_name("initializer") is not None:
        return False  # a for loop that declares its counter counts, it does not poll
    cond = loop.child_by_field_name("condition")
    cond_text = text_of(fn.src, cond) if cond is not None else ""
    forever = cond is None or cond_text.strip("() ") in ("true", "1", "")
    breaks = fn.nodes_in(body, ("break_statement",))
    if forever and not breaks:
        return False
    statements = fn.nodes_in(body, ("expression_statement",))
    if len(statements) > _SPIN_MAX_STATEMENTS:
        return False
    # Trace-point labels (optrace's own insertions) are not evidence of anything.
    body_text = _TRACE_ARGS.sub("", text_of(fn.src, body))
    if forever:
        # `while (true) { ...; if (flag.GetValue(0) == 1) break; }`: the exit condition is
        # the test that breaks out.
        cond_text = " ".join(text_of(fn.src, c) for b in breaks
                             for c in [_enclosing_if_condition(b, body)] if c is not None)
    if not _reloads_condition(cond_text, body_text):
        return False
    for call in fn.nodes_in(body, ("call_expression",)):
        site = an.call_site(fn, call)
        if any(an.is_substantial(c) and not _waits_only(an, c) for c in site.callees if c.id != fn.id):
            return False
        if site.name in _COPY_PRIMITIVES and _writes_global(an, fn, call):
            return False  # moves payload out: a copy loop, not a wait
    waits = _WAIT_HINT.search(body_text) or _SPIN_HINT.search(cond_text + " " + body_text)
    return bool(waits or _MEMORY_READ.search(cond_text))


# A polling body is a handful of statements; a loop of fifty is doing work.
_SPIN_MAX_STATEMENTS = 40
# Copies whose destination may be global memory (`flagGm.SetValue(i, 1)`, a flag write,
# is not payload and not among them).
_COPY_PRIMITIVES = frozenset({"DataCopy", "DataCopyPad", "DataCopyExt", "Copy"})
# Wait primitives and their spellings in macros.
_WAIT_HINT = re.compile(r"SPIN_WAIT|\b(?:PipeBarrier|WaitFlag|CrossCoreWaitFlag|IBWait|WaitEvent|"
                        r"\w*[Ss]leep\w*|\w*[Dd]elay\w*|\w*[Ss]pin\w*)\b")
# Reads of memory another core or rank writes: a tensor element, a cache-bypassing or
# volatile load, an atomic.
_MEMORY_READ = re.compile(r"\bGetValue\s*\(|\bReadGm\w*|ByPass|\bvolatile\b|\batomic\w*|"
                          r"\bAtomic\w*|\bLoad\w*\s*\(|\bDataCacheCleanAndInvalid\b|\[[^\]]*\]")
_NAME = re.compile(r"[A-Za-z_]\w*")
_NOT_NAMES = frozenset({"true", "false", "static_cast", "reinterpret_cast", "const_cast", "float", "int",
                        "uint32_t", "int32_t", "int64_t", "uint64_t", "half", "sizeof", "nullptr"})


def _waits_only(an: Analysis, fn: FunctionDef) -> bool:
    """A wait helper (`SPIN_WAIT_CYCLES()`, `DelayCycles(n)`, `WaitFlagReady()`): named for
    waiting and moving no data itself — calling it is part of a poll, not work."""
    if not re.search(r"spin|wait|sleep|delay", fn.name, re.I):
        return False
    # A helper that writes anything, a flag too, does more than wait.
    writes = _COPY_PRIMITIVES | {"SetValue"}
    return not any(an.call_site(fn, c).name in writes for c in fn.nodes_in(fn.body, ("call_expression",)))


def _enclosing_if_condition(node: Node, limit: Node) -> Node | None:
    parent = node.parent
    while parent is not None and parent.id != limit.id:
        if parent.type == "if_statement":
            return parent.child_by_field_name("condition")
        parent = parent.parent
    return None


def _reloads_condition(cond_text: str, body_text: str) -> bool:
    """The exit condition is read anew each round from memory: it calls or reads memory
    itself (`flag.GetValue(0) == 0`), or one of its names is assigned in the body from
    such a read (`sumOfFlag = sumLocal.GetValue(0);`) — not counted (`i++`, `n += k`)."""
    names = {n for n in _NAME.findall(cond_text) if n not in _NOT_NAMES}
    for name in names:
        counted = (r"(?:\+\+|--)\s*" + re.escape(name) + r"\b|(?<![\w.>])" + re.escape(name)
                   + r"\s*(?:\+\+|--|[-+]=|=\s*" + re.escape(name) + r"\s*[-+])")
        if re.search(counted, body_text):
            return False  # a counter the loop advances: it counts rounds, it does not poll
    if _MEMORY_READ.search(cond_text) or re.search(r"\w\s*\(", _CASTS.sub("", cond_text)):
        return True
    for name in names:
        for m in re.finditer(r"(?<![\w.>])" + re.escape(name) + r"\s*=(?!=)\s*([^;]+);", body_text):
            value = m.group(1)
            if re.search(r"\w\s*\(|\[", value) and not re.fullmatch(
                    r"\s*" + re.escape(name) + r"\s*[-+*/]\s*\w+\s*", value):
                return True
    return False


_CASTS = re.compile(r"\b(?:static|reinterpret|const)_cast\s*<[^>]*>|\((?:float|int|uint32_t|int32_t)\)")


def _writes_global(an: Analysis, fn: FunctionDef, call: Node) -> bool:
    """A copy whose destination (its first argument) is global memory: a GlobalTensor or
    a GM pointer by type, else by the house naming (`yGm_`, `outGM`, `windowOut`)."""
    args = call.child_by_field_name("arguments")
    first = args.named_children[0] if args is not None and args.named_children else None
    if first is None:
        return False
    dest = text_of(fn.src, first)
    name = re.split(r"[\[.(]|->", dest.strip("*& "), maxsplit=1)[0].strip()
    tname = an.name_type(fn, name, call.start_byte)
    if tname is not None:
        return "Global" in tname or "__gm__" in tname
    return bool(re.search(r"gm|global|window", name, re.I))
