"""Kernel entry scaffold: the per-core buffer, `processing`, the write-back, and the
`profiling_data` output threaded through the entry and the kernel's Init (gate G2,
kernel side).

DESCRIPTION: give the `__global__` entry a `profiling_data` output right after its last
tensor output (before `workspace` / `tiling`), forward it to every call that takes the
workspace (the kernel class's Init: definition and declaration follow), and open the
entry body with the scaffold.

The scaffold sits between `// optrace-scaffold begin` and `// optrace-scaffold end`
lines; the parameters and arguments are fragments wrapped in `/*optrace<*/ ... /*>optrace*/`.
The output stays in the signature when profiling is compiled out (ENABLE_MOE_PROFILING 0):
it exists either way, zeros meaning "off".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from tree_sitter import Node

from optrace.codemods.kernel_points import point_edits
from optrace.codemods.layer import Evidence, FileLayer, LayerExample, LayerModel
from optrace.codemods.layer_common import buffer_core_type
from optrace.codemods.runtime_block import TEMPLATES
from optrace.engine.codes import OT313
from optrace.engine.cpp import FunctionDef, parameter_name, text_of
from optrace.engine.diagnostics import Diagnostic, InputError
from optrace.engine.discovery import CPP_EXTS, KERNEL_EXTS, Layers, entries_in, repo_index, walk_files
from optrace.engine.edits import Edit, indent_at, line_end, newline_of
from optrace.engine.plan import Plan
from optrace.engine.source import SourceFile, blank_comments, match_bracket, read_regular
from optrace.engine.vocabulary import (
    FRAG_CLOSE,
    FRAG_OPEN,
    MODE_RE,
    PROFILING_NAMES,
    PROFILING_OUTPUT,
    PROFILING_VAR,
    SCAFFOLD_BEGIN,
)

CODEMOD = "kernel-entry"
PROFILING_ARG = PROFILING_OUTPUT
INIT_PARAM = PROFILING_VAR
_MODE_RE = MODE_RE  # `... inline` follows for one-line bodies
# A whole scaffold section, begin line to end line (the lines strip removes).
_SECTION_RE = re.compile(
    rb"^// optrace-scaffold begin mode=[AB][^\r\n]*\r?\n.*?^// optrace-scaffold end\r?\n", re.S | re.M)
_SCAFFOLD_ARG_RE = re.compile(rb"\(void\)\s*(\w+)\s*;")  # the `#else` branch names the output


def is_system_param(name: str) -> bool:
    """The launch's trailing system arguments: the workspace and the tiling, however the
    kernel names them (`usrWorkspace`, `lstmTiling`, `tilingGM`)."""
    low = name.lower()
    return "workspace" in low or "tiling" in low


def insert_param(data: bytes, params: list[Node], text: str, index: int | None) -> Edit | None:
    """Insert `text` as a parameter before params[index] (or after the last)."""
    if not params:
        return None
    if index is not None:
        at = _param_start(data, params[index].start_byte)
        return Edit(Path(), at, at, FRAG_OPEN + f"{text}, ".encode() + FRAG_CLOSE, CODEMOD)
    at = params[-1].end_byte
    return Edit(Path(), at, at, FRAG_OPEN + f", {text}".encode() + FRAG_CLOSE, CODEMOD)


def _param_start(data: bytes, start: int) -> int:
    """Where a parameter begins in the file's own bytes: the parser saw qualifiers such as
    `__gm__` blanked, so its node starts at the type (`__gm__ uint8_t *workspace` starts at
    `uint8_t`); a parameter inserted there would take the qualifier from its neighbour.
    The start is after the previous `(` or `,` and its whitespace."""
    i = start
    while i > 0 and data[i - 1] not in b"(,":
        i -= 1
    while i < start and data[i] in b" \t\r\n":
        i += 1
    return i


def prologue_template() -> list[bytes]:
    """The scaffold's lines, from `templates/entry_scaffold.h` (`// @@prologue` to
    `// @@end`): one text for apply and for the host test that compiles it."""
    text = (TEMPLATES / "entry_scaffold.h").read_bytes()
    body = text.replace(b"\r\n", b"\n").split(b"// @@prologue\n", 1)[1].split(b"// @@end", 1)[0]
    return body.rstrip(b"\n").split(b"\n")


def core_mix(plan: Plan) -> str:
    """The scaffold's core-mix argument (runtime block `OPTRACE_CORES_*`): single-type only
    when the kernel declares it (KERNEL_TASK_TYPE). An inferred "AIV only" is a guess, and
    a mixed kernel laid out as single-type would put AIC i and AIV i in one slot; the
    mixed layout holds either kind of launch."""
    core_type = buffer_core_type(plan.analysis.declared_cores)
    return f"OPTRACE_CORES_{core_type}_ONLY" if core_type else "OPTRACE_CORES_MIXED"


def _section_lines(arg: bytes, mode: str, indent: bytes, cores: str, inline: bool = False) -> list[bytes]:
    """The scaffold's lines for one entry: its output's name, mode, body indent, core mix."""
    lines = []
    for line in prologue_template():
        if line.startswith(SCAFFOLD_BEGIN):
            line = SCAFFOLD_BEGIN + f" mode={mode}".encode() + (b" inline" if inline else b"")
        elif line.startswith(b"    "):
            line = indent + line[4:]  # the template's 4-space indent becomes the body's
        lines.append(line.replace(b"@PROFILING_ARG@", arg).replace(b"@CORES@", cores.encode()))
    return lines


def scaffold(data: bytes, body: Node, arg: str, mode: str, cores: str = "OPTRACE_CORES_MIXED") -> Edit:
    """The prologue lines right after the entry body's `{`."""
    nl = newline_of(data)
    first = next((c for c in body.named_children if c.type != "comment"), None)
    indent = indent_at(data, first.start_byte) if first is not None else b"    "
    lines = _section_lines(arg.encode(), mode, indent, cores)
    brace_end = body.start_byte + 1
    if data[brace_end : line_end(data, brace_end)].strip():
        # `{ code... }` on one line: the scaffold goes right after the brace, on lines of
        # its own; the begin line says `inline` so strip also takes back the newline.
        lines[0] += b" inline"
        return Edit(Path(), brace_end, brace_end, nl + nl.join(lines) + nl, CODEMOD, "entry scaffold")
    at = line_end(data, brace_end, include_newline=True)
    return Edit(Path(), at, at, nl.join(lines) + nl, CODEMOD, "entry scaffold")


