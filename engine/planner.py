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
from dataclasses import dataclass, field, replace
from pathlib import Path

from tree_sitter import Node

from optrace.engine.analysis import (
    BLOCKING_PRIMITIVES,
    HOT_WORDS,
    VF_LAUNCHERS,
    Analysis,
    is_spin_loop,
    kebab,
    split_arguments,
    vf_target,
)
from optrace.engine.cpp import (
    CANDIDATE_SEP,
    LOOP_TYPES,
    FunctionDef,
    core_of_condition,
    declared_type,
    role_of_condition,
    text_of,
)
from optrace.engine.model import Anchor, Kind, LoopInfo, Region

# Loop variables that name phase-level repetition (points with the index) ...
PHASE_LOOP_WORDS = frozenset(
    {"group", "expert", "stage", "rank", "token", "batch", "round", "layer", "phase", "epoch",
     "step", "chunk", "row", "ep", "local", "shared", "dst", "src"}
)
# ... and tile-level repetition (never points inside).
TILE_LOOP_WORDS = frozenset(
    {"tile", "k", "loop", "block", "blk", "m", "n", "l0", "l1", "ub", "col", "i", "j", "elem",
     "repeat", "inner", "sub", "core", "mmad", "offset", "preload"}
)
GENERIC_METHODS = frozenset(
    {"Process", "Run", "Compute", "Execute", "operator()", "Main", "Launch", "Exec", "Forward"}
)
_MACRO_CALL_RE = re.compile(r"\s*([A-Z_][A-Z0-9_]*)\s*\(")
_MACRO_BARE_RE = re.compile(r"\s*([A-Z_][A-Z0-9_]*)\s*;?\s*$")
# In a macro's expansion: `Type<...> var(...);` / `Type<...> var;`, and `var.Process(...)`.
_MACRO_DECL_RE = re.compile(r"([A-Za-z_][\w:]*(?:\s*<[^;{}]*?>)?)\s+([A-Za-z_]\w*)\s*[({;=]")
_MACRO_ALIAS_RE = re.compile(r"\busing\s+([A-Za-z_]\w*)\s*=\s*([^;]+);")
_MACRO_WORK_RE = re.compile(r"\b([A-Za-z_]\w*)\s*(?:\.|->)\s*(Process|Run|Compute|Execute)\s*\(")
# Methods that run a kernel class's work (or set it up), traced at the call site when the
# class itself is not in the files read.
UNSEEN_WORK_METHODS = frozenset({"Init", "Process", "Run", "Compute", "Execute", "operator()"})
# AscendC framework objects a kernel declares next to its own class.
ASCENDC_TYPES = frozenset({"TPipe", "TQue", "TQueBind", "TBuf", "GlobalTensor", "LocalTensor",
                           "TBufPool", "TSCM", "ListTensorDesc", "DataCopyParams", "Matmul"})
_STATEMENT_CONTAINERS = frozenset(
    {"compound_statement", "preproc_else", "preproc_elif", "preproc_elifdef",
     "labeled_statement", "case_statement", "try_statement", "catch_clause", "declaration_list"}
)
_PREPROC_ARMS = frozenset({"preproc_if", "preproc_ifdef"})
# Conditions that choose the launch's variant: tiling keys, template modes, `if constexpr`.
_VARIANT_RE = re.compile(r"\bif\s+constexpr\b|TILING_KEY|[Tt]iling_?[Kk]ey|\bschMode\b|SCH_MODE")


def is_variant_dispatch(head: str) -> bool:
    """`if (TILING_KEY_IS(3))`, `if constexpr (...)`, `if (tilingKey == 7)`: one launch
    runs one arm, so its arms are variants (they may share labels)."""
    return _VARIANT_RE.search(head) is not None


