"""l0op: the profiling output threaded from an aclnn API down to the l0 launch (gate G2).

DESCRIPTION: an operator written in the l0op style (ops-nn's hand-written `op_api/`) has
no `aclnnInner<Op>`: its public `aclnn<Api>GetWorkspaceSize` (often named for the API,
`aclnnSiluBackward`, not the op, `SiluGrad`) calls `l0op::<Op>(..., executor)`, which
adds the kernel launch with `ADD_TO_LAUNCHER_LIST_AICORE(<Op>, OP_INPUT(...),
OP_OUTPUT(...), ...)`. The launch's OP_OUTPUT list is what reaches the kernel's outputs,
so the profiling buffer has to travel that chain:

- the launch: `OP_OUTPUT(y)` -> `OP_OUTPUT(y, profilingData)` (the OpDef's last output);
- every function of the operator's op_api files that launches the op, or calls one that
  does, gains `const aclTensor* profilingData` as its last parameter — with
  `= nullptr` on a prototype (the l0op header), so a caller in another operator
  (`l0op::SiluGrad` is public) still compiles and passes no buffer — and every call of it
  in those files passes `profilingData` as its last argument;
- the `aclnn...GetWorkspaceSize` functions the chain reaches are the roots: they take the
  buffer where every aclnn wrapper does, right before `workspaceSize` (the aclnn layer
  edits them: `wrapper_names` includes them).

Every insertion is a `/*optrace<*/ ... /*>optrace*/` fragment. A call that leaves
arguments to their defaults cannot take a last argument positionally: apply refuses it
(OT313) with its line rather than bind the buffer to another parameter.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from optrace.codemods.layer import Evidence, LayerExample, LayerModel, LocatingLayer
from optrace.codemods.layer_common import (
    CODE_LAYER_SHAPE,
    PROFILING_VAR,
    clean_bytes,
    fragment,
    input_error,
    match_bracket,
    split_top,
)
from optrace.engine.cache import once
from optrace.engine.cpp import CppFunction, functions, last_ident, mask
from optrace.engine.discovery import Layers, repo_index
from optrace.engine.edits import Edit, line_number
from optrace.engine.includes import scan_includes
from optrace.engine.names import op_name_re
from optrace.engine.plan import Plan
from optrace.engine.source import read_regular
from optrace.engine.vocabulary import names_profiling

CODEMOD = "l0op"
SOURCE_SUFFIXES = (".cpp", ".cc", ".h", ".hpp")
LAUNCH_RE = re.compile(rb"\bADD_TO_LAUNCHER_LIST_AICORE\s*\(")
OUTPUT_RE = re.compile(rb"OP_OUTPUT\s*\(")
INPUT_RE = re.compile(rb"OP_INPUT\s*\(")
ROOT_RE = re.compile(r"^aclnn\w*GetWorkspaceSize$")
_SKIP_DIRS = frozenset({"tests", "test", "ut", "examples", "docs", "op_kernel"})


def l0op_files(layers: Layers) -> list[Path]:
    """Sources in the operator's `op_api/` folders (`op_api/`, `op_host/op_api/`), the
    aclnn wrappers among them: where an l0op launch and the calls reaching it live."""
    out: list[Path] = []
    for path in sorted(layers.op_dir.rglob("*")):
        rel = path.relative_to(layers.op_dir).parts
        if ("op_api" not in rel[:-1] or _SKIP_DIRS & set(rel[:-1]) or path.suffix not in SOURCE_SUFFIXES
                or not path.is_file() or path.is_symlink()):
            continue
        out.append(path)
    return out


@dataclass(frozen=True)
class Launch:
    """An `ADD_TO_LAUNCHER_LIST_AICORE` launch of the op and its `OP_OUTPUT` items."""

    path: Path
    op_type: str
    at: int  # `ADD_TO_LAUNCHER_LIST_AICORE`
    line: int
    outputs: tuple[tuple[int, int], ...] | None  # the OP_OUTPUT items; None: no OP_OUTPUT
    output_close: int  # OP_OUTPUT's `)`
    # Where an `OP_OUTPUT(...)` argument goes when the launch has none (an op that only
    # reads and checks its inputs): after its `OP_INPUT(...)` argument; -1 without one.
    after_inputs: int = -1


@dataclass(frozen=True)
class Site:
    """A parameter list (a prototype or definition) or an argument list (a call) of a
    threaded function."""

    path: Path
    function: str
    is_call: bool
    has_body: bool
    is_static: bool
    items: tuple[tuple[int, int], ...]
    open_at: int
    close_at: int
    line: int
    # A call leaving trailing parameters to their defaults: those defaults, written out
    # before the profiling buffer (which, last, can only be passed positionally).
    defaults: tuple[bytes, ...] = ()

    def profiling_item(self, data: bytes) -> int | None:
        for i, (s, e) in enumerate(self.items):
            text = data[s:e] if self.is_call else data[s:e].split(b"=")[0]  # `... p = nullptr`
            if "profiling" in last_ident(text).lower():
                return i
        return None


@dataclass
class Threading:
    """How the buffer is threaded from aclnn through the l0op launcher: the launches, the functions
    that gain the parameter and their call sites."""

    launches: list[Launch] = field(default_factory=list)
    functions: set[str] = field(default_factory=set)  # gain the last parameter
    roots: set[str] = field(default_factory=set)  # aclnn...GetWorkspaceSize reached
    sites: list[Site] = field(default_factory=list)
    errors: list[tuple[Path, bytes, int, str]] = field(default_factory=list)
    # A shared l0 function other operators call too: mode B only is refused.
    shared: list[tuple[Path, bytes, int, str]] = field(default_factory=list)
    # Calls that launch the op again in the block of an earlier one (aclnnKthvalue's two
    # `KthvalueCalculate` calls): each launch writes the same buffer from its start, so
    # the trace holds the last one's records. Said in G2, not refused: mode B's output is
    # required, so every launch needs a buffer.
    repeated: list[tuple[Path, bytes, int, str]] = field(default_factory=list)

    def files(self) -> list[Path]:
        seen: dict[Path, None] = {}
        for path in [ln.path for ln in self.launches] + [s.path for s in self.sites]:
            seen.setdefault(path, None)
        return list(seen)


def _launches(path: Path, data: bytes, code: bytes, op_name: str) -> list[Launch]:
    own = op_name_re(op_name)
    out = []
    for m in LAUNCH_RE.finditer(code):
        open_at = m.end() - 1
        close = match_bracket(code, open_at)
        if close < 0:
            continue
        args = split_top(code, open_at + 1, close)
        if not args or not own.fullmatch(code[args[0][0] : args[0][1]].strip()):
            continue
        outputs: tuple[tuple[int, int], ...] | None = None
        output_close = -1
        after_inputs = next((e for s, e in args[1:] if INPUT_RE.match(code, s, e)), -1)
        for s, e in args[1:]:
            om = OUTPUT_RE.match(code, s, e)
            if om is None:
                continue
            o_open = s + om.end() - om.start() - 1
            output_close = match_bracket(code, o_open)
            if output_close > 0:
                outputs = tuple(split_top(code, o_open + 1, output_close))
            break
        op_type = code[args[0][0] : args[0][1]].decode()
        out.append(Launch(path, op_type, m.start(), line_number(data, m.start()), outputs, output_close,
                          after_inputs))
    return out


def _calls(code: bytes, names: set[str], start: int, end: int, own: set[int]) -> list[tuple[str, int]]:
    """Calls `name(` of `names` in code[start:end]: not member calls, not the parameter
    lists of the declarations at `own` (their `(` offsets)."""
    if not names:
        return []
    pattern = re.compile(rb"(?<![\w.>])(?:\w+\s*::\s*)*(" + b"|".join(
        re.escape(n.encode()) for n in sorted(names, key=len, reverse=True)) + rb")\s*\(")
    out = []
    for m in pattern.finditer(code, start, end):
        paren = m.end() - 1
        if paren in own or code[m.start() - 2 : m.start()] == b"->":
            continue
        out.append((m.group(1).decode(), paren))
    return out


def threading(layers: Layers, clean: bool = True) -> Threading:
    """The launch sites of the op in its op_api files, and the functions (and their
    calls) the profiling buffer has to travel through to reach them. Found once in an
    `unchanged_files` stretch (the l0op and aclnn layers both ask); read it, never
    change it."""
    return once(("l0op threading", id(layers), clean), lambda: _threading(layers, clean), layers)


def _threading(layers: Layers, clean: bool) -> Threading:
    texts: dict[Path, bytes] = {}
    for path in l0op_files(layers):
        try:
            texts[path] = clean_bytes(path) if clean else read_regular(path)
        except OSError:
            continue
    result = Threading()
    codes = {p: mask(d) for p, d in texts.items()}
    decls = {p: functions(d, declarations=True) for p, d in texts.items()}
    for path, data in texts.items():
        result.launches.extend(_launches(path, data, codes[path], layers.op_name))
    if not result.launches:
        return result
    # Functions enclosing a launch, then their callers, until none is added.
    need: set[str] = set()
    for ln in result.launches:
        fn = _innermost(decls[ln.path], ln.at)
        if fn is not None and not ROOT_RE.match(fn.name):
            need.add(fn.name)
    own_parens = {p: {fn.params_open for fn in fns} for p, fns in decls.items()}
    grown = True
    while grown:
        grown = False
        for path, fns in decls.items():
            for fn in fns:
                if fn.body_open < 0 or fn.name in need or fn.name in result.roots:
                    continue
                if not _calls(codes[path], need, fn.body_open, fn.body_close, own_parens[path]):
                    continue
                if ROOT_RE.match(fn.name):
                    result.roots.add(fn.name)
                else:
                    need.add(fn.name)
                    grown = True
    launching = {fn.name for ln in result.launches
                 if (fn := _innermost(decls[ln.path], ln.at)) is not None}
    dead = _dead_chains(need, launching, result.roots, decls, codes, own_parens)
    need -= set(dead)
    result.functions = need
    counts: dict[str, set[int]] = {}
    tails: dict[str, set[tuple[bytes | None, ...]]] = {}  # each declaration's default per parameter
    for path, fns in decls.items():
        data = texts[path]
        for fn in fns:
            if fn.name in need:
                counts.setdefault(fn.name, set()).add(len(fn.params))
                tails.setdefault(fn.name, set()).add(tuple(_default(data[s:e]) for s, e in fn.params))
                static = re.search(rb"\bstatic\b", codes[path][fn.start : fn.params_open]) is not None
                result.sites.append(Site(path, fn.name, False, fn.body_open >= 0, static, fn.params,
                                         fn.params_open, fn.params_close, line_number(data, fn.params_open)))
    prototyped = {s.function for s in result.sites if not s.has_body}
    for site in list(result.sites):
        if site.has_body and not site.is_static and site.function not in prototyped:
            shared = _outside_prototype(layers, site.path, texts[site.path], site.function, len(site.items),
                                        clean)
            if shared is None:
                continue
            header, declared = shared
            rel = header.relative_to(layers.repo_root).as_posix()
            if not declared:
                result.errors.append((site.path, texts[site.path], site.open_at,
                                      f"`{site.function}` is declared in {rel}, outside the operator, with "
                                      "another parameter list: optrace cannot tell which declaration this "
                                      "definition is; thread the profiling buffer by hand, header included"))
                continue
            # The shared header's declaration is threaded too (with `= nullptr`): the
            # definition and its declaration stay one function, other includers compile.
            result.sites.extend(declared)
            shown = clean_bytes(header) if clean else read_regular(header)
            for decl in declared:  # where a call's defaults are stated
                tails.setdefault(decl.function, set()).add(tuple(_default(shown[s:e]) for s, e in decl.items))
            prototyped.add(site.function)
            caller = _caller_elsewhere(layers, site.function, {header})
            if caller is not None:
                result.shared.append((site.path, texts[site.path], site.open_at,
                                      f"`{site.function}` is declared in {rel}, outside the operator, and "
                                      f"{caller} calls it too: in mode B that call would launch the op "
                                      "without the profiling output it requires (mode A: the output is "
                                      "optional, that call passes none)"))
    # A function of the operator's own files that another operator calls too (ops-nn's
    # `threshold_grad_v2_d` calls `l0op::ReluGrad` through `../../relu_grad/op_api/
    # relu_grad.h`): its call passes no buffer, so in mode B it would launch the op without
    # the output mode B requires.
    told = {message.split("`")[1] for _, _, _, message in result.shared}
    for site in list(result.sites):
        if not site.has_body or site.is_static or site.function in told:
            continue
        caller = _caller_elsewhere(layers, site.function,
                                   {s.path for s in result.sites if s.function == site.function})
        if caller is not None:
            told.add(site.function)
            result.shared.append((site.path, texts[site.path], site.open_at,
                                  f"`{site.function}` is called from {caller} too, outside the operator: "
                                  "in mode B that call would launch the op without the profiling output it "
                                  "requires (mode A: the output is optional, that call passes none)"))
    unused = {p: [(fn.body_open, fn.body_close) for fn in fns if fn.name in dead and fn.body_open >= 0]
              for p, fns in decls.items()}
    for path, data in texts.items():
        code = codes[path]
        for name, paren in _calls(code, need, 0, len(code), own_parens[path]):
            if any(lo < paren < hi for lo, hi in unused[path]):
                continue  # a call in code nothing runs: the callee's default (or its own arity) holds
            close = match_bracket(code, paren)
            if close < 0:
                continue
            items = tuple(split_top(code, paren + 1, close))
            site = Site(path, name, True, False, False, items, paren, close, line_number(data, paren))
            if site.profiling_item(data) is None and len(items) not in counts.get(name, set()):
                written = _written_out(tails.get(name, set()), len(items))
                if written is None:
                    result.errors.append((path, data, paren, f"this call of `{name}` passes {len(items)} "
                                          "argument(s) and leaves the rest to defaults that no declaration "
                                          "in the operator's op_api files states plainly (or two state "
                                          "differently): the profiling buffer, its new last parameter, "
                                          "cannot be passed positionally; write the defaulted arguments out"))
                    continue
                site = Site(path, name, True, False, False, items, paren, close, line_number(data, paren),
                            written)
            result.sites.append(site)
    _repeated_launches(result, texts, codes)
    return result


def _dead_chains(need: set[str], launching: set[str], roots: set[str], decls: dict[Path, list[CppFunction]],
                 codes: dict[Path, bytes], own_parens: dict[Path, set[int]]) -> dict[str, None]:
    """Functions on the buffer's way that nothing runs: static ones (every definition
    `static`) that no public API (a root), no function others may call (not static) and
    no function holding a launch reaches through the way's calls (ops-nn's gru keeps a
    static `GruDataGetWorkspaceSize` -> `GruDataRun` -> ... -> `l0op::Gru` chain no one
    calls: 8 edits carrying the buffer nowhere). They keep their lists; a call they make
    of a function that is threaded then compiles by that function's `= nullptr` default
    (not static: its prototype, or its definition, gets one). One that calls a threaded
    static function (no default) is threaded as before, with its callers."""
    static: dict[str, bool] = {}
    calls: dict[str, set[str]] = {}
    for path, fns in decls.items():
        for fn in fns:
            if fn.body_open < 0 or (fn.name not in need and fn.name not in roots):
                continue
            is_static = re.search(rb"\bstatic\b", codes[path][fn.start : fn.params_open]) is not None
            static[fn.name] = static.get(fn.name, True) and is_static
            made = _calls(codes[path], need, fn.body_open, fn.body_close, own_parens[path])
            calls.setdefault(fn.name, set()).update(n for n, _ in made)
    seeds = {n for n in need if not static.get(n, False) or n in launching} | roots
    while True:
        live = set(seeds)
        todo = list(seeds)
        while todo:
            for callee in calls.get(todo.pop(), ()):
                if callee not in live:
                    live.add(callee)
                    todo.append(callee)
        dead = {n for n in need if n not in live}
        # A dead function calling a threaded static one must pass it the buffer: threaded.
        revived = {n for n in dead if any(c in live and static.get(c, False) for c in calls.get(n, ()))}
        if not revived:
            return dict.fromkeys(sorted(dead))
        seeds |= revived


def _repeated_launches(result: Threading, texts: dict[Path, bytes], codes: dict[Path, bytes]) -> None:
    """The calls on the buffer's way that follow another in the same block."""
    first: dict[tuple[Path, int], Site] = {}
    for site in result.sites:
        if not site.is_call:
            continue
        block = _block_of(codes[site.path], site.open_at)
        earlier = first.setdefault((site.path, block), site)
        if earlier is not site:
            result.repeated.append((site.path, texts[site.path], site.open_at,
                                    f"`{site.function}` is called again in the block of its call at line "
                                    f"{earlier.line}: both launches write the one profiling buffer, and the "
                                    "trace holds the last one's records"))