def _upgrade_edit(plan: Plan, data: bytes, mode: str) -> Edit | None:
    """The current scaffold in place of the section an older optrace wrote (the v1 one
    set the pointer without looking at profiling_data and passed no core mix), with the
    same mode, output name and indentation; None when it is current already. The
    section keeps its begin / end lines, so strip removes it as before."""
    section = _SECTION_RE.search(data)
    if section is None:
        return None
    old = section.group(0)
    arg = _SCAFFOLD_ARG_RE.search(old)
    rows = [ln for ln in old.split(b"\n")[1:] if ln.strip() and not ln.lstrip().startswith((b"#", b"//"))]
    if arg is None or not rows:
        return None  # edited by hand beyond recognition: leave it to the user
    nl = newline_of(data)
    indent = rows[0][: len(rows[0]) - len(rows[0].lstrip())]
    inline = old.split(b"\n", 1)[0].rstrip(b"\r").endswith(b" inline")
    new = nl.join(_section_lines(arg.group(1), mode, indent, core_mix(plan), inline)) + nl
    if new == old:
        return None
    return Edit(Path(), section.start(), section.end(), new, CODEMOD, "upgrade the entry scaffold")


_MACRO_NAME_RE = re.compile(r"[A-Z_][A-Z0-9_]*")


def recorded_mode(data: bytes) -> str | None:
    m = _MODE_RE.search(data)
    return m.group(1).decode() if m else None


