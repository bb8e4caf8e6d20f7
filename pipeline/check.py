"""`optrace check`: trace-point checks and kernel-side compile safety, per operator.

Every finding has a stable code (OT4xx), a location and a message. Static checks read
the kernel sources as they are (instrumented by optrace or by hand); compile safety
parses each file optrace touched with libclang against the AscendC host stub, and
reports the diagnostics that land on code optrace inserted — real trees include headers
no stub can provide, so everything else is context, not a finding. Only kernel files are
compiled (the stub is AscendC's); the host layers are judged by the gates G1–G5
(`pipeline/gates.py`, codes OT451..OT455), reported with their evidence on every operator.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import cache
from pathlib import Path

from tree_sitter import Node, Tree

from optrace.codemods.kernel_entry import entry_profiling
from optrace.codemods.registry import LAYERS
from optrace.codemods.runtime_block import template
from optrace.engine.analysis import Analysis, analyse_operator
from optrace.engine.codes import (
    OT002,
    OT003,
    OT004,
    OT011,
    OT044,
    OT401,
    OT402,
    OT403,
    OT404,
    OT405,
    OT406,
    OT407,
    OT409,
    OT410,
    OT411,
    OT420,
    OT421,
    OT456,
)
from optrace.engine.compile_scope import blank_untouched_bodies
from optrace.engine.cpp import new_parser
from optrace.engine.diagnostics import InputError, Severity
from optrace.engine.discovery import (
    CPP_EXTS,
    default_repo_root,
    is_no_operator,
    refuse_parent_of_operators,
    resolve_operator_dir,
    walk_files,
)
from optrace.engine.host_compile import start_host_compile
from optrace.engine.journal import foreign_journal, pending_journal
from optrace.engine.model import TracePoint
from optrace.engine.probes import looked_at, read_elsewhere
from optrace.engine.source import (
    DEFAULT_QUALIFIERS,
    blank_comments,
    blank_if0,
    decode,
    normalise,
    read_regular,
)
from optrace.engine.vocabulary import (
    INSERTED_LINE_RE,
    MAX_DEPTH,
    PROFILING_OUTPUT,
    RUNTIME_BLOCK_VERSION_RE,
    TRACE_POINT_CALL,
    label_problem,
)
from optrace.pipeline.check_plan import findings_from_plan
from optrace.pipeline.check_report import CheckReport
from optrace.pipeline.gates import evaluate_gates
from optrace.pipeline.plan import AnalysedOnce, plan_from_analysis

_POINT_RE = re.compile(
    rb"\b(MoeTracing\s*(?:<[^>]*>)?\s*\(|OptraceEnd\s+\w+\s*\(|OptraceEntryEnd\s+\w+\s*\()\s*"
    + TRACE_POINT_CALL
)
_ENABLE_RE = re.compile(rb"^[ \t]*#[ \t]*define[ \t]+ENABLE_MOE_PROFILING[ \t]+(\S+)", re.M)


def scan_points(path: Path, data: bytes) -> list[TracePoint]:
    if b"TRACE_POINT" not in data:  # every point names it (blanking only removes text)
        return []
    code = blank_if0(blank_comments(data))
    out = []
    line, counted = 1, 0  # lines counted up to `counted`, on from the last match (not from 0 each time)
    for m in _POINT_RE.finditer(code):
        head = m.group(1)
        line += code.count(b"\n", counted, m.start())
        counted = m.start()
        guard = head.startswith((b"OptraceEnd", b"OptraceEntryEnd"))
        label, event = decode(m.group(2)), decode(m.group(3))
        out.append(TracePoint(label, event, path, line, m.start(), m.end(), guard=guard))
    return out


def check_operator(op_dir: Path, repo_root: Path | None = None, compile_safety: bool = True,
                   shared: AnalysedOnce | None = None) -> CheckReport:
    """`shared`: the operator's analysis and plan as another reader of the same bytes made
    them (apply's proof), instead of making them again."""
    op_dir = resolve_operator_dir(op_dir)
    refuse_parent_of_operators(op_dir)
    root = (repo_root or default_repo_root(op_dir)).resolve()
    report = CheckReport(op_dir, root)
    pending = pending_journal(root, op_dir)
    if pending is not None:
        report.add(OT044, f"{OT044.summary}: the tree may be "
                   "half-written; run `optrace apply --write` or `optrace strip --write` on it (it "
                   "rolls the unfinished one back first), then check again", pending, 0)
    foreign = foreign_journal(root, op_dir)
    if foreign is not None:  # never acted on; says nothing about the tree
        report.add(foreign.code, foreign.message, foreign.path, 0, Severity.WARNING)
    files = [p for p in walk_files(op_dir, CPP_EXTS)]
    all_points: list[TracePoint] = []
    touched: list[Path] = []
    for path in files:
        try:
            data = read_regular(path)
        except OSError as exc:
            report.add(OT011, f"cannot read: {exc.strerror}", path, 0)
            continue
        # Each pattern only where its literal occurs: a search that finds nothing walks the
        # whole file byte by byte (no literal prefix to skip with), and most files hold
        # none of these.
        m = _ENABLE_RE.search(data) if b"ENABLE_MOE_PROFILING" in data else None
        if m:
            report.profiling_enabled = decode(m.group(1))
        pts = scan_points(path, data)
        all_points.extend(pts)
        if b"optrace" in data and INSERTED_LINE_RE.search(data):
            touched.append(path)
        _check_block_version(report, path, data)
    report.points = len(all_points)
    report.labels = len({p.label for p in all_points})
    report.instrumented = bool(all_points)
    analysis = _analyse(report, op_dir, root, shared)
    # Compile safety is about kernel code (the host stub is AscendC's): host layers' files
    # are checked by the gates, not compiled here. libclang runs in a child from here on,
    # while the gates and the plan are worked out; its findings come last, as before.
    kernel_dir = analysis.layers.kernel_dir if analysis is not None else None
    kernel_files = [p for p in touched if kernel_dir is None or kernel_dir in p.parents]
    compiling = start_compile_check(kernel_files, op_dir, analysis) if (
        all_points and compile_safety and kernel_files) else None
    try:
        if analysis is not None:
            _check_gates(report, analysis)
        if not all_points:
            return report
        _check_labels(report, all_points)
        _check_pairs(report, all_points)
        if analysis is not None:
            _check_kernel_g2(report, op_dir, root, analysis)
            # Tile-loop points, hot phases without points, density and capacity: from the plan.
            plan = shared.plan() if shared is not None else plan_from_analysis(analysis, lint=False)
            report.findings.extend(findings_from_plan(plan))
    except BaseException:
        if compiling is not None:
            compiling.cancel()
        raise
    if compiling is not None:
        compiling.finish(report)
    return report


_CONFIG_CODES = frozenset({OT002, OT003, OT004})
_CONFIG_NAMES = frozenset({"optrace.toml", "pyproject.toml"})


def _analyse(report: CheckReport, op_dir: Path, root: Path, shared: AnalysedOnce | None) -> Analysis | None:
    try:
        return shared.analysis() if shared is not None else analyse_operator(op_dir, root, LAYERS)
    except InputError as exc:
        # An operator without points that cannot be analysed is not checked (pre-commit runs
        # check on every operator a commit touches) — but a broken configuration is the
        # user's to hear about either way, not "not instrumented".
        d = exc.diagnostic
        if not report.instrumented and is_no_operator(d, op_dir):
            raise  # no kernel entry under it: no operator to call "not instrumented"
        if report.instrumented or d.code in _CONFIG_CODES or (
                d.path is not None and d.path.name in _CONFIG_NAMES):
            report.findings.append(d)
        return None


def _check_gates(report: CheckReport, analysis: Analysis) -> None:
    """G1..G5 with their evidence; a failing gate is also an error finding, and evidence
    that passes with a warning a warning finding (OT456)."""
    report.gates = evaluate_gates(analysis, report.instrumented)
    for gate in report.gates:
        finding = gate.finding()
        if finding is not None:
            report.findings.append(finding)
        for e in gate.evidence:
            if e.warning:
                report.add(OT456, f"gate {gate.gate} ({gate.title}): {e.note}", e.path, e.line)


def _check_block_version(report: CheckReport, path: Path, data: bytes) -> None:
    found = RUNTIME_BLOCK_VERSION_RE.search(data)
    current = _current_block_version()
    if found and current is not None and int(found.group(1)) < current:
        report.add(OT409, f"runtime block v{decode(found.group(1))} is older than "
                   f"v{current}; "
                   "re-run `optrace apply` to upgrade it", path, data.count(b"\n", 0, found.start()) + 1)


@cache
def _current_block_version() -> int | None:
    """The version of the runtime block this optrace writes (read once, not per file)."""
    m = RUNTIME_BLOCK_VERSION_RE.search(template())
    return int(m.group(1)) if m else None


def _check_labels(report: CheckReport, points: list[TracePoint]) -> None:
    seen: set[tuple[str, str]] = set()
    for p in points:
        if (p.label, p.event) in seen:
            continue
        seen.add((p.label, p.event))
        problem = label_problem(p.label, p.event)
        if problem:
            code = OT402 if "deeper" in problem else OT401
            report.add(code, problem, p.path, p.line)
    labels = {p.label for p in points}
    if "processing" not in labels:
        first = points[0]
        report.add(OT403, 'no root point "processing" (the kernel entry scaffold is missing)',
                   first.path, first.line)
    deep = [lb for lb in labels if lb != "processing" and len(lb.split()) > MAX_DEPTH - 1]
    del deep  # reported per point above


def _check_pairs(report: CheckReport, points: list[TracePoint]) -> None:
    """B/E balance per label across the kernel, and per file in source order: every B is
    closed (by an explicit E or a guard) and Es close the most recent open B."""
    begins = Counter(p.label for p in points if p.event == "B")
    ends = Counter(p.label for p in points if p.event == "E")
    first: dict[str, TracePoint] = {}
    for p in points:
        first.setdefault(p.label, p)
    for label in sorted(set(begins) | set(ends)):
        p = first[label]
        if begins[label] and not ends[label]:
            report.add(OT404, f'"{label}" has a B and no E anywhere', p.path, p.line)
        elif ends[label] and not begins[label]:
            report.add(OT404, f'"{label}" has an E and no B anywhere', p.path, p.line)
    by_file: dict[Path, list[TracePoint]] = {}
    for p in points:
        by_file.setdefault(p.path, []).append(p)
    for path, pts in by_file.items():
        _check_file_nesting(report, path, sorted(pts, key=lambda p: p.start))


def _check_file_nesting(report: CheckReport, path: Path, pts: list[TracePoint]) -> None:
    data = read_regular(path)
    code = blank_if0(blank_comments(data))
    stack: list[TracePoint] = []
    open_labels: Counter[str] = Counter()  # the labels on the stack: `in` without a scan
    parsed: list[Tree] = []  # the file's parse, made at the first pair that needs it
    for p in pts:
        if p.event == "B":
            stack.append(p)
            open_labels[p.label] += 1
            continue
        if p.guard:
            # `MoeTracing(B); OptraceEnd g(E);` closes when the scope closes: pair it now.
            if stack and stack[-1].label == p.label:
                open_labels[stack.pop().label] -= 1
            else:
                report.add(OT405, f'scope guard for "{p.label}" does not follow its B', path, p.line)
            continue
        if not stack:
            continue  # an E for a B in another file (a region spanning a call): checked globally
        if stack[-1].label == p.label:
            b = stack.pop()
            open_labels[b.label] -= 1
            _check_exits_between(report, path, code, b, p, parsed)
        elif open_labels[p.label] > 0:
            inner = stack[-1]
            report.add(OT406, f'"{p.label}" ends while "{inner.label}" (line {inner.line}) is still open: '
                       "regions must nest", path, p.line)
            while stack and stack[-1].label != p.label:
                open_labels[stack.pop().label] -= 1
            open_labels[stack.pop().label] -= 1
    del stack


_EXIT_RE = re.compile(rb"\b(return|break|continue)\b")


def _children_between(node: Node, start: int, end: int) -> list[Node]:
    """The node's children that overlap [start, end), found by the cursor (not by listing
    every child: a function body of thousands of statements is walked once per pair)."""
    cursor = node.walk()
    if cursor.goto_first_child_for_byte(start) is None:
        return []
    out = []
    while cursor.node is not None and cursor.node.start_byte < end:
        out.append(cursor.node)
        if not cursor.goto_next_sibling():
            break
    return out


def _check_exits_between(report: CheckReport, path: Path, code: bytes, b: TracePoint, e: TracePoint,
                         parsed: list[Tree]) -> None:
    """An explicit B ... E pair with a return, or a break / continue whose loop (or switch)
    encloses the pair, between them leaves the region without its E. A break that stays
    inside (it ends a loop nested in the region) is fine; scope guards never have this
    problem. `parsed` holds the file's parse once a pair needed it (one parse a file), and
    only the nodes inside the pair are visited: work linear in the points, not their square."""
    segment = code[b.start : e.start]
    if not _EXIT_RE.search(segment):
        return
    if not parsed:
        parsed.append(new_parser().parse(normalise(code, DEFAULT_QUALIFIERS)))
    tree = parsed[0]
    stack = [tree.root_node.descendant_for_byte_range(b.start, e.start) or tree.root_node]
    while stack and stack[0].parent is not None and not (
        stack[0].start_byte <= b.start and stack[0].end_byte >= e.start
    ):
        stack[0] = stack[0].parent
    while stack:
        node = stack.pop()
        if node.end_byte <= b.start or node.start_byte >= e.start:
            continue
        stack.extend(_children_between(node, b.start, e.start))
        if node.type not in ("return_statement", "break_statement", "continue_statement"):
            continue
        if not b.start < node.start_byte < e.start:
            continue
        if node.type != "return_statement":
            targets: tuple[str, ...] = ("for_statement", "while_statement", "do_statement",
                                        "for_range_loop")
            if node.type == "break_statement":
                targets += ("switch_statement",)
            up = node.parent
            while up is not None and up.type not in targets:
                up = up.parent
            if up is not None and up.start_byte > b.start:
                continue  # ends a loop / switch nested inside the region
        # An explicit E for this label right before the exit closes it on that path.
        closing = f'TRACE_POINT("{b.label}", "E")'.encode()
        if closing in code[max(b.start, node.start_byte - 240) : node.start_byte]:
            continue
        keyword = node.type.split("_")[0]
        report.add(OT407, f'`{keyword}` leaves "{b.label}" (B at line {b.line}) without its E',
                   path, b.line + code.count(b"\n", b.start, node.start_byte))


def _check_kernel_g2(report: CheckReport, op_dir: Path, root: Path, analysis: Analysis | None = None) -> None:
    """Kernel side of gate G2: the entry has `profiling_data` after its outputs and before
    workspace / tiling, and forwards it where it forwards the workspace."""
    if analysis is not None:
        an = analysis
    else:
        try:
            an = analyse_operator(op_dir, root, LAYERS)
        except InputError as exc:
            report.findings.append(exc.diagnostic)
            return
    entry = an.entry_fn
    found = entry_profiling(entry)
    if found.name is None:
        report.add(OT410, f"kernel entry `{entry.name}` has no `{PROFILING_OUTPUT}` parameter (gate G2)",
                   entry.src.path, entry.line)
    elif found.after:
        report.add(OT411, f"`{found.name}` must be the last tensor output, but `{found.after[0]}` comes "
                   "after it (gate G2)", entry.src.path, entry.line)


# --- compile safety ------------------------------------------------------------------------


def compile_check(report: CheckReport, files: list[Path], op_dir: Path,
                  analysis: Analysis | None = None) -> None:
    """libclang on each touched file; errors on lines optrace inserted are findings. With
    the operator's analysis, the bodies no inserted line depends on are left out
    (engine/compile_scope.py)."""
    start_compile_check(files, op_dir, analysis).finish(report)


class CompileCheck:
    """`compile_check` under way: libclang runs in a child while the caller works on."""

    def __init__(self, files: list[Path], op_dir: Path, analysis: Analysis | None) -> None:
        self.inserted_of = {path: _inserted_code(read_regular(path)) for path in files}
        # Only errors on lines optrace inserted count: the rest are not even read.
        wanted = {path: lines | set(fragments) for path, (lines, fragments) in self.inserted_of.items()}
        contents = None
        if analysis is not None:
            keep = {path: _inserted_lines(pf.src.raw) for path, pf in analysis.parsed.items()}
            contents = blank_untouched_bodies(analysis.index, analysis.parsed, keep)
        self.pending = start_host_compile(files, op_dir, wanted, contents)

    def finish(self, report: CheckReport) -> None:
        """Wait for libclang and add its findings to `report`."""
        result = self.pending.result()
        if result.out_of_time:
            report.cacheable = False
        # What libclang read and looked for in its child is what the findings rest on.
        for name in result.read:
            read_elsewhere(name, result.identities.get(name))
        for name in result.looked:
            looked_at(name)
        for path, reason in result.skipped:
            report.add(OT421, f"compile safety skipped for this file: {reason}", path, 0)
        for path, errors in result.errors.items():
            report.compile_checked += 1
            inserted, fragments = self.inserted_of[path]
            for err in errors:
                in_fragment = any(a <= err.column <= b for a, b in fragments.get(err.line, ()))
                if err.line in inserted or in_fragment:
                    report.add(OT420, f"inserted code does not compile: {err.message}", path, err.line)

    def cancel(self) -> None:
        self.pending.cancel()


def start_compile_check(files: list[Path], op_dir: Path, analysis: Analysis | None = None) -> CompileCheck:
    """`compile_check`, started; `finish(report)` adds its findings."""
    return CompileCheck(files, op_dir, analysis)


_FRAGMENT_RE = re.compile(rb"/\*optrace<\*/.*?/\*>optrace\*/")


def _inserted_lines(data: bytes) -> set[int]:
    """Every line holding something optrace inserted (whole or a fragment)."""
    if b"optrace" not in data:
        return set()
    lines, fragments = _inserted_code(data)
    return lines | set(fragments)


def _inserted_code(data: bytes) -> tuple[set[int], dict[int, list[tuple[int, int]]]]:
    """Whole lines optrace inserted, and (1-based byte columns) fragments inside lines."""
    lines: set[int] = set()
    fragments: dict[int, list[tuple[int, int]]] = {}
    inside = False
    in_fragment = False  # a fragment spanning lines (a parameter put on a line of its own)
    for n, line in enumerate(data.split(b"\n"), 1):
        if not inside and not in_fragment and b"optrace" not in line:
            continue  # most lines: one substring test instead of three and two regexes
        if b"optrace-scaffold begin" in line or b"optrace-runtime-block v" in line:
            inside = True
        closed = line.find(b"/*>optrace*/") if in_fragment else -1
        if inside or (in_fragment and closed < 0) or re.search(rb"  // optrace\r?$", line):
            lines.add(n)
        elif in_fragment:  # the fragment's last line: inserted up to its close, original after
            fragments.setdefault(n, []).append((1, closed + len(b"/*>optrace*/")))
        for m in _FRAGMENT_RE.finditer(line, closed + 1 if closed >= 0 else 0):
            fragments.setdefault(n, []).append((m.start() + 1, m.end()))
        opened, last_close = line.rfind(b"/*optrace<*/"), line.rfind(b"/*>optrace*/")
        if opened > last_close:  # opened here, closed on a later line
            fragments.setdefault(n, []).append((opened + 1, len(line)))
            in_fragment = True
        elif last_close >= 0:
            in_fragment = False
        if b"optrace-scaffold end" in line or b"optrace-runtime-block end" in line:
            inside = False
    return lines, fragments