def _block_of(code: bytes, at: int) -> int:
    """The offset of the `{` of the innermost block holding `at` (-1 at file level)."""
    depth = 0
    for i in range(at - 1, -1, -1):
        c = code[i]
        if c == 0x7D:  # "}"
            depth += 1
        elif c == 0x7B:  # "{"
            if depth == 0:
                return i
            depth -= 1
    return -1


def _default(param: bytes) -> bytes | None:
    """`bool transpose = false` -> `false`; None without a default, or with a comment in
    it (written into a call, a `//` would swallow the rest of the line)."""
    _, eq, value = param.partition(b"=")
    if not eq or not value.strip() or b"//" in value or b"/*" in value:
        return None
    return b" ".join(value.split())


def _written_out(tails: set[tuple[bytes | None, ...]], passed: int) -> tuple[bytes, ...] | None:
    """The defaults of the parameters after the first `passed`, as the declarations give
    them: one text per parameter, the same in every declaration that has them all (an
    overload set declares them alike); None when none does, or two disagree."""
    found = {tuple(d for d in tail[passed:] if d is not None) for tail in tails
             if len(tail) > passed and None not in tail[passed:]}
    return next(iter(found)) if len(found) == 1 else None


def _outside_prototype(layers: Layers, path: Path, data: bytes, name: str, arity: int,
                       clean: bool) -> tuple[Path, list[Site]] | None:
    """Where an extern function defined in the operator is declared outside it: a header
    the defining file includes (found by name across the repository, as the build's
    include paths would) that declares `name`, and its declarations of `name` with the
    definition's number of parameters (none: a declaration optrace cannot match), read
    as the definition was (`clean`: as before optrace). None when no such header is
    found."""
    sources = repo_index(layers.repo_root).sources
    declared = re.compile(rb"\b" + re.escape(name.encode()) + rb"\s*\(")
    for directive in scan_includes(data):
        if not directive.quoted:
            continue
        for header in sources.get(Path(directive.target).name, []):
            if layers.op_dir in header.parents:
                continue
            try:
                text = read_regular(header)
            except OSError:
                continue
            if declared.search(mask(text)):
                text = clean_bytes(header) if clean else text
                sites = [Site(header, name, False, False, False, fn.params, fn.params_open, fn.params_close,
                              line_number(text, fn.params_open))
                         for fn in functions(text, declarations=True)
                         if fn.name == name and fn.body_open < 0 and len(fn.params) == arity]
                return header, sites
    return None


