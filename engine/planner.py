"""Build the raw trace tree from an analysis, then let the rules reshape it.

The walk starts at the kernel entry with the core types the kernel runs on and follows
statements in order: core-type tests narrow the set (`g_coreType == AIV`, `ASCEND_IS_AIC`,
`operator()<AscendC::AIC>`), role tests annotate AIV roles, loops are classified
(phase / tile / spin-wait), and calls to substantial functions become regions whose
children come from walking the callee. Tile loops are not entered: nothing inside them
is ever traced.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import networkx as nx
from tree_sitter import Node

from optrace.engine.analysis import (
    BLOCKING_PRIMITIVES,
    HOT_WORDS,
    RUNTIME_NAMES,
    SET_PRIMITIVES,
    VF_LAUNCHERS,
    Analysis,
    is_spin_loop,
    kebab,
    split_arguments,
    vf_target,
)
from optrace.engine.codes import OT016
from optrace.engine.cpp import (
    CANDIDATE_SEP,
    LOOP_TYPES,
    FunctionDef,
    core_of_condition,
    declared_type,
    role_of_condition,
    text_of,
)
from optrace.engine.diagnostics import Diagnostic, InputError
from optrace.engine.model import Anchor, Kind, LoopInfo, Region
from optrace.engine.sharing import shared_kernel_files
from optrace.engine.source import blank_comments
from optrace.engine.vocabulary import FRAG_OPEN, LINE_MARK
from optrace.engine.words import (
    DEFAULT_VOCABULARY,
    FILLER_WORDS,
    Vocabulary,
    label_kebab,
    label_name,
    pure_wait,
)

# Loops (docs/rules.md "Loops"). A loop's class is decided from its trip count's source
# where it is visible (the bound's names, and the initialiser of a local bound), then from
# nesting (a loop with no substantial call inside is innermost work), then from its
# variable's name. Repetition over experts / groups / stages / ranks is a phase: points
# inside, with the index ...
PHASE_TRIP_WORDS = frozenset(
    {"group", "groups", "expert", "experts", "stage", "stages", "rank", "ranks", "layer", "layers",
     "round", "rounds", "phase", "epoch", "ep", "world", "server", "servers"}
)
# ... while a trip count that scales with the data (tokens, tokens x topK, rows, tiles,
# blocks of one core's share) makes a tile loop: one region around the whole loop at most,
# never a point inside (one record per token overflows the slot at prefill sizes).
DATA_TRIP_WORDS = frozenset(
    {"token", "tokens", "bs", "batch", "topk", "tile", "tiles", "row", "rows", "block", "blocks",
     "blk", "elem", "elems", "len", "length", "size", "hidden", "col", "cols", "chunk", "chunks",
     "loop", "loops", "repeat", "repeats", "seq", "mmad", "ub", "l0", "l1"}
)
# Loop variable names, the last evidence: phase words as above, tile words below.
TILE_LOOP_WORDS = frozenset(
    {"tile", "k", "loop", "block", "blk", "m", "n", "l0", "l1", "ub", "col", "i", "j", "elem",
     "repeat", "inner", "sub", "core", "mmad", "offset", "preload", "token", "row", "batch",
     "chunk", "topk", "bs"}
)
PHASE_LOOP_WORDS = PHASE_TRIP_WORDS | {"step"}
# Receivers too generic to name a phase (`op.Process()`): the class names it instead.
GENERIC_RECEIVERS = frozenset({"op", "kernel", "obj", "impl", "self", "inst", "instance", "handler",
                               "this", "tmp", "k", "p"})
# Names of setup work: initialisation, tiling and parameter reads.
SETUP_WORDS = frozenset({"init", "setup", "tiling", "params", "param", "prepare", "config", "configure"})
GENERIC_METHODS = frozenset(
    {"Process", "Run", "Compute", "Execute", "operator()", "Main", "Launch", "Exec", "Forward"}
)
# optrace's own calls in an instrumented tree (`MoeTracing(TRACE_POINT("x", "B"))`, the
# entry's scaffold): never the step a handshake is named after, so a tree plans as the
# original did.
_OWN_CALLS = RUNTIME_NAMES | {"TRACE_POINT", "OptraceEnd"}
# AscendC calls that neither move nor compute data: never what a handshake is named after.
_HOUSEKEEPING_RE = re.compile(r"(Set|Get|Pipe|Sync|Wait|Cross|Duplicate|Free|Alloc|EnQue|DeQue|Enque|Deque|"
                              r"Init|Reset|static_cast|reinterpret_cast|sizeof|dim3$)")
# Arithmetic on tile sizes a tile loop calls beside its work (`calRowNum = Min(remain,
# rowFactor)`): not what tells one loop from another (rms_norm's loop read `sub-min`).
_ARITHMETIC_HELPERS = frozenset({"Min", "Max", "min", "max", "Abs", "abs", "CeilDiv", "CeilAlign", "DivCeil",
                                 "CeilDivision", "AlignUp", "AlignDown", "Align", "RoundUp", "RoundDown",
                                 "FloorDiv", "FloorAlign", "Ceil", "Floor"})
_MACRO_CALL_RE = re.compile(r"\s*([A-Za-z_]\w*)\s*\(")  # a name the file #defines (any case)
_MACRO_BARE_RE = re.compile(r"\s*([A-Za-z_]\w*)\s*;?\s*$")
# In a macro's expansion: `Type<...> var(...);` / `Type<...> var;`, and `var.Process(...)`.
_MACRO_DECL_RE = re.compile(r"([A-Za-z_][\w:]*(?:\s*<[^;{}]*?>)?)\s+([A-Za-z_]\w*)\s*[({;=]")
_MACRO_ALIAS_RE = re.compile(r"\busing\s+([A-Za-z_]\w*)\s*=\s*([^;]+);")
_MACRO_WORK_RE = re.compile(r"\b([A-Za-z_]\w*)\s*(?:\.|->)\s*(\w*(?:Process|Run|Compute|Execute)\w*)\s*\(")
# Methods that run a kernel class's work (or set it up), traced at the call site when the
# class itself is not in the files read.
UNSEEN_WORK_METHODS = frozenset({"Init", "Process", "Run", "Compute", "Execute", "operator()"})
WORK_METHODS = UNSEEN_WORK_METHODS - {"Init"}  # the methods that do a class's work
# AscendC framework objects a kernel declares next to its own class.
ASCENDC_TYPES = frozenset({"TPipe", "TQue", "TQueBind", "TBuf", "GlobalTensor", "LocalTensor",
                           "TBufPool", "TSCM", "ListTensorDesc", "DataCopyParams", "Matmul"})
_STATEMENT_CONTAINERS = frozenset(
    {"compound_statement", "preproc_else", "preproc_elif", "preproc_elifdef",
     "labeled_statement", "case_statement", "try_statement", "catch_clause", "declaration_list"}
)
_PREPROC_ARMS = frozenset({"preproc_if", "preproc_ifdef"})
# The macro opening a block the compiler makes a vector function (AscendC's Regbase
# kernels: `__VEC_SCOPE__ { MicroAPI::... }`), or a macro the tree defines to it; the
# parse sees a plain block (the macro is blanked), the raw bytes before it name it.
_SCOPE_NAME_RE = re.compile(rb"\b([A-Za-z_]\w*)\s*$")


def _vector_scope(fn: FunctionDef, block: Node, names: frozenset[str]) -> bool:
    before = blank_comments(fn.src.raw[max(0, block.start_byte - 200):block.start_byte])
    m = _SCOPE_NAME_RE.search(before)
    return m is not None and m.group(1).decode("ascii") in names
# Conditions that choose the launch's variant: tiling keys, template modes, `if constexpr`.
_VARIANT_RE = re.compile(r"\bif\s+constexpr\b|TILING_KEY|[Tt]iling_?[Kk]ey|\bschMode\b|SCH_MODE")


def is_variant_dispatch(head: str) -> bool:
    """`if (TILING_KEY_IS(3))`, `if constexpr (...)`, `if (tilingKey == 7)`: one launch
    runs one arm, so its arms are variants (they may share labels)."""
    return _VARIANT_RE.search(head) is not None


def label_word(fn: FunctionDef, caller_scope: str = "", receiver: str | None = None,
               vocab: Vocabulary = DEFAULT_VOCABULARY) -> str:
    """The label word for a call to fn: its own name, or — for generic method names
    called on another class's object (`dispatch_.Process()`) — the object's name, or the
    class's when the object's says nothing (`op`). Whole: the naming rule (OT105)
    shortens a label only when it is over the limit."""
    source = label_source(fn, caller_scope, receiver)
    word = label_name(source, vocab)
    return f"{word}-init" if fn.name == "Init" and source != fn.name else word


def label_source(fn: FunctionDef, caller_scope: str = "", receiver: str | None = None) -> str:
    """The code name a call's label word is made from (before shortening)."""
    if fn.scope and fn.scope != caller_scope and (fn.name in GENERIC_METHODS or fn.name == "Init"):
        return receiver if receiver and kebab(receiver) not in GENERIC_RECEIVERS else fn.scope
    return fn.name