def entry_edits(plan: Plan, mode: str | None = None) -> list[Edit]:
    an = plan.analysis
    entry = an.entry_fn
    data = entry.src.raw
    path = entry.src.path
    edits: list[Edit] = []
    m = _MODE_RE.search(data)
    if m is not None:
        # Already scaffolded: a second apply changes nothing, unless --mode changes it or
        # the scaffold is an older one (then the whole section becomes the current one).
        # The other entries too: a tree an older optrace instrumented left them without.
        upgrade = _upgrade_edit(plan, data, mode or m.group(1).decode())
        if upgrade is not None:
            return [_at(upgrade, path), *_twin_entry_edits(plan)]
        if mode is not None and m.group(1).decode() != mode:
            edits.append(Edit(path, m.start(1), m.end(1), mode.encode(), CODEMOD, "mode"))
        return [*edits, *_twin_entry_edits(plan)]
    params = entry.parameter_nodes()
    for p in params:
        # `void entry(ENTRY_PARAMS)`: the parameters are a macro's. profiling_data goes
        # before workspace, inside the macro's body; after the macro it would follow
        # `tiling`, and the launch's pointers would shift by one.
        if p.child_by_field_name("declarator") is None and _MACRO_NAME_RE.fullmatch(text_of(entry.src, p)):
            raise InputError(Diagnostic(
                OT313, f"the kernel entry's parameters come from the macro `{text_of(entry.src, p)}`: "
                "profiling_data belongs before workspace inside it, which optrace does not edit: write "
                "the parameters out in the entry; nothing written", path, entry.src.line_of(p.start_byte)))
    names = [parameter_name(data, p) for p in params]
    arg = PROFILING_ARG
    if PROFILING_ARG in names or PROFILING_VAR in names:
        arg = PROFILING_ARG if PROFILING_ARG in names else PROFILING_VAR
    else:
        system = next((i for i, n in enumerate(names) if is_system_param(n)), None)
        e = insert_param(data, params, f"GM_ADDR {PROFILING_ARG}", system)
        if e is not None:
            edits.append(_at(e, path))
        workspace = next((n for n in names if "workspace" in n.lower()), None)
        if workspace is not None:
            edits.extend(_forwarding_edits(plan, entry, workspace))
    edits.extend(_twin_entry_edits(plan))
    edits.append(_at(scaffold(data, entry.body, arg, mode or "B", core_mix(plan)), path))
    return edits


def _twin_entry_edits(plan: Plan) -> list[Edit]:
    """`GM_ADDR profiling_data` in the operator's other kernel entries of the same name,
    where the entry's parameter list takes it: another SoC's build (ops-nn's `*_apt.cpp`
    for ascend950, an `arch35/` one) compiles one of them, and the OpDef's new output is
    every SoC's. Without it that kernel's workspace and tiling got the pointers after
    theirs. They take the buffer and record nothing (their trace points are not planned)."""
    layers = plan.analysis.layers
    entry = layers.entry
    if entry is None or layers.kernel_dir is None:
        return []
    own = entry.path.resolve()
    edits: list[Edit] = []
    for path in walk_files(layers.kernel_dir, KERNEL_EXTS):
        if path.resolve() == own:
            continue
        try:
            data = read_regular(path)
        except OSError:
            continue
        if entry.name.encode() not in data:
            continue
        for twin in entries_in(path, data):
            if twin.name == entry.name:
                edit = _twin_param(path, data, twin.line, entry.name)
                if edit is not None:
                    edits.append(edit)
    return edits