def _caller_elsewhere(layers: Layers, name: str, skip: set[Path]) -> str | None:
    """A file outside the operator (the declarations in `skip` aside) that calls `name`:
    another operator's code reaching the l0 function. None: every call is this operator's."""
    call = re.compile(rb"(?<![\w.>])" + re.escape(name.encode()) + rb"\s*\(")
    for path in repo_index(layers.repo_root).mentioning(name.encode()):
        if path in skip or layers.op_dir in path.parents or path.suffix not in SOURCE_SUFFIXES:
            continue
        try:
            code = mask(read_regular(path))
        except OSError:
            continue
        m = call.search(code)
        if m is not None:
            line = code.count(b"\n", 0, m.start()) + 1
            return f"{path.relative_to(layers.repo_root).as_posix()}:{line}"
    return None


def _innermost(fns: list[CppFunction], offset: int) -> CppFunction | None:
    best = None
    for fn in fns:
        if fn.body_open <= offset <= fn.body_close:
            best = fn
    return best


@dataclass(frozen=True)
class L0opTarget:
    """One list the buffer joins (located; the fragment is `render_l0op`'s): a launch's
    OP_OUTPUT (or, without one, a new OP_OUTPUT after its OP_INPUT), or a threaded
    function's parameter or argument list. `default`: a parameter list that takes
    `= nullptr` (where other operators' callers see it). Never the sizes macro."""

    path: Path
    data: bytes  # the clean bytes
    launch: Launch | None = None
    site: Site | None = None
    default: bool = False
    sizes: bool = False


