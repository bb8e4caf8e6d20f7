"""Kernel points: a B point and an `OptraceEnd` scope guard for every planned region.

DESCRIPTION: insert `MoeTracing(TRACE_POINT("label", "B"))` plus a scope guard that
records the region's E on every way out of it.

Why a scope guard: an E must run on every exit path — early `return`, `return expr;`
(after the value is computed, since it may call traced code), `break` / `continue`
leaving a loop body, and the closing brace. A C++ destructor does exactly that, with no
control-flow rewriting the next reader has to trust. Regions bracketing one statement
(a call site) get a B line before and an E line after it instead, so declarations keep
their scope; statements that are not directly inside a block (`if (x) Foo();`) or that
return get braces and a guard.

Every inserted line ends with `// optrace`; every inserted fragment inside a line is
wrapped in `/*optrace<*/ ... /*>optrace*/`. That is the provenance `strip` uses: it
removes exactly those bytes, so points written by hand stay.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tree_sitter import Node

from optrace.engine.codes import OT302
from optrace.engine.cpp import ParsedFile
from optrace.engine.diagnostics import Diagnostic, InputError, Severity
from optrace.engine.edits import Edit, indent_at, line_end, line_start, newline_of
from optrace.engine.model import Kind, Region
from optrace.engine.plan import Plan
from optrace.engine.vocabulary import FRAG_CLOSE, FRAG_OPEN, LINE_MARK

CODEMOD = "kernel-points"


def point_args(label: str, event: str, index: str | None) -> str:
    args = f'TRACE_POINT("{label}", "{event}")'
    return f"{args}, 0, {index}" if index else args


def begin_and_guard_lines(region: Region, depth: int) -> tuple[bytes, bytes]:
    """The B point and the scope guard, as two statements: each goes on a line of its own
    where the code has lines to give (a reviewer reads them at 120 columns)."""
    index = region.index_var
    return (f"MoeTracing({point_args(region.label, 'B', index)});".encode(),
            f"OptraceEnd optraceEnd{depth}({point_args(region.label, 'E', index)});".encode())


def _unparsed(node: Node, inside: bool) -> bool:
    """A bracketed statement with a parse error in it, or a block whose braces did not parse."""
    if inside:
        return node.type != "compound_statement" or node.child_count == 0 or node.children[0].type != "{"
    return node.has_error


def unplaceable(parsed: Mapping[Path, ParsedFile], region: Region) -> bool:
    """Whether the region's points cannot go where it is anchored: the code there did not
    parse (planning moves such a region's time to its nearest placeable parent)."""
    anchor = region.anchor
    if anchor is None or region.kind in (Kind.EXISTING, Kind.ROOT) or anchor.path not in parsed:
        return False
    node = _node_in(parsed[anchor.path], anchor.start, anchor.end)
    return node is not None and _unparsed(node, anchor.inside)


def _node_in(parsed: ParsedFile, start: int, end: int) -> Node | None:
    node: Node | None = parsed.tree.root_node.descendant_for_byte_range(start, end)
    while node is not None and (node.start_byte, node.end_byte) != (start, end):
        node = node.parent
    return node


def _node_at(plan: Plan, path: Path, start: int, end: int) -> Node | None:
    parsed = plan.analysis.parsed.get(path)
    if parsed is None:
        return None
    return _node_in(parsed, start, end)


def _inside_the_block(data: bytes, block: Node, content: bytes) -> Edit | None:
    """After the `{` of a block: a new line when the brace ends its line, else a fragment."""
    lines = content.split(b"\n")  # statements, one a line where the code has lines to give
    brace_end = block.start_byte + 1
    rest_of_line = data[brace_end : line_end(data, brace_end)].strip()
    newline = newline_of(data)
    if not rest_of_line:
        # Indent like the block's first statement, else one step deeper than the brace.
        first = next((c for c in block.named_children if c.type != "comment"), None)
        if first is not None and data.count(b"\n", brace_end, first.start_byte) >= 1:
            indent = indent_at(data, first.start_byte)
        else:
            indent = _deeper(indent_at(data, block.start_byte))
        at = line_end(data, brace_end, include_newline=True)
        return Edit(Path(), at, at, b"".join(indent + ln + LINE_MARK + newline for ln in lines), CODEMOD)
    # Code after the brace on its line (`{ Copy(); }`): the statements on lines of their
    # own all the same, inside one fragment that ends where that code resumes (on a line
    # of its own, indented): strip takes the line breaks back with it.
    inner = _deeper(indent_at(data, block.start_byte))
    return Edit(Path(), brace_end, brace_end,
                FRAG_OPEN + b"".join(newline + inner + ln for ln in lines) + newline + inner + FRAG_CLOSE,
                CODEMOD)


def _deeper(indent: bytes) -> bytes:
    """One indentation step past `indent`, in the file's own character."""
    return indent + (b"\t" if indent.startswith(b"\t") else b"    ")


_LOOPS = ("for_statement", "while_statement", "do_statement", "for_range_loop")


def _can_leave_early(stmt: Node) -> bool:
    """Whether control can leave `stmt` other than at its end: a `return` inside it, or a
    `break` / `continue` whose loop (or switch) is outside it. Then an E line after the
    statement would be skipped, so the region gets braces and a scope guard instead."""
    stack = list(stmt.children)
    while stack:
        node = stack.pop()
        if node.type == "lambda_expression":
            continue
        if node.type == "return_statement":
            return True
        if node.type in ("break_statement", "continue_statement"):
            targets = _LOOPS + (("switch_statement",) if node.type == "break_statement" else ())
            up = node.parent
            while up is not None and up != stmt and up.type not in targets:
                up = up.parent
            if up is None or (up == stmt and stmt.type not in targets):
                return True
        stack.extend(node.children)
    return False


def _statement_end(stmt: Node) -> int:
    """Where the statement ends, its `;` included. A macro call with a type among its
    arguments (`RUN_IMPL(Kernel, float);`) is an error node to tree-sitter and its `;` an
    empty statement of its own; the macro's body may be `do { ... } while (0)`, which needs
    that `;` on the same side of the braces apply writes."""
    after = stmt.next_sibling
    if stmt.type == "ERROR" and after is not None and after.type == "expression_statement" and \
            after.named_child_count == 0 and after.end_byte - after.start_byte == 1:
        return after.end_byte
    return stmt.end_byte


def _around_statement(data: bytes, stmt: Node, region: Region, depth: int) -> list[Edit]:
    # The statement itself, not a node of the same span inside it (an error node's
    # declarator): its parent says whether it stands in a block.
    while stmt.parent is not None and (stmt.parent.start_byte, stmt.parent.end_byte) == (
            stmt.start_byte, stmt.end_byte) and stmt.parent.type != "translation_unit":
        stmt = stmt.parent
    parent = stmt.parent
    label, index = region.label, region.index_var
    begin = f"MoeTracing({point_args(label, 'B', index)});".encode()
    end = f"MoeTracing({point_args(label, 'E', index)});".encode()
    stmt_end = _statement_end(stmt)
    alone = (not data[line_start(data, stmt.start_byte) : stmt.start_byte].strip()
             and not data[stmt_end : line_end(data, stmt_end)].strip())
    newline = newline_of(data)
    indent = indent_at(data, stmt.start_byte)
    before = line_start(data, stmt.start_byte)
    after = line_end(data, stmt_end, include_newline=True)
    tail = b"" if data[:after].endswith(b"\n") else newline
    if alone and parent is not None and parent.type == "compound_statement" and (
            stmt.type != "return_statement" and not _can_leave_early(stmt)):
        return [
            Edit(Path(), before, before, indent + begin + LINE_MARK + newline, CODEMOD),
            Edit(Path(), after, after, tail + indent + end + LINE_MARK + newline, CODEMOD),
        ]
    if alone:
        # Not in a block, or a way out of the region: braces and a scope guard, each on a
        # line of its own around the statement's lines.
        opening = b"".join(indent + ln + LINE_MARK + newline
                           for ln in (b"{", *begin_and_guard_lines(region, depth)))
        return [
            Edit(Path(), before, before, opening, CODEMOD),
            Edit(Path(), after, after, tail + indent + b"}" + LINE_MARK + newline, CODEMOD),
        ]
    # Sharing its line with other code (`if (n) Sync(); else Wait();`): braces and a
    # scope guard all the same, the brace ending the line, B and the guard a line each,
    # the statement on a line of its own and the closing brace on the next — inside two
    # fragments whose line breaks strip takes back, so the line is its old self again.
    inner = _deeper(indent)
    opening = FRAG_OPEN + b"{" + b"".join(newline + inner + ln for ln in begin_and_guard_lines(region, depth))
    return [
        Edit(Path(), stmt.start_byte, stmt.start_byte, opening + newline + inner + FRAG_CLOSE, CODEMOD),
        Edit(Path(), stmt_end, stmt_end, FRAG_OPEN + newline + indent + b"}" + FRAG_CLOSE, CODEMOD),
    ]


def point_edits(plan: Plan) -> list[Edit]:
    """Edits for every planned region not already in the source."""
    edits: list[Edit] = []
    for region in plan.root.walk():
        anchor = region.anchor
        if anchor is None or region.kind in (Kind.EXISTING, Kind.ROOT):
            continue  # the root's B and E are part of the entry scaffold
        if region.shared_with and anchor.inside:
            continue  # one body, one pair: planned under its first label (call sites differ)
        parsed = plan.analysis.parsed.get(anchor.path)
        if parsed is None:
            continue
        data = parsed.src.raw
        node = _node_at(plan, anchor.path, anchor.start, anchor.end)
        if node is not None and _unparsed(node, anchor.inside):
            # Points next to code the parser could not read could land mid-expression.
            # Planning moved every such region to a placeable parent (`unplaceable`);
            # one reaching here anyway refuses the whole apply (nothing is written).
            raise InputError(Diagnostic(
                OT302, f'cannot place the points of "{region.label}": the code there does not parse',
                anchor.path, anchor.line, Severity.ERROR))
        if node is None and not anchor.inside:
            # A run of statements (a function split into its send and its wait part):
            # B before the first, E after the last, each on its own line.
            stmts = _statement_run(plan, anchor.path, anchor.start, anchor.end)
            if stmts is not None:
                edits.extend(_at(e, anchor.path) for e in _around_run(data, stmts, region))
            continue
        if node is None:
            continue
        if anchor.inside:
            edit = _inside_the_block(data, node, b"\n".join(begin_and_guard_lines(region, region.depth)))
            if edit is not None:
                edits.append(_at(edit, anchor.path))
        else:
            edits.extend(_at(e, anchor.path) for e in _around_statement(data, node, region, region.depth))
    # Where one region ends and the next begins at the same offset (two statements, one
    # after the other), the E goes first: insertions at one offset are written in the
    # order given, and the tree's order of siblings is not always the source's.
    edits.sort(key=lambda e: (str(e.path), e.start, e.end, 1 if b', "B")' in e.replacement else 0))
    return edits


def _statement_run(plan: Plan, path: Path, start: int, end: int) -> tuple[Node, Node] | None:
    """The first and last of the sibling statements spanning [start, end) of one block."""
    first = _node_at(plan, path, start, _node_end_at(plan, path, start))
    if first is None or first.parent is None or first.parent.type != "compound_statement":
        return None
    last = next((c for c in first.parent.named_children if c.end_byte == end), None)
    if last is None:
        return None
    run = [c for c in first.parent.named_children if first.start_byte <= c.start_byte and c.end_byte <= end]
    # A run is bracketed by two lines: nothing in it may leave it early (the planner never
    # proposes such a run; this keeps an E from being skipped if one ever came).
    return None if any(_can_leave_early(c) or c.type == "return_statement" for c in run) else (first, last)


def _node_end_at(plan: Plan, path: Path, start: int) -> int:
    parsed = plan.analysis.parsed.get(path)
    if parsed is None:
        return start
    node: Node | None = parsed.tree.root_node.descendant_for_byte_range(start, start)
    while node is not None and (node.parent is None or node.parent.type != "compound_statement"):
        node = node.parent
    return node.end_byte if node is not None and node.start_byte == start else start


def _around_run(data: bytes, run: tuple[Node, Node], region: Region) -> list[Edit]:
    first, last = run
    label, index = region.label, region.index_var
    newline = newline_of(data)
    indent = indent_at(data, first.start_byte)
    before = line_start(data, first.start_byte)
    after = line_end(data, last.end_byte, include_newline=True)
    tail = b"" if data[:after].endswith(b"\n") else newline
    begin = f"MoeTracing({point_args(label, 'B', index)});".encode()
    end = f"MoeTracing({point_args(label, 'E', index)});".encode()
    return [
        Edit(Path(), before, before, indent + begin + LINE_MARK + newline, CODEMOD),
        Edit(Path(), after, after, tail + indent + end + LINE_MARK + newline, CODEMOD),
    ]


def _at(edit: Edit, path: Path) -> Edit:
    return Edit(path, edit.start, edit.end, edit.replacement, edit.codemod, edit.note)