def label_word(fn: FunctionDef, caller_scope: str = "") -> str:
    """The label word for a call to fn: its own name, or — for generic method names
    called on another class's object (`dispatcher.Process()`) — that class's name."""
    if fn.scope and fn.scope != caller_scope:
        if fn.name in GENERIC_METHODS:
            return kebab(fn.scope)
        if fn.name == "Init":
            return kebab(fn.scope) + "-init"
    return kebab(fn.name)


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
        m = re.search(r"[A-Za-z_]\w*", text_of(fn.src, cond))
        if m and m.group(0) not in ("true", "false"):
            return m.group(0)
    return None


def var_words(var: str) -> list[str]:
    words = kebab(var).split("-")
    return [w for w in words if w not in ("idx", "id", "index", "cnt", "num", "cur", "i")] or words


@dataclass
class Ctx:
    cores: frozenset[str]
    role: str | None = None
    loop_vars: tuple[str, ...] = ()
    stack: tuple[str, ...] = ()
    # The variant arms this code runs under: (dispatch, arm) for each enclosing tiling-key
    # / `if constexpr` / preprocessor branch; one launch runs one arm of each dispatch.
    variant: tuple[tuple[str, int], ...] = ()


@dataclass
class Planner:
    an: Analysis
    loops: list[LoopInfo] = field(default_factory=list)
    roles: dict[str, tuple[str, int]] = field(default_factory=dict)
    expanded: dict[tuple[str, frozenset[str]], Region] = field(default_factory=dict)
    _blocks: dict[tuple[str, int, int], bool] = field(default_factory=dict)
    _inside: dict[Path, bool] = field(default_factory=dict)

    # --- entry --------------------------------------------------------------------
    def build(self) -> Region:
        fn = self.an.entry_fn
        root = Region([], Kind.ROOT, self.an.kernel_cores, self._body_anchor(fn), "kernel entry",
                      function=fn.id)
        self.walk_block(fn, fn.body, Ctx(self.an.kernel_cores, stack=(fn.id,)), root)
        return root

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
                        loop_vars=ctx.loop_vars, variant=ctx.variant, **kw)  # type: ignore[arg-type]
        parent.children.append(region)
        return region

    def inside(self, fn: FunctionDef) -> bool:
        """Defined in the operator's own files (only those get points)."""
        inside = self._inside.get(fn.src.path)
        if inside is None:
            inside = self._inside[fn.src.path] = fn.src.path.resolve().is_relative_to(self.an.layers.op_dir)
        return inside

    # --- statements -----------------------------------------------------------------
    def walk_block(self, fn: FunctionDef, node: Node, ctx: Ctx, parent: Region) -> None:
        for child in node.named_children:
            self.walk_stmt(fn, child, ctx, parent)

    def walk_stmt(self, fn: FunctionDef, node: Node, ctx: Ctx, parent: Region) -> None:
        t = node.type
        if t in _PREPROC_ARMS:
            self.walk_preproc(fn, node, ctx, parent)
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
                chain: tuple[str, int] | None = None) -> None:
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
        cons = node.child_by_field_name("consequence")
        if cons is not None and then_ctx.cores:
            self.walk_stmt(fn, cons, then_ctx, parent)
        alt = node.child_by_field_name("alternative")
        if alt is not None and else_ctx.cores:
            for c in alt.named_children:
                if dispatch and c.type == "if_statement":
                    self.walk_if(fn, c, else_ctx, parent, (chain_id, arm + 1))
                elif dispatch:
                    self.walk_stmt(fn, c, replace(else_ctx, variant=(*ctx.variant, (chain_id, arm + 1))),
                                   parent)
                else:
                    self.walk_stmt(fn, c, else_ctx, parent)

    def walk_preproc(self, fn: FunctionDef, node: Node, ctx: Ctx, parent: Region,
                     chain: tuple[str, int] | None = None) -> None:
        """`#if` / `#ifdef` / `#elif` / `#else` arms: every arm planned, each a variant."""
        chain_id, arm = chain or (f"{fn.src.path}:{node.start_byte}", 0)
        alt = node.child_by_field_name("alternative")
        skip = {n.id for n in (node.child_by_field_name("condition"), node.child_by_field_name("name"))
                if n is not None}
        inner = replace(ctx, variant=(*ctx.variant, (chain_id, arm)))
        for child in node.named_children:
            if alt is not None and child.id == alt.id:
                self.walk_preproc(fn, child, ctx, parent, (chain_id, arm + 1))
            elif child.id not in skip:
                self.walk_stmt(fn, child, inner, parent)

    def classify_loop(self, fn: FunctionDef, loop: Node) -> str:
        if is_spin_loop(self.an, fn, loop):
            return "spin"
        var = loop_var(fn, loop)
        words = set(kebab(var).split("-")) if var else set()
        work = self._loop_has_work(fn, loop)
        if words & PHASE_LOOP_WORDS and work:
            return "phase"
        blocking = self._loop_blocks(fn, loop)
        if words & TILE_LOOP_WORDS and not blocking:
            return "tile"
        return "phase" if work or blocking else "tile"

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
        kind = self.classify_loop(fn, loop)
        var = loop_var(fn, loop)
        line = fn.src.line_of(loop.start_byte)
        self.loops.append(LoopInfo(fn.src.path, line, var, kind, fn.display, loop.start_byte, loop.end_byte))
        if kind == "tile":
            return
        named_phase = bool(var and set(kebab(var).split("-")) & PHASE_LOOP_WORDS)
        if "wait" in kebab(fn.name).split("-") and not named_phase:
            return  # inside a Wait* function the function itself is the wait region
        if kind == "spin":
            if "wait" in kebab(fn.name).split("-"):
                return  # the enclosing Wait* function is already the wait region
            word = "wait-" + "-".join(var_words(var)) if var else "spin-wait"
            self._new(parent, [word], Kind.WAIT, ctx, self._stmt_anchor(fn, loop),
                      f"spin-wait loop in {fn.display}", hot="wait")
            return
        body = loop.child_by_field_name("body")
        if body is None:
            return
        stem = "-".join(var_words(var)) if var else ""
        word = "loop" if stem in ("", "loop") else f"{stem}-loop"
        region = self._new(parent, [word], Kind.LOOP, ctx, self._body_anchor(fn, body),
                           f"phase loop over `{var}` in {fn.display}", index_var=var)
        inner = replace(ctx, loop_vars=(*ctx.loop_vars, var or "?"))
        if body.type == "compound_statement":
            self.walk_block(fn, body, inner, region)
        else:
            self.walk_stmt(fn, body, inner, region)

    def walk_calls(self, fn: FunctionDef, stmt: Node, ctx: Ctx, parent: Region) -> None:
        """One region per statement: the first substantial callee names it."""
        region: Region | None = None
        for call in fn.nodes_in(stmt, ("call_expression",)):
            site = self.an.call_site(fn, call)
            if not site.callees:
                if site.name in BLOCKING_PRIMITIVES and region is None:
                    self._blocking(fn, stmt, call, site.name, ctx, parent)
                elif region is None and site.name in VF_LAUNCHERS and (
                        target := vf_target(text_of(fn.src, call).encode())):
                    region = self._new(parent, [kebab(target)], Kind.CALL, ctx, self._stmt_anchor(fn, stmt),
                                       f"launch of the vector function `{target}`")
                    region.notes.append("a SIMT / vector function runs per thread: measured at its "
                                        "launch, no point inside it")
                elif region is None and self._unseen_work(fn, call, site.name):
                    spelled = text_of(fn.src, call).split("(")[0].strip()
                    region = self._new(parent, [kebab(site.name)], Kind.CALL, ctx,
                                       self._stmt_anchor(fn, stmt),
                                       f"call to `{spelled}` whose class is not in the files read "
                                       "(an absent header)")
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
            if region is None:
                first = bodies[0]
                word = label_word(first, fn.scope)
                # A function called from one place is traced inside its own body, so its
                # header carries the points; shared callees are traced at each call site.
                single = (len(bodies) == 1 and first.core is None
                          and self.an.call_counts.get(first.id, 0) == 1 and self.inside(first))
                anchor = self._body_anchor(first) if single else self._stmt_anchor(fn, stmt)
                region = self._new(parent, [word], Kind.CALL, ctx, anchor,
                                   f"call to {first.display} ({_where(first)})",
                                   function=first.id, hot=hot_of(word), covers=first.src.path)
            outside = [c for c in bodies if not self.inside(c)]
            if outside:
                # Code of another operator or a shared library: its own points would be
                # edits to files other operators compile, so its time is measured here.
                region.notes.append(f"{outside[0].display} is defined outside the operator "
                                    f"directory ({outside[0].src.path.name}): traced at the call site")
            self.expand([c for c in bodies if self.inside(c)], ctx, region)

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
            region = self._new(parent, [kebab(unseen[0])], Kind.CALL, ctx, self._stmt_anchor(fn, stmt),
                               f"`{name}(...)` runs `{unseen[0]}`, whose class is not in the files read "
                               "(an absent header)")
            region.notes.append("traced at the macro's call: the class's code was not found")
            return True
        if not bodies:
            return False
        first = bodies[0]
        region = self._new(parent, [label_word(first, fn.scope)], Kind.CALL, ctx,
                           self._stmt_anchor(fn, stmt), f"call to {first.display} through macro "
                           f"`{name}` ({_where(first)})", function=first.id, covers=first.src.path)
        region.notes.append(f"`{name}(...)` expanded with its definition: traced at the macro's call")
        inside = [c for c in bodies if self.inside(c)]
        if len(inside) < len(bodies):
            region.notes.append(f"{first.display} is defined outside the operator directory: "
                                "traced at the call site")
        self.expand(inside, ctx, region)
        return True

    def _entry_work(self, fn: FunctionDef) -> bool:
        stmts, has_loop = self.an.size_of(fn)
        return has_loop or stmts >= 2

    def _unseen_work(self, fn: FunctionDef, call: Node, name: str) -> bool:
        """`op.Process()` / `op.Init(...)` on a local object whose class is nowhere in the
        files read (a kernel library's header is absent): the launch's work happens there,
        so the call is measured where it is made. Objects of AscendC's own types
        (`TPipe pipe; pipe.Init()`) are not work of the operator."""
        if name not in UNSEEN_WORK_METHODS:
            return False
        func = call.child_by_field_name("function")
        recv = func.child_by_field_name("argument") if func is not None else None
        if func is None or func.type != "field_expression" or recv is None or recv.type != "identifier":
            return False
        tname = self.an.local_type(fn, text_of(fn.src, recv), call.start_byte)
        if tname is None or tname in ASCENDC_TYPES or tname.startswith("AscendC"):
            return False
        return not self.an.index.resolve_class(tname, fn.scope)

    def _blocking(self, fn: FunctionDef, stmt: Node, call: Node, name: str, ctx: Ctx,
                  parent: Region) -> None:
        args = call.child_by_field_name("arguments")
        arg_text = text_of(fn.src, args).strip("() ") if args is not None else ""
        m = re.match(r"[A-Za-z_]\w*", arg_text.split(",")[0].strip()) if arg_text else None
        kind = Kind.WAIT if "Wait" in name else Kind.SYNC
        base = "wait" if kind == Kind.WAIT else kebab(name)
        word = f"{base}-{'-'.join(var_words(m.group(0)))}" if m and kind == Kind.WAIT else base
        self._new(parent, [word], kind, ctx, self._stmt_anchor(fn, stmt),
                  f"{name} in {fn.display}", hot="wait" if kind == Kind.WAIT else "sync")

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
            region.shared_with = first.label or first.words[-1]
            region.notes.append(f"{callee.display} is planned under its first caller")
            return
        self.expanded[key] = region
        inner = replace(ctx, stack=(*ctx.stack, callee.id))
        self.walk_block(callee, callee.body, inner, region)


def _where(fn: FunctionDef) -> str:
    return f"{fn.src.path.name}:{fn.line}"