def locate_l0op(layers: Layers, mode: str = "B") -> list[L0opTarget]:
    """The launches and threaded lists that lack the buffer, in the order the codemod
    writes them. Raises what refuses the mode: a definition optrace cannot match to its
    declaration, a call leaving defaults it cannot write out, a shared l0 function
    another operator calls (mode B), a launch with neither OP_OUTPUT nor OP_INPUT, a
    profiling parameter written by hand elsewhere than last."""
    th = threading(layers)
    refused = th.errors + (th.shared if mode == "B" else [])
    if refused:
        path, data, at, message = refused[0]
        raise input_error(CODE_LAYER_SHAPE, message, path, data, at)
    out: list[L0opTarget] = []
    prototypes = {s.function for s in th.sites if not s.is_call and not s.has_body}
    for ln in th.launches:
        data = clean_bytes(ln.path)
        if ln.outputs is None:
            if ln.after_inputs < 0:
                raise input_error(CODE_LAYER_SHAPE, f"the launch of {ln.op_type} has neither OP_OUTPUT(...) "
                                  "nor OP_INPUT(...) to put the profiling output after", ln.path, data, ln.at)
        elif any("profiling" in last_ident(data[s:e]).lower() for s, e in ln.outputs):
            continue
        out.append(L0opTarget(ln.path, data, launch=ln))
    for site in th.sites:
        data = clean_bytes(site.path)
        pos = site.profiling_item(data)
        if pos is not None:
            if pos != len(site.items) - 1:
                # Written by hand, not last: the other lists would get it last (G2 on
                # apply's own output).
                s, e = site.items[pos]
                raise input_error(CODE_LAYER_SHAPE, f"`{site.function}` already takes "
                                  f"`{data[s:e].decode(errors='replace').strip()}` here, not last where "
                                  "optrace puts it in its other declarations and calls: move it there (or "
                                  "remove it) by hand", site.path, data, s)
            continue
        # The default goes where other operators' callers see it: on the prototype, or on
        # an extern definition that has none; never on both (a redefined default). A
        # static helper's callers are all in its file, all edited.
        default = not site.is_call and (not site.has_body or (site.function not in prototypes
                                                              and not site.is_static))
        # After a parameter with a default, C++ needs one on every later parameter: a
        # static helper's `bool includeSelf = true` took `profilingData` without one, and
        # the file no longer compiled.
        # (On a definition whose prototype is edited too, the prototype carries it: a
        # default stated twice does not compile either.)
        if (not site.is_call and site.items and _has_default(data[slice(*site.items[-1])])
                and (not site.has_body or site.function not in prototypes)):
            default = True
        out.append(L0opTarget(site.path, data, site=site, default=default))
    return out