def _twin_param(path: Path, data: bytes, line: int, name: str) -> Edit | None:
    """The parameter inserted into one other entry (None: it takes it already)."""
    code = blank_comments(data)
    start = sum(len(ln) for ln in code.splitlines(keepends=True)[: line - 1])
    m = re.compile(rb"\b" + re.escape(name.encode()) + rb"\s*\(").search(code, start)
    close = match_bracket(code, m.end() - 1) if m is not None else -1
    if m is None or close < 0:
        return None
    spans: list[tuple[int, int]] = []
    depth, begin = 0, m.end()
    for i in range(m.end(), close + 1):
        c = code[i : i + 1]
        if c in b"(<[":
            depth += 1
        elif c in b")>]" and i < close:
            depth -= 1
        if (c == b"," and depth == 0) or i == close:
            spans.append((begin, i))
            begin = i + 1
    words = [re.findall(rb"[A-Za-z_]\w*", code[a:b]) for a, b in spans]
    names = [w[-1].decode() if w else "" for w in words]
    if PROFILING_ARG in names or PROFILING_VAR in names:
        return None
    if len(spans) == 1 and len(words[0]) == 1 and _MACRO_NAME_RE.fullmatch(names[0]):
        raise InputError(Diagnostic(
            OT313, f"this other kernel entry of the operator takes its parameters from the macro "
            f"`{names[0]}`: profiling_data belongs before workspace inside it, which optrace does "
            "not edit: write the parameters out; nothing written", path, line))
    system = next((i for i, n in enumerate(names) if is_system_param(n)), None)
    if system is not None:
        at = spans[system][0]
        while data[at : at + 1] in (b" ", b"\t", b"\r", b"\n"):
            at += 1
        return Edit(path, at, at, FRAG_OPEN + f"GM_ADDR {PROFILING_ARG}, ".encode() + FRAG_CLOSE, CODEMOD,
                    "profiling_data in another kernel entry")
    at = spans[-1][1]
    while at > spans[-1][0] and data[at - 1 : at] in (b" ", b"\t", b"\r", b"\n"):
        at -= 1
    text = f"GM_ADDR {PROFILING_ARG}" if names == [""] else f", GM_ADDR {PROFILING_ARG}"
    return Edit(path, at, at, FRAG_OPEN + text.encode() + FRAG_CLOSE, CODEMOD,
                "profiling_data in another kernel entry")


def _forwarding_edits(plan: Plan, entry: FunctionDef, workspace: str) -> list[Edit]:
    """`op.Init(..., profiling_data, workspace, ...)` and Init's own parameter lists."""
    an = plan.analysis
    forwarded: list[tuple[Node, int, list[FunctionDef]]] = []
    for call in entry.nodes_in(entry.body, ("call_expression",)):
        args = call.child_by_field_name("arguments")
        if args is None:
            continue
        items = list(args.named_children)
        pos = next((i for i, a in enumerate(items) if text_of(entry.src, a).strip() == workspace), None)
        if pos is None:
            continue
        callees = an.call_site(entry, call).callees
        # Only a callee of the operator's own files grows the parameter: one not found
        # (a header that is absent) could not, and one shared with other operators must
        # not (their call sites would not pass it). Both get the buffer the way every
        # point does, through the per-launch pointer the scaffold sets (docs/layers.md).
        if not callees or not all(c.src.path.resolve().is_relative_to(an.layers.op_dir) for c in callees):
            continue
        forwarded.append((items[pos], pos, callees))
    # A callee called from anywhere but these calls (another entry variant, another
    # function) keeps its signature: those calls would not pass the new argument.
    ours: dict[str, int] = {}
    for _, _, callees in forwarded:
        for name in {c.name for c in callees}:
            ours[name] = ours.get(name, 0) + 1
    edits: list[Edit] = []
    done: set[str] = set()
    elsewhere = _named_elsewhere(plan, {c.scope or c.name for _, _, cs in forwarded for c in cs})
    for arg, pos, callees in forwarded:
        if any(_call_sites(plan, c.name) > ours[c.name] for c in callees):
            continue
        if any((c.scope or c.name) in elsewhere for c in callees):
            continue
        edits.append(Edit(entry.src.path, arg.start_byte, arg.start_byte,
                          FRAG_OPEN + f"{PROFILING_ARG}, ".encode() + FRAG_CLOSE, CODEMOD))
        for callee in callees:
            if callee.id in done:
                continue
            done.add(callee.id)
            edits.extend(_callee_param_edits(plan, callee, pos))
    return edits


def _call_sites(plan: Plan, name: str) -> int:
    """Calls of `name` (not its definition or declarations) in the operator's C++ files
    and every file the plan read: a call follows `.`, `->`, `=`, `(`, `,`, `return` or
    starts a statement; a definition follows its return type."""
    an = plan.analysis
    files = {*an.parsed, *walk_files(an.layers.op_dir, CPP_EXTS)}
    call_re = re.compile(rb"(?:[.>=(,;{}]|\breturn)\s*" + re.escape(name.encode())
                         + rb"\s*(?:<[^;{}()]*>)?\s*\(")
    count = 0
    for path in files:
        parsed = an.parsed.get(path)
        try:
            data = parsed.src.raw if parsed is not None else read_regular(path)
        except OSError:
            continue
        if name.encode() in data:
            count += len(call_re.findall(blank_comments(data)))
    return count