def receiver_of(fn: FunctionDef, call: Node) -> str | None:
    """`dispatch_` of `dispatch_.Process()` / `this->dispatch_.Process()`; None for plain calls."""
    func = call.child_by_field_name("function")
    field_call = func is not None and func.type == "field_expression"
    recv = func.child_by_field_name("argument") if func is not None and field_call else None
    if recv is None:
        return None
    text = text_of(fn.src, recv).strip()
    name = re.split(r"->|\.", text)[-1].strip("*&() ")
    return name if re.fullmatch(r"[A-Za-z_]\w*", name) else None


def flag_of(fn: FunctionDef, call: Node) -> str | None:
    """The flag / event id of a handshake call where it is a constant or a name
    (`CrossCoreSetFlag<0x2, PIPE_MTE3>(FLAG_DONE)` -> `FLAG_DONE`)."""
    args = call.child_by_field_name("arguments")
    if args is None:
        return None
    first = split_arguments(text_of(fn.src, args).strip()[1:-1])
    if not first:
        return None
    arg = first[0].strip()
    return arg if re.fullmatch(r"[A-Za-z_][\w:]*|0[xX][0-9a-fA-F]+|\d+", arg) else None


def _identifiers(text: str) -> list[str]:
    return re.findall(r"[A-Za-z_]\w*", text)


def hot_of(word: str) -> str | None:
    """The first hot word of a label word: `wait-quant-ready` waits, it does not quantise."""
    for part in word.split("-"):
        if part in HOT_WORDS:
            return {"receive": "recv", "barrier": "sync", "deq": "dequant"}.get(part, part)
    return None


def loop_var(fn: FunctionDef, loop: Node) -> str | None:
    if loop.type == "for_statement":
        init = loop.child_by_field_name("initializer")
        if init is not None:
            first = re.search(r"([A-Za-z_]\w*)\s*=", text_of(fn.src, init))
            if first:
                return first.group(1)
        upd = loop.child_by_field_name("update")
        if upd is not None:
            m = re.search(r"[A-Za-z_]\w*", text_of(fn.src, upd))
            if m:
                return m.group(0)
    if loop.type == "for_range_loop":
        decl = loop.child_by_field_name("declarator")
        if decl is not None:
            return text_of(fn.src, decl).strip("&* ")
    cond = loop.child_by_field_name("condition")
    if cond is not None:
        # The first name of the condition that says something: not a literal, nor the
        # object a member is reached through (`while (this->IterMatmulOut())` is the
        # member's loop, not one "over `this`").
        words = _CAST_RE.sub(" ", text_of(fn.src, cond))  # `static_cast<int64_t>(k)`: `k`
        for m in re.finditer(r"[A-Za-z_]\w*", words):
            if m.group(0) not in _CONDITION_NOISE:
                return m.group(0)
    return None


_CONDITION_NOISE = frozenset({"true", "false", "this", "nullptr", "NULL"})
_CAST_RE = re.compile(r"\b(?:static|reinterpret|const|dynamic)_cast\s*<[^<>]*(?:<[^<>]*>[^<>]*)*>")


_INTEGRAL_RE = re.compile(
    r"^(?:const\s+|constexpr\s+|register\s+)*(?:(?:unsigned|signed)\s+)?"
    r"(?:u?int(?:8|16|32|64)?(?:_t)?|size_t|ssize_t|ptrdiff_t|long(?:\s+long)?|short|char|"
    r"unsigned|signed)(?:\s+int)?$")


def loop_index(an: Analysis, fn: FunctionDef, loop: Node) -> str | None:
    """The index passed to the loop's points: an integral counter the loop declares
    (`for (uint32_t e = 0; ...)`, or `for (e = 0; ...)` of an integral local, parameter or
    member), never a value it polls; a loop that declares none gets no index."""
    if loop.type != "for_statement":
        return None
    init = loop.child_by_field_name("initializer")
    if init is None:
        return None
    text = text_of(fn.src, init).strip().rstrip(";")
    if init.type == "declaration":
        type_node = init.child_by_field_name("type")
        type_text = text_of(fn.src, type_node).strip() if type_node is not None else ""
        m = re.match(r"(?:[*&\s]*)([A-Za-z_]\w*)\s*(?:=\s*(.+?))?\s*(?:,|$)", text[len(type_text):].strip()
                     if text.startswith(type_text) else "")
        if m is None:
            return None
        if _INTEGRAL_RE.match(type_text.replace("AscendC::", "").replace("std::", "")):
            return m.group(1)
        # `auto e = 0`: integral when its initial value is an integer literal.
        if type_text == "auto" and m.group(2) and re.fullmatch(r"\d+[uUlL]*", m.group(2).strip()):
            return m.group(1)
        return None
    m = re.match(r"([A-Za-z_]\w*)\s*=(?!=)", text)
    if m is None:
        return None
    name = m.group(1)
    declared = an.name_type(fn, name, loop.start_byte)
    if declared is not None and _INTEGRAL_RE.match(declared.replace("AscendC::", "").replace("std::", "")):
        return name
    return None


def loop_bound(fn: FunctionDef, loop: Node, var: str | None) -> str | None:
    """The name a counted loop runs up to (`tIdx < this->tiling->timeStep` -> `timeStep`):
    the last name of its condition's right side, not the variable itself."""
    cond = loop.child_by_field_name("condition")
    if cond is None or not var:
        return None
    m = re.search(r"(?:<=?|!=)\s*(.+)$", _CAST_RE.sub(" ", text_of(fn.src, cond)).strip().rstrip(";"), re.S)
    if m is None:
        return None
    names = [n for n in re.findall(r"[A-Za-z_]\w*", m.group(1)) if n != var and n not in _CONDITION_NOISE]
    return names[-1] if names else None


def loop_words(fn: FunctionDef, loop: Node, var: str | None) -> list[str]:
    """A phase loop's words: its variable's, or where those say nothing (`tIdx`, `i`) the
    words of what it runs up to (`timeStep` -> `time-step`; gru's time loop read `loop`)."""
    words = var_words(var) if var else []
    if any(len(w) > 1 for w in words):
        return words
    bound = loop_bound(fn, loop, var)
    found = [w for w in var_words(bound) if len(w) > 1] if bound else []
    return found or words


def var_words(var: str) -> list[str]:
    words = label_kebab(var, glue=False).split("-")
    return [w for w in words if w not in ("idx", "id", "index", "cnt", "num", "cur", "i")] or words


# The value of an assignment whose `name =` was found: up to its `;`.
_ASSIGNED_VALUE_RE = re.compile(r"\s*([^;]+);")


def assignment_places(text: str) -> dict[str, list[int]]:
    """Per word, where each `word =` of ``text`` ends, in order (`==`'s first `=` too, as
    a search for `\\bname\\s*=` finds it): no two such places overlap, so a scan of them
    all finds, for any name, what a scan for that name alone finds.

    Found from each `=` backwards (blanks, then the word's characters: `\\s` and `\\w`
    as `re` reads them): the same places as `\\b(\\w+)\\s*=` searched forwards, which
    tried a match at every word of the body and was 15 times slower."""
    places: dict[str, list[int]] = {}
    find = text.find
    eq = find("=")
    while eq >= 0:
        end = eq
        while end and text[end - 1].isspace():
            end -= 1
        start = end
        while start and (text[start - 1].isalnum() or text[start - 1] == "_"):
            start -= 1
        if start < end:
            places.setdefault(text[start:end], []).append(eq + 1)
        eq = find("=", eq + 1)
    return places


def first_assignments(text: str, places: dict[str, list[int]], names: list[str]) -> dict[str, str]:
    """Each name's first `name = value;` in ``text`` (``places``: assignment_places(text))."""
    assigned: dict[str, str] = {}
    for name in names:
        for end in places.get(name, ()):
            value = _ASSIGNED_VALUE_RE.match(text, end)
            if value:
                assigned[name] = value.group(1)
                break
    return assigned


@dataclass
class Ctx:
    """Where the planner's walk is: the cores running this code, the role, enclosing loops and
    variant arms."""

    cores: frozenset[str]
    role: str | None = None
    loop_vars: tuple[str, ...] = ()
    stack: tuple[str, ...] = ()
    # The variant arms this code runs under: (dispatch, arm) for each enclosing tiling-key
    # / `if constexpr` / preprocessor branch; one launch runs one arm of each dispatch.
    variant: tuple[tuple[str, int], ...] = ()
    # The innermost condition within the current function (Region.branch).
    branch: str = ""


# Statements walked one inside another. A kernel nests a few dozen (UMDK's deepest MoE
# operator: see bench/corpus-results.md); 256 leaves room, and a file deeper than that is
# refused at its line rather than overflowing the interpreter's stack.
MAX_NESTING = 256
_FRAMES_PER_LEVEL = 6  # walk frames per level at most (walk_stmt, walk_if / loop, expand, ...)