def _has_default(parameter: bytes) -> bool:
    """Whether a parameter declaration carries a default: an `=` outside brackets that is
    not part of `==`, `<=`, `>=` or `!=` (`int n = 4`, not `std::array<int, (1 == 1)> a`)."""
    depth = 0
    for i, c in enumerate(parameter):
        if c in b"(<[{":
            depth += 1
        elif c in b")>]}":
            depth -= 1
        elif c == 0x3D and depth == 0:  # "="
            before = parameter[i - 1:i]
            after = parameter[i + 1:i + 2]
            if after != b"=" and before not in (b"=", b"<", b">", b"!"):
                return True
    return False


def l0op_edits(layers: Layers, mode: str = "B") -> list[Edit]:
    return render_l0op(locate_l0op(layers, mode))


def render_l0op(located: Sequence[L0opTarget]) -> list[Edit]:
    """`profilingData` in each located list: last (after the defaults a call leaves
    out), its type and default on a parameter list, an OP_OUTPUT of its own for a launch
    without outputs."""
    edits: list[Edit] = []
    for target in located:
        data, ln, site = target.data, target.launch, target.site
        if ln is not None:
            what = f"launch of {ln.op_type}"
            if ln.outputs is None:
                # An op without outputs: the profiling output is its only one, after its inputs.
                only = b", OP_OUTPUT(" + PROFILING_VAR.encode() + b")"
                edits.append(fragment(ln.path, ln.after_inputs, only, CODEMOD,
                                      f"{what}: the profiling output, its only output"))
                continue
            at = ln.outputs[-1][1] if ln.outputs else ln.output_close
            text = (b", " if ln.outputs else b"") + PROFILING_VAR.encode()
            edits.append(fragment(ln.path, at, text, CODEMOD, f"{what}: profiling output last"))
            continue
        assert site is not None
        if site.is_call:
            text = b", ".join((*site.defaults, PROFILING_VAR.encode()))
        else:
            star = b"const aclTensor* " if b"aclTensor* " in data and b"aclTensor *" not in data \
                else b"const aclTensor *"
            text = star + PROFILING_VAR.encode() + (b" = nullptr" if target.default else b"")
        at = site.items[-1][1] if site.items else site.open_at + 1
        text = (b", " if site.items else b"") + text
        edits.append(fragment(site.path, at, text, CODEMOD, f"{site.function}: profiling output"))
    return edits