def _named_elsewhere(plan: Plan, words: set[str]) -> set[str]:
    """Of `words` (callees, or the classes of callee methods), those a C / C++ file of the
    repository names in its code outside the operator and the files the plan read.
    Another operator's kernel may include this operator's header and call the helper
    (ops-nn's `fused_mat_mul` includes `../mat_mul_v3/arch35/...`) by a path that only
    resolves in the build's flattened tree, so the plan never read it: widening the helper
    would break that call. Such a callee keeps its signature (its points reach the buffer
    through the per-launch pointer, as every point does).

    Only files that include one of the operator's files by name, or include such a file
    in turn, can name them: those are read (`RepoIndex.includers`, kept in the user
    cache), not the repository's every source."""
    an = plan.analysis
    if not words:
        return set()
    seen = {p.resolve() for p in an.parsed}
    op_dir = an.layers.op_dir.resolve()
    includers = repo_index(an.layers.repo_root).includers()
    names = {p.name for p in walk_files(op_dir, CPP_EXTS)}
    reached: set[Path] = set()
    while names:
        found = {f for n in names for f in includers.get(n, ())} - reached
        found = {f for f in found if not f.resolve().is_relative_to(op_dir)}
        reached |= found
        names = {f.name for f in found}
    tokens = {w: re.compile(rb"(?<![\w])" + re.escape(w.encode()) + rb"(?![\w])") for w in words}
    out: set[str] = set()
    for path in sorted(reached):
        if path.resolve() in seen:
            continue
        try:
            data = read_regular(path)
        except OSError:
            continue
        hits = [w for w in words if w not in out and w.encode() in data]
        if hits:
            code = blank_comments(data)
            out |= {w for w in hits if tokens[w].search(code)}
    return out

def _callee_param_edits(plan: Plan, callee: FunctionDef, pos: int) -> list[Edit]:
    """The definition's parameters, and the in-class declaration's when defined outside."""
    out: list[Edit] = []
    targets = [(callee.src, callee.parameter_nodes())]
    if callee.scope:
        for decl in _declarations(plan, callee):
            targets.append(decl)
    for src, params in targets:
        if pos < len(params):
            e = insert_param(src.raw, params, f"GM_ADDR {INIT_PARAM}", pos)
            if e is not None:
                out.append(_at(e, src.path))
    return out


def _declarations(plan: Plan, fn: FunctionDef) -> list[tuple[SourceFile, list[Node]]]:
    """In-class declarations `void Init(...);` of an out-of-class method definition."""
    found: list[tuple[SourceFile, list[Node]]] = []
    for parsed in plan.analysis.parsed.values():
        nodes = parsed.nodes
        if nodes is None:
            continue
        for cls in nodes.within(parsed.tree.root_node, ("class_specifier", "struct_specifier")):
            name = cls.child_by_field_name("name")
            body = cls.child_by_field_name("body")
            if name is None or body is None or text_of(parsed.src, name).split("<")[0] != fn.scope:
                continue
            for member in body.named_children:
                if member.type not in ("field_declaration", "declaration"):
                    continue
                decl = member.child_by_field_name("declarator")
                while decl is not None and decl.type != "function_declarator":
                    decl = decl.child_by_field_name("declarator")
                if decl is None:
                    continue
                fname = decl.child_by_field_name("declarator")
                if fname is None or text_of(parsed.src, fname) != fn.name:
                    continue
                plist = decl.child_by_field_name("parameters")
                params = [p for p in plist.named_children
                          if p.type.endswith("parameter_declaration")] if plist else []
                found.append((parsed.src, params))
    return found


def _at(edit: Edit, path: Path) -> Edit:
    return Edit(path, edit.start, edit.end, edit.replacement, edit.codemod, edit.note)


@dataclass(frozen=True)
class EntryProfiling:
    """Where the kernel entry takes the buffer: its parameter's name and index, and the
    tensor parameters after it (none when it is the last output, as G2 wants)."""

    name: str | None
    index: int | None
    after: tuple[str, ...] = ()