# A loop the classifier calls a phase for what it holds alone (docs/rules.md "Loops").
_PHASE_BY_CONTENT = "holds phase work or a wait"


@dataclass
class Planner:
    """The walk from the kernel entry that builds the raw trace tree (rules then shape it)."""

    an: Analysis
    loops: list[LoopInfo] = field(default_factory=list)
    roles: dict[str, tuple[str, int]] = field(default_factory=dict)
    expanded: dict[tuple[str, frozenset[str]], Region] = field(default_factory=dict)
    _blocks: dict[tuple[str, int, int], bool] = field(default_factory=dict)
    _assigned: dict[str, tuple[str, dict[str, list[int]]]] = field(default_factory=dict)
    _inside: dict[Path, bool] = field(default_factory=dict)
    # function id -> (the tile loop's function, its line, its variable) for every function
    # a tile loop's body runs, directly or through its callees (None: not gathered yet)
    _per_tile: dict[str, tuple[FunctionDef, int, str | None]] | None = None
    vocab: Vocabulary = DEFAULT_VOCABULARY
    _consumed: set[tuple[str, int]] = field(default_factory=set)
    # (dispatch, arm) -> the condition that selects it, for the plan's variants list
    conditions: dict[tuple[str, int], str] = field(default_factory=dict)
    nesting: int = 0  # statements being walked, one inside the other (MAX_NESTING bounds it)
    deepest: int = 0  # the most that were (the corpus reports it against the bound)

    def __post_init__(self) -> None:
        cfg = self.an.config
        self.vocab = Vocabulary.of(cfg.phase_words, cfg.filler_words, cfg.short_words)

    # --- entry --------------------------------------------------------------------
    def build(self) -> Region:
        fn = self.an.entry_fn
        root = Region([], Kind.ROOT, self.an.kernel_cores, self._body_anchor(fn), "kernel entry",
                      function=fn.id)
        # The walk recurses once per nested statement (blocks, `#if` arms, loops, calls
        # followed): `MAX_NESTING` bounds it with a located error, and the interpreter's
        # limit is raised to hold that bound (3.11 keeps Python-to-Python calls off the C
        # stack, so the frames cost memory only).
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, MAX_NESTING * _FRAMES_PER_LEVEL + limit))
        try:
            self.walk_block(fn, fn.body, Ctx(self.an.kernel_cores, stack=(fn.id,)), root)
        finally:
            sys.setrecursionlimit(limit)
        for region in root.walk():
            if region.kind == Kind.CALL and region.hot in ("wait", "sync"):
                # A call to a wait function is that wait; the waits inside it are nested
                # handshakes (the budget drops those first).
                region.cost = "handshake"
            elif region.kind in (Kind.CALL, Kind.LOOP) and region.cost == "phase" and self.is_setup(region):
                region.cost = "setup"
        self._setup_holds_setup(root)
        return root

    def _setup_holds_setup(self, root: Region) -> None:
        """What a setup region runs is setup too (its waits stay handshakes): `Init` calling
        a `PrepareScalars` with a loop of strides below is one setup step, not a phase inside
        setup — else the budget, which drops leaves only and setup first, would have to drop
        that phase while its `Init` stays. A work method called from there (an `Init` that
        ends in `Process()`) is still the work, and so is all it runs."""
        stack = [(root, False)]
        while stack:
            region, in_setup = stack.pop()
            fn = self.an.index.functions.get(region.function or "")
            if fn is not None and fn.name in WORK_METHODS:
                in_setup = False
            if in_setup and region.cost == "phase" and region.kind in (Kind.CALL, Kind.LOOP):
                region.cost = "setup"
            below = in_setup or (region.cost == "setup" and region is not root)
            stack.extend((child, below) for child in region.children)

    def is_setup(self, region: Region) -> bool:
        """Setup (docs/rules.md "Cost classes"): an `Init` / tiling / parameter read, or a
        helper with no loop anywhere below it and no wait — scalar work, or a copy of a
        few counters outside any token / expert loop. Bulk data movement is a phase."""
        fn = self.an.index.functions.get(region.function or "")
        if fn is None or region.tile_loop or region.index_var:
            return False
        words = set(kebab(fn.name).split("-"))
        if fn.name == "Init":
            return True
        # A setup word in the name (`InitTiling`, `PrepareParams`) makes a leaf setup; a
        # region holding others is what runs them (`RunWithTiling`: Init and Process, the
        # whole kernel), classed by what it holds.
        if words & SETUP_WORDS and not region.children:
            return True
        # Inside a phase loop it runs per expert / group: the phase's work, not setup.
        if fn.id in self.an.phase_work or region.children or region.loop_vars:
            return False
        reach = [fn.id, *nx.descendants(self.an.callgraph, fn.id)] if fn.id in self.an.callgraph else [fn.id]
        return not any(self.an.size_of(self.an.index.functions[f])[1] for f in reach
                       if f in self.an.index.functions)

    def _body_anchor(self, fn: FunctionDef, body: Node | None = None) -> Anchor:
        node = body or fn.body
        return Anchor(fn.src.path, node.start_byte, node.end_byte, fn.src.line_of(node.start_byte),
                      fn.src.line_of(node.end_byte), inside=True)

    def _stmt_anchor(self, fn: FunctionDef, node: Node) -> Anchor:
        return Anchor(fn.src.path, node.start_byte, node.end_byte, fn.src.line_of(node.start_byte),
                      fn.src.line_of(node.end_byte), inside=False)

    def _new(self, parent: Region, words: list[str], kind: Kind, ctx: Ctx, anchor: Anchor,
             reason: str, **kw: object) -> Region:
        # A region that runs on fewer core types than its parent says which one.
        if self.an.mixed and ctx.cores != parent.cores and len(ctx.cores) == 1 and kind != Kind.BODY:
            words = [*words, next(iter(ctx.cores)).lower()]
        region = Region(words, kind, ctx.cores, anchor, reason, role=ctx.role,
                        loop_vars=ctx.loop_vars, variant=ctx.variant, branch=ctx.branch,
                        **kw)  # type: ignore[arg-type]
        parent.children.append(region)
        return region

    def inside(self, fn: FunctionDef) -> bool:
        """Defined in the operator's own files that no other operator compiles (only those get
        points)."""
        inside = self._inside.get(fn.src.path)
        if inside is None:
            # Not a file of the operator that another operator compiles (engine.sharing):
            # its points would be edits to their kernel.
            real = fn.src.path.resolve()
            inside = self._inside[fn.src.path] = (real.is_relative_to(self.an.layers.op_dir)
                                                  and real not in shared_kernel_files(self.an))
        return inside

    def expandable(self, fn: FunctionDef) -> bool:
        """`inside`, and not run by a tile loop's body: the loop is bracketed as a whole,
        and a point in a function it calls would record once per tile even where the
        function is called again after it (a tail step, `SubProcess(last, tail)` after
        `for (...) SubProcess(i, full)`). Such a function is traced at the call site."""
        return self.inside(fn) and fn.id not in self.per_tile()

    def per_tile(self) -> dict[str, tuple[FunctionDef, int, str | None]]:
        """Every function a tile loop of the operator's own code runs, with the first such
        loop that reaches it. Read from the code itself (each call site's callees, through
        any depth), not from the call graph, which the walk extends as it expands macros."""
        if self._per_tile is None:
            found: dict[str, tuple[FunctionDef, int, str | None]] = {}
            callees: dict[str, list[FunctionDef]] = {}

            def called_by(fn: FunctionDef) -> list[FunctionDef]:
                known = callees.get(fn.id)
                if known is None:
                    known = callees[fn.id] = [] if fn.body is None else [
                        c for call in fn.nodes_in(fn.body, ("call_expression",))
                        for c in self.an.call_site(fn, call).callees]
                return known

            for fn in list(self.an.index.functions.values()):
                if fn.body is None or not self.inside(fn):
                    continue
                # Loops in the order they open, with the ends of those around each: a loop
                # inside a tile loop is covered by it (its calls are the tile loop's), and
                # one nested past the walk's bound is never walked (a generated file can
                # nest thousands).
                around: list[int] = []
                covered_to = -1
                for loop in sorted(fn.nodes_in(fn.body, LOOP_TYPES), key=lambda n: n.start_byte):
                    while around and around[-1] <= loop.start_byte:
                        around.pop()
                    around.append(loop.end_byte)
                    if loop.start_byte < covered_to or len(around) > MAX_NESTING:
                        continue
                    if self.classify_loop(fn, loop) != "tile":
                        continue
                    covered_to = loop.end_byte
                    where = (fn, fn.src.line_of(loop.start_byte), loop_var(fn, loop))
                    todo = [c for call in fn.nodes_in(loop, ("call_expression",))
                            for c in self.an.call_site(fn, call).callees]
                    while todo:
                        run = todo.pop()
                        if run.id in found:
                            continue
                        found[run.id] = where
                        todo += called_by(run)
            self._per_tile = found
        return self._per_tile

    def _not_inside(self, fn: FunctionDef) -> str:
        """Why a function's body gets no points (`expandable` said no)."""
        loop = self.per_tile().get(fn.id) if self.inside(fn) else None
        if loop is not None:
            owner, line, var = loop
            over = f" over `{var}`" if var else ""
            return (f"{fn.display} also runs in the tile loop{over} of {owner.display} "
                    f"({owner.src.path.name}:{line}): traced at the call site (a point inside would "
                    "record once per tile)")
        others = shared_kernel_files(self.an).get(fn.src.path.resolve())
        if others:
            root = self.an.layers.repo_root
            other = others[0].relative_to(root) if others[0].is_relative_to(root) else others[0]
            more = f" and {len(others) - 1} more" if len(others) > 1 else ""
            return (f"{fn.display} is defined in {fn.src.path.name}, which another operator compiles too "
                    f"({other.as_posix()}{more}): traced at the call site")
        return (f"{fn.display} is defined outside the operator directory ({fn.src.path.name}): "
                "traced at the call site")

    # --- statements -----------------------------------------------------------------
    def walk_block(self, fn: FunctionDef, node: Node, ctx: Ctx, parent: Region) -> None:
        self.walk_seq(fn, node.named_children, ctx, parent)

    def walk_seq(self, fn: FunctionDef, stmts: list[Node], ctx: Ctx, parent: Region) -> None:
        """Statements in order (a block's, a `#if` arm's). A run of variant tests with no
        `else` is one dispatch when no two of its arms can run in one launch: each arm but
        the last returns (`if (TILING_KEY_IS(1)) { ...; return; } if (TILING_KEY_IS(2))
        ...`), or they test one expression against different constants. What follows a run
        whose every arm returns runs only when none matched: that run's last arm."""
        run: _Run | None = None
        for i, child in enumerate(stmts):
            test = self._open_variant_test(fn, child)
            if test is not None:
                cond, returns = test
                if run is not None and run.joins(cond):
                    self.walk_if(fn, child, ctx, parent, (run.chain_id, len(run.arms)), run.unimplied(cond))
                else:
                    run = _Run(f"{fn.src.path}:{child.start_byte}")
                    self.walk_if(fn, child, ctx, parent)
                run.arms.append((cond, returns))
                continue
            if run is not None and run.all_return() and child.type != "comment":
                # the rest of the block is the run's fall-through arm
                arm = (run.chain_id, len(run.arms))
                self.conditions[arm] = " && ".join(f"!({c})" for c, _ in run.arms)
                self.walk_seq(fn, stmts[i:], replace(ctx, variant=(*ctx.variant, arm)), parent)
                return
            if child.type != "comment":
                run = None
            self.walk_stmt(fn, child, ctx, parent)

    def _open_variant_test(self, fn: FunctionDef, node: Node) -> tuple[str, bool] | None:
        """(condition, whether its arm returns) of an `if` that is a variant test with no
        `else`; None for any other statement."""
        if node.type != "if_statement" or node.child_by_field_name("alternative") is not None:
            return None
        if not self._chains_on(fn, node):
            return None
        cond = node.child_by_field_name("condition")
        text = _unparen(" ".join(text_of(fn.src, cond).split())) if cond is not None else ""
        return text or "?", _ends_in_return(node.child_by_field_name("consequence"))

    def walk_stmt(self, fn: FunctionDef, node: Node, ctx: Ctx, parent: Region) -> None:
        if (str(fn.src.path), node.start_byte) in self._consumed:
            return  # already bracketed with the statement before it (a set + wait barrier)
        self.nesting += 1
        self.deepest = max(self.deepest, self.nesting)
        try:
            if self.nesting > MAX_NESTING:
                raise InputError(Diagnostic(
                    OT016, f"code nested deeper than {MAX_NESTING} levels (blocks, `#if` arms, loops "
                    "and the calls followed into them) from the kernel entry: optrace does not plan it",
                    fn.src.path, fn.src.line_of(node.start_byte)))
            self._walk_stmt(fn, node, ctx, parent)
        finally:
            self.nesting -= 1

    def _walk_stmt(self, fn: FunctionDef, node: Node, ctx: Ctx, parent: Region) -> None:
        t = node.type
        if t in _PREPROC_ARMS:
            self.walk_preproc(fn, node, ctx, parent)
        elif t == "compound_statement" and _vector_scope(fn, node, self.an.vector_scopes):
            # Compiled as a vector function: its statements are register operations and
            # its loops hardware loops, where a point (a barrier, a clock read, scalar
            # stores) is no instruction; measured by the region around it.
            note = "a `__VEC_SCOPE__` block runs as a vector function: no point inside it"
            if note not in parent.notes:
                parent.notes.append(note)
        elif t in _STATEMENT_CONTAINERS:
            self.walk_block(fn, node, ctx, parent)
        elif t == "if_statement":
            self.walk_if(fn, node, ctx, parent)
        elif t in LOOP_TYPES:
            self.walk_loop(fn, node, ctx, parent)
        elif t == "switch_statement":
            body = node.child_by_field_name("body")
            if body is not None:
                self.walk_block(fn, body, ctx, parent)
        elif t in ("expression_statement", "declaration", "ERROR") and self._macro_call(fn, node, ctx,
                                                                                       parent):
            pass
        elif t in ("expression_statement", "declaration", "return_statement"):
            self.walk_calls(fn, node, ctx, parent)

    def walk_if(self, fn: FunctionDef, node: Node, ctx: Ctx, parent: Region,
                chain: tuple[str, int] | None = None, prior: tuple[str, ...] = ()) -> None:
        """An `if`: a core-type or role test narrows the context; a variant dispatch (an
        `if constexpr` / tiling-key chain) makes each arm a variant, labelled by what
        selects it — its own condition after the negations of the arms before it."""
        cond = node.child_by_field_name("condition")
        cond_text = text_of(fn.src, cond) if cond is not None else ""
        core = core_of_condition(cond_text)
        role = role_of_condition(cond_text) if core is None else None
        then_ctx, else_ctx = ctx, ctx
        if core is not None:
            other = "AIV" if core == "AIC" else "AIC"
            then_ctx = replace(ctx, cores=ctx.cores & {core})
            else_ctx = replace(ctx, cores=ctx.cores & {other})
        elif role is not None:
            self.roles.setdefault(role, (str(fn.src.path), fn.src.line_of(node.start_byte)))
            then_ctx = replace(ctx, role=role)
            else_ctx = replace(ctx, role=f"!({role})")
        head_end = cond.end_byte if cond is not None else node.start_byte
        head = fn.src.text[node.start_byte:head_end].decode("utf-8", "replace")
        dispatch = core is None and role is None and is_variant_dispatch(head)
        if dispatch:
            chain_id, arm = chain or (f"{fn.src.path}:{node.start_byte}", 0)
            then_ctx = replace(ctx, variant=(*ctx.variant, (chain_id, arm)))
            inner_cond = cond_text.strip()
            inner_cond = inner_cond[1:-1].strip() if inner_cond.startswith("(") and inner_cond.endswith(")") \
                else inner_cond
            inner_cond = " ".join(inner_cond.split()) or "?"
            # a test of another constant of the same key is implied: not said again
            negated = tuple(f"!({c})" for c in prior if not _other_constant(c, inner_cond))
            self.conditions[(chain_id, arm)] = " && ".join((*negated, inner_cond))
            alt_node = node.child_by_field_name("alternative")
            if alt_node is not None and not any(self._chains_on(fn, c) for c in alt_node.named_children):
                # the last arm: none of the tests held, each said
                self.conditions[(chain_id, arm + 1)] = " && ".join(
                    (*(f"!({c})" for c in prior), f"!({inner_cond})"))
        cons = node.child_by_field_name("consequence")
        if core is None and role is None:
            # What tells a region under this `if` apart from a sibling doing the same thing.
            plain = _unparen(" ".join(cond_text.split())) or "?"
            then_ctx = replace(then_ctx, branch="return" if _ends_in_return(cons) else plain)
            else_ctx = replace(else_ctx, branch=f"!({plain})")
        if cons is not None and then_ctx.cores:
            self.walk_stmt(fn, cons, then_ctx, parent)
        alt = node.child_by_field_name("alternative")
        if alt is not None and else_ctx.cores:
            for c in alt.named_children:
                if dispatch and self._chains_on(fn, c):
                    self.walk_if(fn, c, else_ctx, parent, (chain_id, arm + 1), (*prior, inner_cond))
                elif dispatch:
                    self.walk_stmt(fn, c, replace(else_ctx, variant=(*ctx.variant, (chain_id, arm + 1))),
                                   parent)
                else:
                    self.walk_stmt(fn, c, else_ctx, parent)

    @staticmethod
    def _chains_on(fn: FunctionDef, node: Node) -> bool:
        """An `else if` that is itself a variant test (`else if constexpr (...)`): the chain
        goes on. A plain `else if (...)` ends it — the whole else is the variant's last arm."""
        if node.type != "if_statement":
            return False
        cond = node.child_by_field_name("condition")
        cond_text = text_of(fn.src, cond) if cond is not None else ""
        head = fn.src.text[node.start_byte:cond.end_byte if cond is not None else node.start_byte]
        return (core_of_condition(cond_text) is None and role_of_condition(cond_text) is None
                and is_variant_dispatch(head.decode("utf-8", "replace")))

    def walk_preproc(self, fn: FunctionDef, node: Node, ctx: Ctx, parent: Region,
                     chain: tuple[str, int] | None = None) -> None:
        """`#if` / `#ifdef` / `#elif` / `#else` arms: every arm planned, each a variant."""
        chain_id, arm = chain or (f"{fn.src.path}:{node.start_byte}", 0)
        alt = node.child_by_field_name("alternative")
        skip = {n.id for n in (node.child_by_field_name("condition"), node.child_by_field_name("name"))
                if n is not None}
        cond = node.child_by_field_name("condition") or node.child_by_field_name("name")
        head = text_of(fn.src, cond).strip() if cond is not None else ""
        ifdef = "#ifdef" if text_of(fn.src, node).lstrip().startswith("#ifdef") else "#ifndef"
        kind = {"preproc_ifdef": ifdef, "preproc_else": "#else"}.get(
            node.type, "#if" if node.type == "preproc_if" else "#elif")
        self.conditions[(chain_id, arm)] = " ".join(f"{kind} {head}".split())
        inner = replace(ctx, variant=(*ctx.variant, (chain_id, arm)),
                        branch=self.conditions[(chain_id, arm)] if kind in ("#if", "#ifdef", "#elif") else "")
        body = [c for c in node.named_children if c.id not in skip and (alt is None or c.id != alt.id)]
        self.walk_seq(fn, body, inner, parent)
        if alt is not None:
            self.walk_preproc(fn, alt, ctx, parent, (chain_id, arm + 1))

    def classify_loop(self, fn: FunctionDef, loop: Node) -> str:
        return self.classify_loop_why(fn, loop)[0]

    def classify_loop_why(self, fn: FunctionDef, loop: Node) -> tuple[str, str]:
        """(phase / tile / spin, what decided it). Trip count source first, then nesting,
        then the variable's name (docs/rules.md "Loops")."""
        if is_spin_loop(self.an, fn, loop):
            return "spin", ("re-loads its exit condition from memory others write; moves no "
                            "payload")
        var = loop_var(fn, loop)
        work = self._loop_has_work(fn, loop)
        blocking = self._loop_blocks(fn, loop)
        source = self._trip_words(fn, loop, var)
        data = source & DATA_TRIP_WORDS
        if data:
            return "tile", f"trip count scales with the data ({', '.join(sorted(data))})"
        phase = source & PHASE_TRIP_WORDS
        signals = any(self.an.call_site(fn, c).name in SET_PRIMITIVES
                      for c in fn.nodes_in(loop, ("call_expression",)))
        if phase and (work or blocking or signals):
            return "phase", f"trip count over {', '.join(sorted(phase))}"
        if not work and not blocking:
            return "tile", "innermost: no substantial call inside"
        words = set(kebab(var).split("-")) if var else set()
        if words & PHASE_LOOP_WORDS:
            return "phase", f"loop variable `{var}`"
        if words & TILE_LOOP_WORDS or "topk" in "".join(words):
            return "tile", f"loop variable `{var}`"
        return "phase", _PHASE_BY_CONTENT

    def _trip_words(self, fn: FunctionDef, loop: Node, var: str | None) -> set[str]:
        """Words of the names the trip count comes from: the bound in the condition (not
        the loop variable) and, for a local bound, the names in its initialiser."""
        if loop.type != "for_statement":
            return set()
        cond = loop.child_by_field_name("condition")
        if cond is None:
            return set()
        names = [n for n in _identifiers(text_of(fn.src, cond)) if n != var]
        seen = set(names)
        # Each name's first `name = value;` in the body: the body's `word =` places found
        # once per function (a scan of the body per loop was most of this).
        body_text, places = self._assignments(fn) if names else ("", {})
        assigned = first_assignments(body_text, places, names)
        for name in list(names):
            if name in assigned:
                extra = [n for n in _identifiers(assigned[name]) if n != var and n not in seen]
                names += extra
                seen.update(extra)
        words: set[str] = set()
        for name in names:
            parts = kebab(name).split("-")
            words.update(parts)
            words.add("".join(parts))  # `topK` -> topk
        return words

    def _assignments(self, fn: FunctionDef) -> tuple[str, dict[str, list[int]]]:
        """The body's text and, per word, where each `word =` in it ends (in order): what
        a scan for one name's `name =` finds, as no two such places overlap."""
        found = self._assigned.get(fn.id)
        if found is None:
            body_text = text_of(fn.src, fn.body)
            found = self._assigned[fn.id] = (body_text, assignment_places(body_text))
        return found

    def _loop_blocks(self, fn: FunctionDef, loop: Node) -> bool:
        key = (fn.id, loop.start_byte, loop.end_byte)
        cached = self._blocks.get(key)
        if cached is None:
            cached = self._blocks[key] = self._loop_blocks_uncached(fn, loop)
        return cached

    def _loop_blocks_uncached(self, fn: FunctionDef, loop: Node) -> bool:
        for call in fn.nodes_in(loop, ("call_expression",)):
            site = self.an.call_site(fn, call)
            if site.name in BLOCKING_PRIMITIVES and not site.callees:
                return True
            if any(c.id in self.an.phase_work for c in site.callees):
                return True
        return any(is_spin_loop(self.an, fn, n) for n in fn.nodes_in(loop, ("while_statement",
                                                                          "do_statement",)))

    def _loop_has_work(self, fn: FunctionDef, loop: Node) -> bool:
        key = (fn.id, loop.start_byte, -loop.end_byte)
        cached = self._blocks.get(key)
        if cached is None:
            cached = self._blocks[key] = self._loop_has_work_uncached(fn, loop)
        return cached

    def _loop_has_work_uncached(self, fn: FunctionDef, loop: Node) -> bool:
        if self._loop_blocks(fn, loop):
            return True
        for call in fn.nodes_in(loop, ("call_expression",)):
            site = self.an.call_site(fn, call)
            if any(self.an.is_substantial(c) for c in site.callees):
                return True
        return False

    def walk_loop(self, fn: FunctionDef, loop: Node, ctx: Ctx, parent: Region) -> None:
        kind, why = self.classify_loop_why(fn, loop)
        var = loop_var(fn, loop)
        if kind == "phase" and why == _PHASE_BY_CONTENT and ctx.loop_vars:
            # Per-iteration points inside another loop's iterations multiply: a loop that is
            # a phase only by what it holds (no phase word in its bound or variable) is not
            # a second level of them (deformable_conv2d's output-column and group loops
            # inside its slide loop: slides x columns x groups records).
            kind, why = "tile", (f"inside the phase loop over `{ctx.loop_vars[-1]}`, and no phase word "
                                 "in its bound or variable")
        line = fn.src.line_of(loop.start_byte)
        self.loops.append(LoopInfo(fn.src.path, line, var, kind, fn.display, loop.start_byte, loop.end_byte,
                                   why))
        if kind == "tile":
            self._tile_region(fn, loop, var, ctx, parent)
            return
        named_phase = bool(var and set(kebab(var).split("-")) & PHASE_LOOP_WORDS)
        if pure_wait(fn.name) and not named_phase:
            return  # inside a Wait* function the function itself is the wait region
        if kind == "spin":
            if pure_wait(fn.name):
                return  # the enclosing Wait* function is already the wait region
            word = "wait-" + "-".join(var_words(var)) if var else "wait"
            self._new(parent, [word], Kind.WAIT, ctx, self._stmt_anchor(fn, loop),
                      f"spin-wait loop in {fn.display}", hot="wait", cost="handshake")
            return
        body = loop.child_by_field_name("body")
        if body is None:
            return
        word = "-".join(loop_words(fn, loop, var)) if var else "loop"
        region = self._new(parent, [word], Kind.LOOP, ctx, self._body_anchor(fn, body),
                           f"phase loop over `{var}` in {fn.display} ({why})",
                           index_var=loop_index(self.an, fn, loop))
        inner = replace(ctx, loop_vars=(*ctx.loop_vars, var or "?"))
        if body.type == "compound_statement":
            self.walk_block(fn, body, inner, region)
        else:
            self.walk_stmt(fn, body, inner, region)
        self._collapse_loop(fn, body, region)
        self._drop_sole_tile_region(region)

    def _collapse_loop(self, fn: FunctionDef, body: Node, region: Region) -> None:
        """A phase loop whose body is one call: loop and call cover the same span, so they
        are one region — the call's name, the loop's per-iteration points and index."""
        if len(region.children) != 1 or len(_executable(body)) != 1:
            return
        child = region.children[0]
        if child.kind != Kind.CALL or child.shared_with is not None:
            return
        region.words = child.words
        region.function, region.hot, region.covers = child.function, child.hot, child.covers
        region.cost = child.cost
        region.children = child.children
        region.notes += [f"loop and call `{' '.join(child.words)}` cover the same span: one region",
                         *child.notes]

    @staticmethod
    def _drop_sole_tile_region(region: Region) -> None:
        """A tile loop bracketed as a sub-step is kept only beside other regions: alone it
        measures what its parent already does (one level too many)."""
        if len(region.children) == 1 and region.children[0].tile_loop and not region.children[0].notes:
            region.children = []

    def _tile_region(self, fn: FunctionDef, loop: Node, var: str | None, ctx: Ctx, parent: Region) -> None:
        """One region around a whole tile loop — when it holds a wait (bracketed at the
        loop's level, never per iteration) or work that is a sub-step of its phase."""
        blocking = self._loop_blocks(fn, loop)
        word, callee = self._loop_work_word(fn, loop, var)
        if word is None and not blocking:
            return
        stem = "-".join(var_words(var)) if var else "loop"
        # The last other function it calls tells it from a loop named after the same one.
        called = [self.an.call_site(fn, c) for c in fn.nodes_in(loop, ("call_expression",))]
        others = [c.name for c in called if c.callees and (callee is None or c.name != callee.name)
                  and c.name.rsplit("::", 1)[-1] not in _ARITHMETIC_HELPERS]
        region = self._new(parent, [word or stem], Kind.LOOP, ctx, self._stmt_anchor(fn, loop),
                           f"tile loop over `{var}` in {fn.display}, bracketed as a whole",
                           hot=hot_of(word or ""), tile_loop=True,
                           covers=callee.src.path if callee is not None else None,
                           between=(var or "", others[-1] if others else ""))
        if blocking:
            region.notes.append("waits inside this tile loop: bracketed at the loop's level, "
                                "no per-iteration region")

    def _loop_work_word(self, fn: FunctionDef, loop: Node,
                        var: str | None) -> tuple[str | None, FunctionDef | None]:
        """What a tile loop does: its first substantial callee that is not a wait, else
        `<var>-copy` for a loop of bulk copies; None when it does neither."""
        copies = False
        for call in fn.nodes_in(loop, ("call_expression",)):
            site = self.an.call_site(fn, call)
            for callee in site.callees:
                if not self.an.is_substantial(callee):
                    continue
                word = label_word(callee, fn.scope, receiver_of(fn, call), self.vocab)
                if hot_of(word) not in ("wait", "sync"):
                    return word, callee
            copies = copies or site.name == "DataCopy"
        worded: tuple[str, FunctionDef] | None = None
        if not copies:
            # The pipeline idiom, `CopyIn(i); Compute(i); CopyOut(i);`, each a few lines:
            # one level down, a callee that is not a copy names the work (`compute`), and
            # bulk copies make the loop a copy loop.
            for call in fn.nodes_in(loop, ("call_expression",)):
                for callee in self.an.call_site(fn, call).callees:
                    if callee.body is None:
                        continue
                    inner = {self.an.call_site(callee, c).name
                             for c in callee.nodes_in(callee.body, ("call_expression",))}
                    is_copy = "DataCopy" in inner and callee.name.lower().startswith("copy")
                    copies = copies or "DataCopy" in inner
                    if worded is None and not is_copy and self.an.size_of(callee)[0] > 0:
                        word = label_word(callee, fn.scope, receiver_of(fn, call), self.vocab)
                        if hot_of(word) not in ("wait", "sync"):
                            worded = (word, callee)
        if worded is not None:
            return worded
        if copies:
            stem = "-".join(var_words(var)) if var else ""
            return (f"{stem}-copy" if stem else "copy"), None
        return None, None

    def walk_calls(self, fn: FunctionDef, stmt: Node, ctx: Ctx, parent: Region) -> None:
        """One region per statement: the first substantial callee names it."""
        region: Region | None = None
        for call in fn.nodes_in(stmt, ("call_expression",)):
            site = self.an.call_site(fn, call)
            if not site.callees:
                if (site.name in BLOCKING_PRIMITIVES or site.name in SET_PRIMITIVES) and region is None:
                    self._blocking(fn, stmt, call, site.name, ctx, parent)
                elif region is None and site.name in VF_LAUNCHERS and (
                        target := vf_target(text_of(fn.src, call).encode())):
                    region = self._new(parent, [label_kebab(target)], Kind.CALL, ctx,
                                       self._stmt_anchor(fn, stmt),
                                       f"launch of the vector function `{target}`",
                                       full_word=label_kebab(target))
                    region.notes.append("a SIMT / vector function runs per thread: measured at its "
                                        "launch, no point inside it")
                elif region is None and (unseen := self._unseen_work(fn, call, site.name)):
                    spelled = text_of(fn.src, call).split("(")[0].strip()
                    region = self._new(parent, [label_kebab(unseen)], Kind.CALL, ctx,
                                       self._stmt_anchor(fn, stmt),
                                       f"call to `{spelled}` whose class is not in the files read "
                                       "(an absent header)", full_word=label_kebab(unseen))
                    region.notes.append("traced at the call site: its code was not found")
                continue
            callees = [c for c in site.callees if c.core is None or c.core in ctx.cores]
            # What the entry itself calls is the launch's work even when it is small (a
            # variant's `Process` handing one loop to a vector function): never nothing.
            at_entry = fn.id == self.an.entry_fn.id
            bodies = [c for c in callees if c.id not in ctx.stack
                      and (self.an.is_substantial(c) or (at_entry and self._entry_work(c)))]
            if not bodies:
                continue
            if region is None and len(bodies) == 1 and self._split_send_wait(bodies[0], ctx, parent):
                return
            if region is None:
                first = bodies[0]
                word = label_word(first, fn.scope, receiver_of(fn, call), self.vocab)
                # A function called from one place is traced inside its own body, so its
                # header carries the points; shared callees are traced at each call site.
                single = (len(bodies) == 1 and first.core is None
                          and self.an.call_counts.get(first.id, 0) == 1 and self.expandable(first))
                anchor = self._body_anchor(first) if single else self._stmt_anchor(fn, stmt)
                region = self._new(parent, [word], Kind.CALL, ctx, anchor,
                                   f"call to {first.display} ({_where(first)})",
                                   function=first.id, hot=hot_of(word), covers=first.src.path,
                                   full_word=label_kebab(label_source(first, fn.scope,
                                                                      receiver_of(fn, call))))
            outside = [c for c in bodies if not self.expandable(c)]
            if outside:
                # Code of another operator or a shared library: its own points would be
                # edits to files other operators compile, so its time is measured here;
                # the same for code a tile loop runs too.
                region.notes.append(self._not_inside(outside[0]))
            self.expand([c for c in bodies if self.expandable(c)], ctx, region)

    def _macro_call(self, fn: FunctionDef, stmt: Node, ctx: Ctx, parent: Region) -> bool:
        """`INVOKE_IMPL(KernelFoo, half);` expanding to `KernelFoo<half> op(...);
        op.Init(...); op.Process();`: the region sits at the macro's call (the macro's text
        is shared by every call, so no point goes inside it) and the class's own code is
        planned below it as if the expansion were written out. Read from the statement's
        text: with a type among its arguments (`IMPL(Kernel, float)`) tree-sitter does not
        see a call at all."""
        stmt_text = text_of(fn.src, stmt)
        macros = self.an.function_macros()
        m = _MACRO_CALL_RE.match(stmt_text)
        macro = macros.get(m.group(1)) if m else None
        if m is not None and macro is not None and not macro.object_like:
            name = m.group(1)
            depth, end = 0, len(stmt_text)
            for i in range(m.end() - 1, len(stmt_text)):
                depth += {"(": 1, ")": -1}.get(stmt_text[i], 0)
                if depth == 0:
                    end = i
                    break
            text = macro.expand(split_arguments(stmt_text[m.end():end]))
        else:
            # `INIT_AND_PROCESS;`: an object-like macro running `op.Process()` on an object
            # the function declared itself
            bare = _MACRO_BARE_RE.match(stmt_text)
            macro = macros.get(bare.group(1)) if bare else None
            if bare is None or macro is None or not macro.object_like:
                return False
            name, text = bare.group(1), macro.body
        aliases = {m.group(1): declared_type(m.group(2)) for m in _MACRO_ALIAS_RE.finditer(text)}
        types = {m.group(2): aliases.get(t, t) for m in _MACRO_DECL_RE.finditer(text)
                 for t in [declared_type(m.group(1))]}
        # `kernel(params)` on an object the expansion declares: its operator()
        calls = [(var, "operator()") for var in types
                 if re.search(r"(?<![\w.>])" + re.escape(var) + r"\s*\(", text)]
        bodies: list[FunctionDef] = []
        unseen: list[str] = []
        for var, method in [*((m.group(1), m.group(2)) for m in _MACRO_WORK_RE.finditer(text)), *calls]:
            tname = types.get(var) or self.an.local_type(fn, var, stmt.start_byte) or ""
            classes = self.an.index.resolve_class(tname, fn.scope)
            bodies += [c for c in self.an.index.methods(classes, method)
                       if c.id not in ctx.stack and (c.core is None or c.core in ctx.cores)]
            if not classes and tname and tname not in ASCENDC_TYPES and not tname.startswith("AscendC"):
                unseen.append(tname.split(CANDIDATE_SEP)[0])
        if not bodies and unseen:
            # The class the macro runs is in a header that is absent: its time is still
            # the launch's work, measured at the macro's call (as `_unseen_work` does).
            region = self._new(parent, [label_kebab(unseen[0])], Kind.CALL, ctx, self._stmt_anchor(fn, stmt),
                               f"`{name}(...)` runs `{unseen[0]}`, whose class is not in the files read "
                               "(an absent header)", full_word=label_kebab(unseen[0]))
            region.notes.append("traced at the macro's call: the class's code was not found")
            return True
        if not bodies:
            return False
        self.an.add_macro_calls(fn, bodies)
        first = bodies[0]
        region = self._new(parent, [label_word(first, fn.scope, None, self.vocab)], Kind.CALL, ctx,
                           self._stmt_anchor(fn, stmt), f"call to {first.display} through macro "
                           f"`{name}` ({_where(first)})", function=first.id, covers=first.src.path)
        region.notes.append(f"`{name}(...)` expanded with its definition: traced at the macro's call")
        inside = [c for c in bodies if self.expandable(c)]
        if len(inside) < len(bodies):
            region.notes.append(self._not_inside(next(c for c in bodies if not self.expandable(c))))
        self.expand(inside, ctx, region)
        return True

    def _entry_work(self, fn: FunctionDef) -> bool:
        stmts, has_loop = self.an.size_of(fn)
        if has_loop or stmts >= 2:
            return True
        # one call of a library kernel whose header is absent (`gemm(params);`) is work
        return any(self._unseen_work(fn, call, self.an.call_site(fn, call).name)
                   for call in fn.nodes_in(fn.body, ("call_expression",)))

    def _unseen_work(self, fn: FunctionDef, call: Node, name: str) -> str:
        """`op.Process()` / `op.Init(...)` on a local object whose class is nowhere in the
        files read (a kernel library's header is absent), or `kernel(params)` running such
        an object's `operator()`: the launch's work happens there, so the call is measured
        where it is made. Objects of AscendC's own types (`TPipe pipe; pipe.Init()`) are
        not work of the operator. The word to label it with, or "" when it is no such call."""
        func = call.child_by_field_name("function")
        if func is None:
            return ""
        recv: Node | None
        if func.type == "identifier":
            # a local object called: its class's `operator()`, named by the class
            word, recv = "", func
        elif name in UNSEEN_WORK_METHODS and func.type == "field_expression":
            word, recv = name, func.child_by_field_name("argument")
        else:
            return ""
        if recv is None or recv.type != "identifier":
            return ""
        tname = self.an.local_type(fn, text_of(fn.src, recv), call.start_byte)
        if (tname is None or tname in ASCENDC_TYPES or tname.startswith("AscendC")
                or tname in ("auto", "decltype") or self.an.index.resolve_class(tname, fn.scope)):
            return ""
        cls = tname.split("<")[0].split("::")[-1]
        if word and label_kebab(word) in self.vocab.fillers:
            # `sch.Process(...)` says only that work runs; the class says which (an
            # elementwise kernel's whole launch is `BroadcastSch<...> sch; sch.Process()`).
            return cls or word
        return word or cls

    def _blocking(self, fn: FunctionDef, stmt: Node, call: Node, name: str, ctx: Ctx,
                  parent: Region) -> None:
        """A handshake primitive: named by its role here (`wait`, `notify`, `barrier`);
        the handshake rule (OT109) adds the partner its flag id matches."""
        if name in SET_PRIMITIVES:
            kind, word, hot = Kind.SYNC, "notify", "notify"
        elif "Wait" in name:
            kind, word, hot = Kind.WAIT, "wait", "wait"
        else:
            kind, word, hot = Kind.SYNC, "barrier", "sync"
        flag = flag_of(fn, call) if kind == Kind.WAIT or name in SET_PRIMITIVES else None
        anchor = self._stmt_anchor(fn, stmt)
        after = stmt.next_named_sibling
        pair = name in SET_PRIMITIVES and flag is not None and after is not None
        if pair and after is not None and flag is not None and self._waits_on(fn, after, flag):
            # `CrossCoreSetFlag(id); CrossCoreWaitFlag(id);`: every core of the group sets,
            # then waits for all — a barrier, one region over both statements.
            self._consumed.add((str(fn.src.path), after.start_byte))
            anchor = Anchor(fn.src.path, stmt.start_byte, after.end_byte, anchor.line,
                            fn.src.line_of(after.end_byte), inside=False)
            kind, word, hot, flag = Kind.SYNC, "barrier", "sync", None
        args = call.child_by_field_name("arguments")
        written = " ".join(text_of(fn.src, args).split())[1:-1] if args is not None and flag is None else ""
        region = self._new(parent, [word], kind, ctx, anchor,
                           f"{name} in {fn.display}", hot=hot, cost="handshake", flag=flag,
                           full_word=label_kebab(name), signal=_flag_family(written),
                           between=(self._next_call(fn, stmt, -1), self._next_call(fn, stmt, 1)))
        if flag is None and kind == Kind.WAIT:
            m = re.match(r"[A-Za-z_]\w*", text_of(fn.src, call.child_by_field_name("arguments") or call)
                         .strip("() "))
            if m:
                region.notes.append(f"flag `{m.group(0)}` is not a constant: partner unknown")

    def _next_call(self, fn: FunctionDef, stmt: Node, step: int) -> str:
        """The function called nearest before (-1) or after (1) a statement in its block —
        the step a handshake ends or starts, when that step has no region: an operator
        function of real size, or a call that moves or computes data (not a flag, queue or
        buffer chore)."""
        node = stmt.prev_named_sibling if step < 0 else stmt.next_named_sibling
        while node is not None or _own_block(fn.src.text, stmt.parent):
            if node is None:
                # The end of a block optrace put around a region (a barrier not in a
                # block of its own): on an instrumented tree the walk goes on beside the
                # braces, as it went on the original beside the statement.
                assert stmt.parent is not None
                stmt = stmt.parent
                node = stmt.prev_named_sibling if step < 0 else stmt.next_named_sibling
                continue
            if (node.text or b"").lstrip().startswith((b"MoeTracing", b"OptraceEnd")):
                # optrace's own points: an instrumented tree names its steps as the original
                node = node.prev_named_sibling if step < 0 else node.next_named_sibling
                continue
            calls = fn.nodes_in(node, ("call_expression",))
            for call in (reversed(calls) if step < 0 else calls):
                site = self.an.call_site(fn, call)
                if site.name in _OWN_CALLS:
                    continue  # optrace's points inside a block before it (a traced `if`)
                if site.name in VF_LAUNCHERS:  # a vector function's launch: the function it runs
                    target = vf_target(text_of(fn.src, call).encode())
                    if target:
                        return target
                if any(self.an.is_substantial(c) for c in site.callees) or (
                        site.name and not _HOUSEKEEPING_RE.match(site.name)):
                    return site.name
            node = node.prev_named_sibling if step < 0 else node.next_named_sibling
        return ""

    def _waits_on(self, fn: FunctionDef, stmt: Node, flag: str) -> bool:
        calls = fn.nodes_in(stmt, ("call_expression",)) if stmt.type == "expression_statement" else []
        return len(calls) == 1 and "Wait" in self.an.call_site(fn, calls[0]).name \
            and self.an.call_site(fn, calls[0]).name in BLOCKING_PRIMITIVES and flag_of(fn, calls[0]) == flag

    def _split_send_wait(self, callee: FunctionDef, ctx: Ctx, parent: Region) -> bool:
        """A function named for sending and waiting (`SendCountsAndWait`) whose body sends
        and then blocks: two regions in its body, `send-...` around the work before the
        wait and `wait-...` around the wait — never one region labelled as a wait."""
        words = label_kebab(callee.name).split("-")
        if "wait" not in words or not self.expandable(callee) or self.an.call_counts.get(callee.id, 0) != 1:
            return False
        rest = [w for w in words if w not in ("wait", "and", "for", "then") and w not in FILLER_WORDS]
        if not rest or any(n.type == "return_statement" for n in _descendants(callee.body)):
            # A `return` could leave a run of statements between its B and E lines: the
            # function is then one region (named by what it sends), its wait a child.
            return False
        stmts = _executable(callee.body)
        first_wait = next((i for i, st in enumerate(stmts) if self._blocks_stmt(callee, st)), None)
        if not first_wait:  # None (no wait) or 0 (nothing sent before it)
            return False
        last_wait = max(i for i, st in enumerate(stmts) if self._blocks_stmt(callee, st))
        send = stmts[:first_wait]
        waits = stmts[first_wait:last_wait + 1]
        src = callee.src
        send_anchor = Anchor(src.path, send[0].start_byte, send[-1].end_byte, src.line_of(send[0].start_byte),
                             src.line_of(send[-1].end_byte), inside=False)
        wait_anchor = Anchor(src.path, waits[0].start_byte, waits[-1].end_byte,
                             src.line_of(waits[0].start_byte), src.line_of(waits[-1].end_byte), inside=False)
        action = {"send", "set", "notify", "put", "write", "dispatch", "publish"}
        what = [w for w in rest if w not in action] or rest
        send_word = label_name("-".join(rest), self.vocab)
        wait_word = "wait-" + label_name("-".join(what), self.vocab)
        why = f"{callee.display} ({_where(callee)}) sends, then waits: split in two"
        self._new(parent, [send_word], Kind.CALL, ctx, send_anchor, why, function=callee.id,
                  hot=hot_of(send_word), covers=src.path)
        self._new(parent, [wait_word], Kind.WAIT, ctx, wait_anchor, why, hot="wait", cost="handshake")
        return True

    def _blocks_stmt(self, fn: FunctionDef, stmt: Node) -> bool:
        if stmt.type in LOOP_TYPES:
            return is_spin_loop(self.an, fn, stmt) or self._loop_blocks(fn, stmt)
        for call in fn.nodes_in(stmt, ("call_expression",)):
            site = self.an.call_site(fn, call)
            if site.name in BLOCKING_PRIMITIVES and not site.callees:
                return True
        return False

    def expand(self, callees: list[FunctionDef], ctx: Ctx, region: Region) -> None:
        specialised = [c for c in callees if c.core is not None]
        plain = [c for c in callees if c.core is None]
        if len(plain) > 1:
            # One call, several bodies it may reach (a class chosen by `std::conditional`,
            # `decltype`, an alias of several candidates, same-name functions): a launch
            # runs one of them, so each is planned as a variant of this call.
            where = region.anchor
            chain = f"call:{where.path}:{where.start}" if where is not None else f"call:{region.label}"
            for arm, callee in enumerate(plain):
                self._expand_one(callee, replace(ctx, variant=(*ctx.variant, (chain, arm))), region)
        else:
            for callee in plain:
                self._expand_one(callee, ctx, region)
        for callee in specialised:
            assert callee.core is not None
            sub = replace(ctx, cores=ctx.cores & {callee.core})
            if not sub.cores:
                continue
            if self.an.mixed and len(ctx.cores) > 1:
                body = self._new(region, [callee.core.lower()], Kind.BODY, sub,
                                 self._body_anchor(callee),
                                 f"{callee.display} runs on {callee.core} ({_where(callee)})",
                                 function=callee.id)
                self._expand_one(callee, sub, body)
            else:
                self._expand_one(callee, sub, region)

    def _expand_one(self, callee: FunctionDef, ctx: Ctx, region: Region) -> None:
        # One body, one set of points: a callee reached again (another call site, another
        # core-type context) is planned under its first caller, or its inner points would
        # be inserted twice into the same code.
        key: tuple[str, frozenset[str]] = (callee.id, frozenset())
        first = self.expanded.get(key)
        if first is not None and first is not region:
            if ctx.variant != first.variant:
                first.also_variants.append(ctx.variant)
            region.shared_with = first.label or first.words[-1]
            region.notes.append(f"{callee.display} is planned under its first caller")
            return
        self.expanded[key] = region
        inner = replace(ctx, stack=(*ctx.stack, callee.id), branch="")
        before = len(region.children)
        self.walk_block(callee, callee.body, inner, region)
        self._drop_sole_tile_region(region)
        added = region.children[before:]
        if len(added) == 1 and before == 0 and len(_executable(callee.body)) == 1 and not added[0].index_var:
            # The callee's one statement is this region: B right after the parent's B, E
            # right before its E (the same-span rule, OT110, collapses such levels).
            added[0].same_span = True