# The l0 function launching the kernel, and the aclnn API calling it.
_EXAMPLE_L0 = """\
#include "opdev/op_dfx.h"

namespace l0op {
OP_TYPE_REGISTER(DemoOp);

const aclTensor *DemoOp(const aclTensor *x, aclTensor *y, aclOpExecutor *executor)
{
    auto ret = ADD_TO_LAUNCHER_LIST_AICORE(DemoOp, OP_INPUT(x), OP_OUTPUT(y));
    return ret == 0 ? y : nullptr;
}
}  // namespace l0op
"""
_EXAMPLE_L0_API = """\
#include "opdev/op_executor.h"

aclnnStatus aclnnDemoOpGetWorkspaceSize(const aclTensor *x, aclTensor *y, uint64_t *workspaceSize,
                                        aclOpExecutor **executor)
{
    auto uniqueExecutor = CREATE_EXECUTOR();
    auto out = l0op::DemoOp(x, y, uniqueExecutor.get());
    if (out == nullptr) {
        return ACLNN_ERR_INNER_NULLPTR;
    }
    *workspaceSize = uniqueExecutor->GetWorkspaceSize();
    uniqueExecutor.ReleaseTo(executor);
    return ACLNN_SUCCESS;
}
"""


class L0opLayer(LocatingLayer[L0opTarget]):
    NAME: ClassVar[str] = "l0op"
    DESCRIPTION: ClassVar[str] = ("l0 launch (ADD_TO_LAUNCHER_LIST_AICORE): the profiling output last in "
                                  "OP_OUTPUT, passed down from the aclnn API")
    EXAMPLES: ClassVar[tuple[LayerExample, ...]] = (LayerExample(
        path="demo_op/op_api/demo_op.cpp",
        files={"demo_op/op_api/demo_op.cpp": _EXAMPLE_L0,
               "demo_op/op_api/aclnn_demo_op.cpp": _EXAMPLE_L0_API},
        changes=(
            ("aclOpExecutor *executor)\n",  # past 120 columns on one line: wrapped in its fragment
             "aclOpExecutor *executor/*optrace<*/,\n" + " " * len("const aclTensor *DemoOp(")
             + "const aclTensor *profilingData = nullptr/*>optrace*/)\n"),
            ("OP_OUTPUT(y));", "OP_OUTPUT(y/*optrace<*/, profilingData/*>optrace*/));"),
        ),
    ),)

    def find(self, layers: Layers) -> list[Path]:
        return threading(layers).files()

    def locate(self, plan: Plan, mode: str) -> list[L0opTarget]:
        # Both modes: mode A's adapter passes a null tensor down the same chain.
        return locate_l0op(plan.analysis.layers, mode)

    def render(self, plan: Plan, mode: str, located: Sequence[L0opTarget]) -> list[Edit]:
        return render_l0op(located)

    def verify(self, model: LayerModel) -> list[Evidence]:
        th = threading(model.op.layers, clean=False)
        ev: list[Evidence] = []
        for path, data, at, message in th.errors + (th.shared if model.op.mode == "B" else []):
            if path in model.data:
                ev.append(Evidence(path, data.count(b"\n", 0, at) + 1, message, False))
        for path, data, at, message in th.repeated:
            if path in model.data:
                ev.append(Evidence(path, data.count(b"\n", 0, at) + 1, message))
        for ln in th.launches:
            if ln.path not in model.data:
                continue
            data = model.data[ln.path]
            outs = [last_ident(data[s:e]) for s, e in ln.outputs or ()]
            if outs and names_profiling(outs[-1]):
                ev.append(Evidence(ln.path, ln.line,
                                   f"launch of {ln.op_type}: profiling output last in OP_OUTPUT"))
            else:
                ev.append(Evidence(ln.path, ln.line, f"launch of {ln.op_type}: OP_OUTPUT({', '.join(outs)}) "
                                   "has no profiling output last", False))
        for site in th.sites:
            if site.path not in model.data:
                continue
            data = model.data[site.path]
            pos = site.profiling_item(data)
            kind = "call" if site.is_call else "signature"
            if pos is None:
                what = "argument" if site.is_call else "parameter"
                ev.append(Evidence(site.path, site.line, f"{site.function} {kind} has no profiling {what} "
                                   "(it reaches the launch)", False))
            elif pos != len(site.items) - 1:
                ev.append(Evidence(site.path, site.line, f"{site.function} {kind}: profiling output is not "
                                   "last", False))
            else:
                ev.append(Evidence(site.path, site.line, f"{site.function} {kind}: profiling output last"))
        return ev