def entry_profiling(entry: FunctionDef) -> EntryProfiling:
    """The one reading of the entry's parameters for G2 (the gate's evidence and check's
    OT410 / OT411 findings)."""
    names = [parameter_name(entry.src.raw, p) for p in entry.parameter_nodes()]
    prof = next((n for n in names if n in PROFILING_NAMES), None)
    if prof is None:
        return EntryProfiling(None, None)
    i = names.index(prof)
    return EntryProfiling(prof, i, tuple(n for n in names[i + 1 :] if not is_system_param(n)))


class EntryLayer(FileLayer):
    NAME: ClassVar[str] = "entry"
    DESCRIPTION: ClassVar[str] = "kernel entry (__global__ __aicore__): the trace points and profiling_data"
    FOUND_KEY: ClassVar[str | None] = "entry"
    TITLE: ClassVar[str] = "kernel entry (__global__ __aicore__)"
    EXAMPLES: ClassVar[tuple[LayerExample, ...]] = (LayerExample(
        path="demo_op/op_kernel/demo_op.cpp",
        changes=(
            ('#include "kernel_operator.h"\n',
             '#include "kernel_operator.h"\n#include "optrace_runtime.h"  // optrace\n'),
            ("        xGm.SetGlobalBuffer(",
             '        MoeTracing(TRACE_POINT("init", "B"));  // optrace\n'
             '        OptraceEnd optraceEnd2(TRACE_POINT("init", "E"));  // optrace\n'
             "        xGm.SetGlobalBuffer("),
            ("        for (int32_t expertIdx",
             '        MoeTracing(TRACE_POINT("compute", "B"));  // optrace\n        for (int32_t expertIdx'),
            ("        }\n        AscendC::SyncAll();\n",
             "        }\n"
             '        MoeTracing(TRACE_POINT("compute", "E"));  // optrace\n'
             '        MoeTracing(TRACE_POINT("barrier", "B"));  // optrace\n'
             "        AscendC::SyncAll();\n"
             '        MoeTracing(TRACE_POINT("barrier", "E"));  // optrace\n'),
            ("void demo_op(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling)\n{\n",
             # past 120 columns on one line: the parameter on a line of its own, in its fragment
             "void demo_op(GM_ADDR x, GM_ADDR y, /*optrace<*/\n"
             + " " * len('extern "C" __global__ __aicore__ void demo_op(') + "GM_ADDR profiling_data,\n"
             + " " * len('extern "C" __global__ __aicore__ void demo_op(') + "/*>optrace*/GM_ADDR workspace, "
             "GM_ADDR tiling)\n{\n"
             "// optrace-scaffold begin mode=B\n"
             "#if ENABLE_MOE_PROFILING\n"
             "    int64_t moeProfBuf[PROF_SIZE_PER_CORE];\n"
             "    int64_t* moeProfPtr = OptraceEntryBegin(profiling_data, moeProfBuf);\n"
             "    MoeTracingFingerprint();\n"
             '    MoeTracing(TRACE_POINT("processing", "B"));\n'
             '    OptraceEntryEnd optraceEntryEnd(TRACE_POINT("processing", "E"), profiling_data, '
             "moeProfPtr, "
             "OPTRACE_CORES_MIXED);\n"
             "#else\n"
             "    (void)profiling_data;\n"
             "#endif\n"
             "// optrace-scaffold end\n"),
        ),
    ),)

    def find(self, layers: Layers) -> list[Path]:
        return [layers.entry.path] if layers.entry is not None else []

    def edits(self, plan: Plan, mode: str, model: LayerModel | None) -> list[Edit]:
        return [*point_edits(plan), *entry_edits(plan, mode)]

    def verify(self, model: LayerModel) -> list[Evidence]:
        entry = model.op.analysis.entry_fn
        found = entry_profiling(entry)
        if found.name is None or found.index is None:
            return [Evidence(entry.src.path, entry.line, f"kernel entry `{entry.name}` has no profiling_data",
                             False)]
        model.op.facts.kernel_position = found.index
        later = found.after
        note = (f"kernel entry: `{later[0]}` comes after `{found.name}`" if later
                else f"kernel entry: `{found.name}` is parameter {found.index + 1}, the last tensor output")
        return [Evidence(entry.src.path, entry.line, note, not later)]