def _executable(body: Node) -> list[Node]:
    """A body's statements that run code: not comments, not declarations without a call."""
    out = []
    for child in body.named_children:
        if child.type == "comment":
            continue
        # optrace's own points (an instrumented tree plans like the original one)
        text = (child.text or b"").lstrip()
        if text.startswith((b"MoeTracing", b"OptraceEnd")):
            continue
        if child.type == "declaration" and not any(
                n.type == "call_expression" for n in _descendants(child)):
            continue
        out.append(child)
    return out


def _flag_family(written: str) -> str:
    """A non-constant flag argument without its counter (`ctx.V2CEvent + 1` and
    `ctx.V2CEvent` -> `ctx.V2CEvent`, `flags[2]` -> `flags[]`): flags of one family."""
    text = re.sub(r"\[\s*\d+\s*\]", "[]", written)
    return re.sub(r"\s*[-+]\s*\d+\s*$", "", text).strip()


def _unparen(text: str) -> str:
    """`(a && b)` -> `a && b`; `(a) && (b)` stays."""
    while text.startswith("(") and text.endswith(")"):
        depth = 0
        for i, ch in enumerate(text):
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if depth == 0 and i < len(text) - 1:
                return text
        text = text[1:-1].strip()
    return text


_KEY_IS = re.compile(r"^TILING_KEY_IS\s*\(\s*(\w+)\s*\)$")
# `<expression> == <constant>`: a number, an ALL_CAPS name or an enumerator (`Mode::A`)
_EQ_CONSTANT = re.compile(r"^([^=&|!<>?]+?)\s*==\s*(\d+[uUlL]*|[A-Z][A-Z0-9_]*|(?:\w+::)+\w+)$")


def _key_constant(condition: str) -> tuple[str, str] | None:
    """(key, constant) of a test of one key against one constant (`TILING_KEY_IS(3)`,
    `tilingKey == 7`, `sizeof(T) == SIZE_32`); None for any other condition."""
    text = " ".join(_unparen(condition.strip()).split())
    m = _KEY_IS.match(text)
    if m is not None:
        return "TILING_KEY_IS", m.group(1)
    m = _EQ_CONSTANT.match(text)
    return (m.group(1).strip(), m.group(2)) if m is not None else None


def _other_constant(a: str, b: str) -> bool:
    """Two tests of one expression against different constants: never both true (constants
    told apart by their spelling: two names for one value would be read as two)."""
    ka, kb = _key_constant(a), _key_constant(b)
    return ka is not None and kb is not None and ka[0] == kb[0] and ka[1] != kb[1]


@dataclass
class _Run:
    """A run of variant `if`s with no `else` in one block (Planner.walk_seq)."""

    chain_id: str
    arms: list[tuple[str, bool]] = field(default_factory=list)  # (condition, returns)

    def joins(self, cond: str) -> bool:
        """A test no earlier arm can run beside: each earlier one returns or tests another
        constant of the same key."""
        return all(returns or _other_constant(c, cond) for c, returns in self.arms)

    def unimplied(self, cond: str) -> tuple[str, ...]:
        """The earlier arms' conditions, less those `cond` already rules out."""
        return tuple(c for c, _ in self.arms if not _other_constant(c, cond))

    def all_return(self) -> bool:
        return bool(self.arms) and all(returns for _, returns in self.arms)


def _ends_in_return(arm: Node | None) -> bool:
    """An `if` arm whose last statement returns (an early exit)."""
    if arm is None:
        return False
    if arm.type == "return_statement":
        return True
    stmts = [c for c in arm.named_children if c.type != "comment"] if arm.type == "compound_statement" else []
    return bool(stmts) and stmts[-1].type == "return_statement"


def _own_block(text: bytes, node: Node | None) -> bool:
    """Braces optrace put around a region (codemods/kernel_points.py): `{` ending its line
    with optrace's line mark, or inside optrace's fragment markers."""
    if node is None or node.type != "compound_statement":
        return False
    start = node.start_byte
    end = text.find(b"\n", start)
    line = text[start:end if end >= 0 else len(text)]
    return line.rstrip(b"\r") == b"{" + LINE_MARK or text.endswith(FRAG_OPEN, 0, start)


def _descendants(node: Node) -> list[Node]:
    out, stack = [], list(node.children)
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(n.children)
    return out


def _where(fn: FunctionDef) -> str:
    return f"{fn.src.path.name}:{fn.line}"
