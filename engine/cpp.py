"""C++ structure from tree-sitter: functions, classes, aliases, calls, loops.

Works on the normalised text of `optrace.engine.source` (same offsets as the user's
bytes). Names are kept unqualified: operator trees rarely reuse a class name across
namespaces, and unresolved template types are matched by name (see `CodeIndex`).
"""

from __future__ import annotations

import bisect
import functools
import operator
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

import tree_sitter_cpp
from tree_sitter import Language, Node, Parser, Point, Query, QueryCursor, Range, Tree

from optrace.engine.cache import by_content
from optrace.engine.edits import line_number
from optrace.engine.source import (
    CORE_MACRO_AIC,
    CORE_MACRO_AIV,
    DEFAULT_QUALIFIERS,
    SPECIALISED_CALL_PREFIX,
    SourceFile,
    blank_literals,
    decode,
    match_bracket,
    normalise,
)
from optrace.engine.vocabulary import FRAG_CLOSE, FRAG_OPEN, LINE_MARK

_LANGUAGE = Language(tree_sitter_cpp.language())

LOOP_TYPES = frozenset({"for_statement", "for_range_loop", "while_statement", "do_statement"})
_CLASS_TYPES = frozenset({"class_specifier", "struct_specifier", "union_specifier"})
_IDENT_RE = re.compile(r"[A-Za-z_]\w*")


def new_parser() -> Parser:
    return Parser(_LANGUAGE)


def text_of(src: SourceFile, node: Node) -> str:
    return decode(src.text[node.start_byte : node.end_byte])


@functools.lru_cache(maxsize=4096)
def base_type_name(spelled: str) -> str:
    """`typename Gemm::Kernel::Foo<A, B<C>>::Params const &` -> `Params`; `Foo<T>` -> `Foo`."""
    # cached: the analysis asks it of the same few spellings thousands of times an operator
    depth = 0
    out: list[str] = []
    for ch in spelled:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    flat = "".join(out)
    idents = [
        w
        for w in _IDENT_RE.findall(flat.split("::")[-1] if "::" in flat else flat)
        if w not in {"const", "typename", "volatile", "struct", "class", "unsigned", "signed"}
    ]
    return idents[-1] if idents else ""


# Separates the class candidates of a type chosen at compile time (`A|B`): `|` never
# occurs in a C++ name, so a candidate set travels where one base name did.
CANDIDATE_SEP = "|"
_CHOOSERS = ("conditional", "conditional_t", "decltype")
_CHOOSER_RE = re.compile(r"\b(conditional_t|conditional|decltype)\s*([<(])")


def _template_args(text: str, open_at: int) -> list[str]:
    """The top-level arguments of the `<...>` or `(...)` opening at `open_at`."""
    pairs = {"<": ">", "(": ")"}
    closer = pairs[text[open_at]]
    depth = 0
    args: list[str] = []
    start = open_at + 1
    for i in range(open_at, len(text)):
        ch = text[i]
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
            if depth == 0:
                if ch == closer:
                    args.append(text[start:i])
                return args
        elif ch == "," and depth == 1:
            args.append(text[start:i])
            start = i + 1
    return args


def declared_type(spelled: str) -> str:
    """The base name of a declared type, or its class candidates joined by CANDIDATE_SEP
    where the type is chosen at compile time: `std::conditional<C, A, B>::type` and
    `conditional_t<C, A, B>` give `A|B` (nested choices flatten), `decltype(Foo<T>{})`
    every name inside it (the index keeps those that are classes). One launch runs one
    of them, so each is planned."""
    m = _CHOOSER_RE.search(spelled) if "conditional" in spelled or "decltype" in spelled else None
    if m is None:
        return base_type_name(spelled)
    args = _template_args(spelled, m.start(2))
    if m.group(1) == "decltype":
        names = [w for w in _IDENT_RE.findall(" ".join(args)) if w not in _CHOOSERS]
    else:
        names = [n for a in args[1:3] for n in declared_type(a).split(CANDIDATE_SEP)]
    names = [n for n in dict.fromkeys(names) if n and n != "std"]
    return CANDIDATE_SEP.join(names) or base_type_name(spelled)


def decode_specialisation(name: str) -> tuple[str, str | None]:
    """Undo the `operator()<X>` rewrite: returns (`operator()`, core or spec text)."""
    if not name.startswith(SPECIALISED_CALL_PREFIX):
        return name, None
    spec = name[len("operator___") :].strip("_")
    if spec.endswith("AIC") or spec == "AIC":
        return "operator()", "AIC"
    if spec.endswith("AIV") or spec == "AIV":
        return "operator()", "AIV"
    return "operator()", spec


# Node types looked up by position; one C-side query finds them all per file, so the
# analysis never walks trees node by node in Python.
INDEXED_TYPES = (
    "call_expression", "for_statement", "for_range_loop", "while_statement", "do_statement",
    "expression_statement", "declaration", "alias_declaration", "type_definition",
    "break_statement", "function_definition", "class_specifier", "struct_specifier",
    "union_specifier", "field_declaration",
)
_QUERY = Query(_LANGUAGE, "[" + " ".join(f"({t})" for t in INDEXED_TYPES) + "] @n")


class NodeIndex:
    """Nodes of the indexed types of one tree, sorted by start byte, per type."""

    def __init__(self, root: Node) -> None:
        found = QueryCursor(_QUERY).captures(root).get("n", [])
        by_type: dict[str, list[Node]] = defaultdict(list)
        for node in found:
            by_type[node.type].append(node)
        self.nodes: dict[str, list[Node]] = {}
        self.starts: dict[str, list[int]] = {}
        for t, nodes in by_type.items():
            starts = [n.start_byte for n in nodes]
            # The captures come in tree order: sorted already where no two start together
            # (a node's start and end read once, not per comparison of a sort).
            if not all(map(operator.lt, starts, starts[1:])):
                nodes.sort(key=lambda n: (n.start_byte, -n.end_byte))
                starts = [n.start_byte for n in nodes]
            self.nodes[t] = nodes
            self.starts[t] = starts

    def within(self, node: Node, types: frozenset[str] | set[str] | tuple[str, ...]) -> list[Node]:
        """Nodes of the given types inside `node` (itself included), in source order."""
        lo, hi = node.start_byte, node.end_byte
        out: list[Node] = []
        for t in types:
            starts = self.starts.get(t)
            if not starts:
                continue
            nodes = self.nodes[t]
            i = bisect.bisect_left(starts, lo)
            j = bisect.bisect_left(starts, hi)
            out.extend(n for n in nodes[i:j] if n.end_byte <= hi)
        if len(types) > 1:
            out.sort(key=lambda n: (n.start_byte, -n.end_byte))
        return out


@dataclass
class FunctionDef:
    """A function or method definition (with a body)."""

    id: str
    name: str
    scope: str  # enclosing or qualifying class, "" for free functions
    core: str | None  # "AIC" / "AIV" for operator()<AscendC::AIC/AIV> specialisations
    src: SourceFile
    node: Node  # the function_definition
    body: Node
    params: dict[str, str] = field(default_factory=dict)
    index: NodeIndex | None = None
    namespace: str = ""  # enclosing namespaces, outermost first (`a::b`)

    def nodes_in(self, node: Node, types: frozenset[str] | set[str] | tuple[str, ...]) -> list[Node]:
        """Descendants of `node` (within this function's file) of the given types."""
        if self.index is None:
            return list(iter_nodes(node, set(types)))
        return self.index.within(node, types)

    @property
    def line(self) -> int:
        return self.src.line_of(self.node.start_byte)

    @property
    def end_line(self) -> int:
        return self.src.line_of(self.node.end_byte)

    def parameter_nodes(self) -> list[Node]:
        """The parameter declarations of the definition, in order."""
        decl = function_declarator(self.node)
        plist = decl.child_by_field_name("parameters") if decl is not None else None
        if plist is None:
            return []
        return [p for p in plist.named_children if p.type.endswith("parameter_declaration")]

    @functools.cached_property
    def sig(self) -> CppFunction:
        """This definition by byte offsets, as host code's functions are described."""
        sig = signature_of(self.node, self.src.text, mask(self.src.text))
        assert sig is not None  # a FunctionDef is made only of a definition with a declarator
        return sig

    @property
    def display(self) -> str:
        base = f"{self.scope}::{self.name}" if self.scope else self.name
        return f"{base}<{self.core}>" if self.core else base


@dataclass
class ClassInfo:
    """A class's member fields (name -> type), member aliases (`using X = ...`), base
    classes as spelled, template parameters and using-declarations of base members, for
    resolving calls."""

    name: str
    fields: dict[str, str] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    bases: list[str] = field(default_factory=list)  # `NormBase<MoeNorm>`, in declaration order
    template_params: list[str] = field(default_factory=list)
    usings: dict[str, str] = field(default_factory=dict)  # `using Base::Step;`: Step -> Base


@dataclass
class ParsedFile:
    """A source file, its tree-sitter tree, the lines of its parse errors and its node index."""

    src: SourceFile
    tree: Tree
    error_lines: list[int]
    nodes: NodeIndex | None = None
    # Byte ranges of data tables left out of the parse (see `data_table_gaps`).
    skipped: list[tuple[int, int]] = field(default_factory=list)


def parse_file(parser: Parser, src: SourceFile) -> ParsedFile:
    gaps = data_table_gaps(src.text, TABLE_MIN_BYTES)
    tree: Tree | None = None
    for _ in range(3):  # a gap the tree does not confirm is parsed after all
        if not gaps:
            break
        tree, bad = _parse_without(src, gaps)
        if not bad:
            break
        tree, gaps = None, [g for g in gaps if g not in bad]
    if tree is None:
        gaps = []
        tree = parser.parse(src.text)
    errors: list[int] = []
    if tree.root_node.has_error:
        stack = [tree.root_node]
        while stack and len(errors) < 50:
            node = stack.pop()
            if not node.has_error:
                continue
            if node.type == "ERROR" or node.is_missing:
                errors.append(src.line_of(node.start_byte))
                continue
            stack.extend(reversed(node.children))
    return ParsedFile(src, tree, sorted(set(errors)), NodeIndex(tree.root_node), gaps)


# Data tables. A generated header holding `kTable[] = {1, 2, 3, ...}` with millions of
# elements costs seconds to parse and far more to query (every literal is a node the query
# visits), yet no element can be a function, call, loop or declaration. Long stretches of
# list elements written only with names, numbers, `. :: + -`, commas and braces are therefore
# left out of the parse (tree-sitter's included ranges: offsets stay those of the file) and
# their initializer list is kept, empty of those elements. A stretch is skipped only when it
# is a whole number of elements of one list, and the tree without it confirms that list
# (otherwise the file is parsed in full): no indexed node is lost, none is misplaced.
TABLE_MIN_BYTES = 64 * 1024
_TABLE_RUN_RE = re.compile(rb"[\w.:+\-,\s{}]+")
# Element sequences that are not a well-formed list (`1 2`, `{1}{2}`, `a{1}`, `,,`, `{,`,
# `1 +,`, `a:b`, `a::,`) stay in the parse, so their errors are reported as before.
# Checked with bytes operations on the stretch's shape: every name / number character made
# `a`, whitespace removed (or, for `a a`, made single spaces).
_WHITESPACE = b" \t\r\n\f\v"
_SHAPE = bytes(
    ord("a") if chr(c).isascii() and (chr(c).isalnum() or chr(c) in "_.")
    else ord(" ") if c in _WHITESPACE else c
    for c in range(256)
)
_TABLE_BAD = (b"}a", b"}{", b"a{", b"{,", b",,", b"+,", b"+}", b"-,", b"-}", b"::,", b"::}", b":::")


def _well_formed(text: bytes, s: int, e: int) -> bool:
    joined = text[s:e].translate(_SHAPE, _WHITESPACE)
    if any(bad in joined for bad in _TABLE_BAD) or b":" in joined.replace(b"::", b""):
        return False
    spaced = text[s:e].translate(_SHAPE)
    while b"  " in spaced:
        spaced = spaced.replace(b"    ", b" ").replace(b"  ", b" ")
    return b"a a" not in spaced


def data_table_gaps(text: bytes, min_bytes: int = TABLE_MIN_BYTES) -> list[tuple[int, int]]:
    """Byte ranges of at least `min_bytes` that are whole elements of one brace list."""
    if len(text) < min_bytes:
        return []
    gaps: list[tuple[int, int]] = []
    for run in _TABLE_RUN_RE.finditer(text):
        a, b = run.span()
        if b - a < min_bytes:
            continue
        for s, e in _list_stretches(text, a, b):
            if e - s >= min_bytes and _well_formed(text, s, e):
                gaps.append((s, e))
    return gaps


def _next_boundary(text: bytes, pos: int, end: int, depth: int) -> tuple[int, int] | None:
    """The first element start in text[pos:end]: after a `{` (one level deeper) or a `,`."""
    brace = text.find(b"{", pos, end)
    comma = text.find(b",", pos, end)
    if comma >= 0 and (brace < 0 or comma < brace):
        return comma + 1, depth
    if brace >= 0:
        return brace + 1, depth + 1
    return None


def _braces(text: bytes, a: int, b: int) -> Iterator[int]:
    """Offsets of `{` and `}` in text[a:b], in order (a table has few: bytes.find, no regex)."""
    opening, closing = text.find(b"{", a, b), text.find(b"}", a, b)
    while opening >= 0 or closing >= 0:
        if closing < 0 or 0 <= opening < closing:
            yield opening
            opening = text.find(b"{", opening + 1, b)
        else:
            yield closing
            closing = text.find(b"}", closing + 1, b)


def _list_stretches(text: bytes, a: int, b: int) -> Iterator[tuple[int, int]]:
    """Within text[a:b] (list punctuation and element characters only): stretches that
    start at an element and end after a `,` or before the `}` closing the same list."""
    depth = 0
    found = _next_boundary(text, a, b, depth)
    if found is None:
        return
    start, level = found
    depth = level
    seg = start  # where the text at depth `level` last resumed
    opened = -1  # the last `{` going from `level` to `level + 1`
    for pos in _braces(text, start, b):
        if text[pos] == 123:  # `{`
            if depth == level:
                opened = pos
            depth += 1
            continue
        depth -= 1
        if depth == level:
            seg = pos + 1
        elif depth < level:  # the list closes: the stretch is its remaining elements
            yield start, pos
            found = _next_boundary(text, pos + 1, b, depth)
            if found is None:
                return
            start, level = found
            if start > pos + 1 and text[pos + 1 : start - 1].strip():
                return  # not `}` then `,` / `{`: leave the rest alone
            depth, seg, opened = level, start, -1
    # The run ends inside the list: stop after its last top-level comma.
    if depth == level:
        comma = text.rfind(b",", seg, b)
        if comma >= 0:
            yield start, comma + 1
            return
    if opened > start:
        before = text[start:opened].rstrip()
        if before.endswith(b","):
            yield start, start + len(before)


def _parse_without(
    src: SourceFile, gaps: list[tuple[int, int]]
) -> tuple[Tree, set[tuple[int, int]]]:
    """The tree of `src` without the `gaps`, and the gaps it does not show inside a list."""
    text = src.text
    ranges: list[Range] = []
    start = 0
    for s, e in [*gaps, (len(text), len(text))]:
        if s > start:
            ranges.append(Range(_point(src, start), _point(src, s), start, s))
        start = e
    tree = Parser(_LANGUAGE, included_ranges=ranges).parse(text)
    return tree, {gap for gap in gaps if not _inside_list(tree, *gap)}


def _inside_list(tree: Tree, s: int, e: int) -> bool:
    node = tree.root_node.descendant_for_byte_range(s, e)
    if node is None or node.type != "initializer_list" or node.has_error:
        return False
    if not (node.start_byte < s and e < node.end_byte):
        return False
    parent = node.parent
    while parent is not None:
        if parent.type == "ERROR":
            return False
        parent = parent.parent
    return True


def _point(src: SourceFile, offset: int) -> Point:
    row = bisect.bisect_right(src.line_starts, offset) - 1
    return Point(row, offset - src.line_starts[row])


def _declarator_name(node: Node | None) -> Node | None:
    """Descend through pointer / reference / function declarators to the name node."""
    while node is not None:
        if node.type in (
            "identifier",
            "field_identifier",
            "qualified_identifier",
            "operator_name",
            "template_function",
            "destructor_name",
            "type_identifier",
        ):
            return node
        inner = node.child_by_field_name("declarator")
        if inner is None:
            # reference_declarator has no field name for its child
            named = [c for c in node.named_children if c.type != "parameter_list"]
            inner = named[-1] if named else None
            if inner is node:
                return None
        node = inner
    return None


# The ancestors a definition's class, namespaces and heads are looked for in. tree-sitter
# finds a node's parent by descending from the root (a step costs the node's depth): a
# definition buried under thousands of levels (a generated or damaged file: 5,000 nested
# loops around class members) cost seconds a definition. Real heads are a few levels up;
# the planner walks 256 levels at most.
_ANCESTOR_LIMIT = 256


def _ancestors(node: Node) -> Iterator[Node]:
    """The node's parent, its parent's, ... up to _ANCESTOR_LIMIT of them."""
    parent = node.parent
    for _ in range(_ANCESTOR_LIMIT):
        if parent is None:
            return
        yield parent
        parent = parent.parent


def _enclosing_class(node: Node, src: SourceFile) -> str:
    for parent in _ancestors(node):
        if parent.type in _CLASS_TYPES:
            name = parent.child_by_field_name("name")
            return base_type_name(text_of(src, name)) if name is not None else ""
        if parent.type in ("function_definition", "translation_unit"):
            return ""
    return ""


def _enclosing_namespace(node: Node, src: SourceFile) -> str:
    names: list[str] = []
    for parent in _ancestors(node):
        if parent.type == "namespace_definition":
            name = parent.child_by_field_name("name")
            names.append(text_of(src, name) if name is not None else "")
    return "::".join(reversed([n for n in names if n]))


def _split_qualified(src: SourceFile, node: Node) -> tuple[str, str]:
    """`Foo<T>::Bar` -> ("Foo", "Bar"); `Bar` -> ("", "Bar")."""
    spelled = text_of(src, node)
    if node.type == "qualified_identifier":
        name_node = node.child_by_field_name("name")
        scope_node = node.child_by_field_name("scope")
        # Nested qualifiers: take the innermost scope before the final name.
        while name_node is not None and name_node.type == "qualified_identifier":
            scope_node = name_node.child_by_field_name("scope")
            name_node = name_node.child_by_field_name("name")
        name = text_of(src, name_node) if name_node is not None else spelled
        scope = base_type_name(text_of(src, scope_node)) if scope_node is not None else ""
        if name_node is not None and name_node.type == "template_function":
            inner = name_node.child_by_field_name("name")
            name = text_of(src, inner) if inner is not None else name
        return scope, name
    if node.type == "template_function":
        inner = node.child_by_field_name("name")
        return "", text_of(src, inner) if inner is not None else spelled
    if node.type == "operator_name":
        return "", "operator()" if "(" in spelled else spelled.replace(" ", "")
    return "", spelled


def _param_types(src: SourceFile, declarator: Node) -> dict[str, str]:
    out: dict[str, str] = {}
    params = declarator.child_by_field_name("parameters")
    if params is None:
        return out
    for p in params.named_children:
        if p.type not in ("parameter_declaration", "optional_parameter_declaration"):
            continue
        type_node = p.child_by_field_name("type")
        name_node = _declarator_name(p.child_by_field_name("declarator"))
        if type_node is not None and name_node is not None:
            out[text_of(src, name_node)] = declared_type(text_of(src, type_node))
    return out


def parameter_name(data: bytes, param: Node) -> str:
    """The name a parameter declaration gives (`*`, `&` dropped), "" for an unnamed one."""
    names = [c for c in param.named_children if c.type in ("identifier", "pointer_declarator",
                                                             "reference_declarator")]
    text = data[names[-1].start_byte : names[-1].end_byte].decode(errors="replace") if names else ""
    return text.lstrip("*& ")


def function_declarator(node: Node) -> Node | None:
    """The `function_declarator` under a definition or declaration: down the `declarator`
    fields, and through the declarators that have none (`T &f()`: a reference declarator)."""
    decl = node.child_by_field_name("declarator")
    while decl is not None and decl.type != "function_declarator":
        inner = decl.child_by_field_name("declarator")
        if inner is None:
            named = list(decl.named_children)
            inner = named[-1] if named else None
        decl = inner
    return decl


def iter_nodes(node: Node, types: frozenset[str] | set[str], *, into_lambdas: bool = False) -> Iterator[Node]:
    """Pre-order walk yielding nodes of the given types (lambda bodies only when asked)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type in types:
            yield n
        if n.type == "lambda_expression" and n is not node and not into_lambdas:
            continue
        stack.extend(reversed(n.children))


_OWN_FRAGMENT_RE = re.compile(re.escape(FRAG_OPEN) + rb".*?" + re.escape(FRAG_CLOSE), re.S)


def without_own_code(code: bytes) -> bytes:
    """Code as it was before optrace's edits: its lines (`// optrace`) and fragments
    (`/*optrace<*/ ... /*>optrace*/`) taken out. What a second apply reads of an
    instrumented tree to name and key things as the first did on the original."""
    if LINE_MARK in code:
        code = b"\n".join(line for line in code.split(b"\n") if LINE_MARK not in line)
    if FRAG_OPEN in code:
        code = _OWN_FRAGMENT_RE.sub(b"", code)
    return code


def definition_key(src: SourceFile, node: Node) -> bytes:
    """What makes two function definitions the same code: their text (optrace's own
    insertions and whitespace left out, so an instrumented copy is still the same) and
    every head around it — template parameters, class and namespace heads, and the
    preprocessor arm it sits in. Two definitions with one key are one function written
    twice (a header pasted over itself, a guarded header repeated): at most one of them
    can be compiled."""
    start = node.start_byte
    heads: list[bytes] = []
    chain = list(_ancestors(node))
    if chain and chain[0].type == "template_declaration":
        start = chain[0].start_byte
    for parent in chain:
        if parent.type in _CLASS_TYPES or parent.type == "namespace_definition":
            body = parent.child_by_field_name("body")
            head_end = body.start_byte if body is not None else parent.end_byte
            heads.append(src.text[parent.start_byte : head_end])
        elif parent.type == "template_declaration":
            params = parent.child_by_field_name("parameters")
            if params is not None:
                heads.append(src.text[params.start_byte : params.end_byte])
        elif parent.type.startswith("preproc_"):  # the arm's directive line: `#if A`, `#elif B`, `#else`
            end = src.text.find(b"\n", parent.start_byte, parent.end_byte)
            heads.append(src.text[parent.start_byte : end if end >= 0 else parent.end_byte])
    own = without_own_code(src.text[start : node.end_byte])
    # The bytes rb"\s" matches, deleted by bytes.translate: a C loop, several times faster
    # than re.sub (every function definition's text goes through it).
    return b"\0".join([*heads, own]).translate(None, _WHITESPACE)


@dataclass
class CodeIndex:
    """Every function and class of the parsed files, looked up by unqualified name.

    A definition that repeats an earlier one (`definition_key`) is in `functions` but not
    in `by_name`: no call reaches it, so the planner follows one body where the input
    pasted the same function N times (following all N made every call fan out N ways,
    and the plan's work grow with the square of the input)."""

    functions: dict[str, FunctionDef] = field(default_factory=dict)
    by_name: dict[str, list[FunctionDef]] = field(default_factory=lambda: defaultdict(list))
    twins: dict[str, FunctionDef] = field(default_factory=dict)  # a repeat's id -> the first definition
    _keys: dict[bytes, FunctionDef] = field(default_factory=dict)
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    # alias name -> target base type names (from any `using X = ...;` / typedef)
    aliases: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    _current_index: NodeIndex | None = None
    _bases: dict[str, list[str]] = field(default_factory=dict)
    _derived: dict[str, list[str]] = field(default_factory=dict)

    def add_file(self, parsed: ParsedFile) -> None:
        self._bases.clear()
        self._derived.clear()
        src = parsed.src
        root = parsed.tree.root_node
        assert parsed.nodes is not None
        self._current_index = parsed.nodes
        for node in parsed.nodes.within(
            root, ("function_definition", *_CLASS_TYPES, "alias_declaration", "type_definition")
        ):
            if node.type == "function_definition":
                self._add_function(src, node)
            elif node.type in _CLASS_TYPES:
                self._add_class(src, node)
            elif node.type == "alias_declaration":
                name = node.child_by_field_name("name")
                target = node.child_by_field_name("type")
                if name is not None and target is not None:
                    self._alias(text_of(src, name), text_of(src, target))
            elif node.type == "type_definition":
                target = node.child_by_field_name("type")
                for decl in node.children_by_field_name("declarator"):
                    nm = _declarator_name(decl)
                    if nm is not None and target is not None:
                        self._alias(text_of(src, nm), text_of(src, target))

    def _alias(self, name: str, target: str) -> None:
        self.aliases[name].update(declared_type(target).split(CANDIDATE_SEP))

    def _add_function(self, src: SourceFile, node: Node) -> None:
        body = node.child_by_field_name("body")
        declarator = function_declarator(node)
        if body is None or declarator is None:
            return
        name_node = _declarator_name(declarator.child_by_field_name("declarator"))
        if name_node is None:
            return
        scope, name = _split_qualified(src, name_node)
        name, core = decode_specialisation(name)
        if not scope:
            scope = _enclosing_class(node, src)
        line = src.line_of(node.start_byte)
        fid = f"{src.path}:{line}:{scope + '::' if scope else ''}{name}{'<' + core + '>' if core else ''}"
        fn = FunctionDef(fid, name, scope, core, src, node, body, _param_types(src, declarator),
                         self._current_index, _enclosing_namespace(node, src))
        self.functions[fid] = fn
        key = definition_key(src, node)
        first = self._keys.setdefault(key, fn)
        if first is not fn:
            self.twins[fid] = first
            return
        self.by_name[name].append(fn)

    def _add_class(self, src: SourceFile, node: Node) -> None:
        name_node = node.child_by_field_name("name")
        body = node.child_by_field_name("body")
        if name_node is None or body is None:
            return
        name = base_type_name(text_of(src, name_node))
        info = self.classes.setdefault(name, ClassInfo(name))
        for clause in node.named_children:
            if clause.type == "base_class_clause":
                info.bases += [text_of(src, b) for b in clause.named_children
                               if b.type in ("type_identifier", "template_type", "qualified_identifier")]
        if node.parent is not None and node.parent.type == "template_declaration":
            params = node.parent.child_by_field_name("parameters")
            for param in params.named_children if params is not None else ():
                ident = next((c for c in param.named_children if c.type == "type_identifier"), None)
                if ident is not None:
                    info.template_params.append(text_of(src, ident))
        for member in body.named_children:
            if member.type == "using_declaration":
                qualified = next((c for c in member.named_children if c.type == "qualified_identifier"), None)
                if qualified is not None:
                    scope_part, _, member_name = text_of(src, qualified).rpartition("::")
                    if scope_part and member_name:
                        info.usings[member_name] = scope_part
            if member.type == "field_declaration":
                type_node = member.child_by_field_name("type")
                for decl in member.children_by_field_name("declarator"):
                    nm = _declarator_name(decl)
                    if nm is not None and type_node is not None and nm.type != "qualified_identifier":
                        info.fields[text_of(src, nm)] = declared_type(text_of(src, type_node))
            elif member.type == "alias_declaration":
                a = member.child_by_field_name("name")
                t = member.child_by_field_name("type")
                if a is not None and t is not None:
                    info.aliases[text_of(src, a)] = declared_type(text_of(src, t))

    def resolve_class(self, type_name: str, scope: str = "", depth: int = 0) -> set[str]:
        """Class names a spelled type may denote: direct, through aliases (class-scoped
        first, then any alias of that name), or a template parameter `Foo_` -> `Foo`."""
        if not type_name or depth > 6:
            return set()
        found: set[str] = set()
        if CANDIDATE_SEP in type_name:
            for candidate in type_name.split(CANDIDATE_SEP):
                found |= self.resolve_class(candidate, scope, depth + 1)
            return found
        if type_name in self.classes:
            found.add(type_name)
        cls = self.classes.get(scope)
        if cls is not None and type_name in cls.aliases and cls.aliases[type_name] != type_name:
            found |= self.resolve_class(cls.aliases[type_name], "", depth + 1)
        for target in self.aliases.get(type_name, ()):
            if target != type_name:
                found |= self.resolve_class(target, "", depth + 1)
        if not found and type_name.endswith("_"):
            found |= self.resolve_class(type_name.rstrip("_"), scope, depth + 1)
        return found

    def bases_of(self, name: str) -> list[str]:
        """The classes `name` derives from directly, resolved (class templates by their
        name: `StepBase<Derived>` -> `StepBase`; a base named through the class's own
        alias, `using Base = NormBase<X>; ... : public Base`, through it)."""
        cached = self._bases.get(name)
        if cached is None:
            info = self.classes.get(name)
            found: list[str] = []
            for spelled in info.bases if info is not None else ():
                for base in sorted(self.resolve_class(base_type_name(spelled), name)):
                    if base != name and base not in found:
                        found.append(base)
            cached = self._bases[name] = found
        return cached

    def ancestry(self, name: str) -> list[str]:
        """`name`, then its bases breadth-first (nearest first), each once: the order in
        which C++ looks a member name up (the first class that declares it wins)."""
        order = [name]
        i = 0
        while i < len(order) and len(order) < 64:
            for base in self.bases_of(order[i]):
                if base not in order:
                    order.append(base)
            i += 1
        return order

    def derived_from(self, name: str) -> list[str]:
        """Classes deriving from `name` the CRTP way — it among their ancestors, and one of
        their own bases spelt with the class itself as a template argument
        (`class Sel : public NormBase<Sel>`): a base template's `static_cast<Derived *>(this)`
        is one of these. A class template instantiated with other arguments is not."""
        cached = self._derived.get(name)
        if cached is None:
            cached = self._derived[name] = sorted(
                c for c in self.classes if c != name and name in self.ancestry(c)
                and any(re.search(r"<[^<>]*\b" + re.escape(c) + r"\b", b) for b in self.classes[c].bases))
        return cached

    def methods(self, classes: set[str], name: str, _via: frozenset[str] = frozenset()) -> list[FunctionDef]:
        """The methods a call of `name` on an object of one of `classes` reaches: the
        class's own (an override hides its bases'), else the nearest base declaring it;
        `using Base::name;` adds that base's overloads to the class's own."""
        out: list[FunctionDef] = []
        for cls in sorted(classes):
            for owner in self.ancestry(cls):
                own = [f for f in self.by_name.get(name, ()) if f.scope == owner]
                info = self.classes.get(owner)
                via = info.usings.get(name) if info is not None else None
                if via is not None and owner not in _via:  # `using` chains end; cycles do not loop
                    for base in self.resolve_class(base_type_name(via), owner) - {owner}:
                        own += [f for f in self.methods({base}, name, _via | {owner}) if f not in own]
                if own:
                    out += [f for f in own if f not in out]
                    break
        return out


# Nodes that open a scope for the declarations directly inside them.
_SCOPES = frozenset({"compound_statement", "for_statement", "for_range_loop", "if_statement",
                     "while_statement", "switch_statement", "case_statement", "condition_clause"})


@dataclass(frozen=True)
class LocalDecl:
    """One local declaration: visible from `at` to the end of its scope [start, end)."""

    type: str
    at: int
    start: int
    end: int


def scoped_locals(src: SourceFile, fn: FunctionDef) -> dict[str, list[LocalDecl]]:
    """Variable name -> its declarations with their block scopes, so `op` declared with a
    different class in each tiling-key branch resolves to its own branch's class."""
    out: dict[str, list[LocalDecl]] = {}
    for name, tname, decl in _local_declarations(src, fn):
        scope = decl.parent
        while scope is not None and scope.type not in _SCOPES:
            scope = scope.parent
        start, end = (scope.start_byte, scope.end_byte) if scope is not None else (0, len(src.raw))
        out.setdefault(name, []).append(LocalDecl(tname, decl.start_byte, start, end))
    return out


def local_type_at(scoped: dict[str, list[LocalDecl]], name: str, offset: int) -> str | None:
    """The type of the innermost declaration of `name` in scope at `offset`."""
    best: LocalDecl | None = None
    for d in scoped.get(name, ()):
        if d.start <= offset < d.end and d.at <= offset and (best is None or d.start >= best.start):
            best = d
    return best.type if best is not None else None


def _local_declarations(src: SourceFile, fn: FunctionDef) -> list[tuple[str, str, Node]]:
    """(name, base type, declaration node) of each local declaration, in order.

    Type aliases declared in the body (`using GemmKernel = Kernel::Foo<...>;`) are applied
    here, so two functions reusing one alias name never see each other's target."""
    out: list[tuple[str, str, Node]] = []
    local_alias: dict[str, str] = {}
    for alias in fn.nodes_in(fn.body, ("alias_declaration", "type_definition")):
        target = alias.child_by_field_name("type")
        names = [alias.child_by_field_name("name")] if alias.type == "alias_declaration" else [
            _declarator_name(d) for d in alias.children_by_field_name("declarator")]
        for nm in names:
            if nm is not None and target is not None:
                local_alias[text_of(src, nm)] = declared_type(text_of(src, target))
    for decl in fn.nodes_in(fn.body, ("declaration",)):
        type_node = decl.child_by_field_name("type")
        if type_node is None:
            continue
        tname = declared_type(text_of(src, type_node))
        for d in decl.children_by_field_name("declarator"):
            nm = _declarator_name(d)
            if nm is None:
                continue
            actual = tname
            if tname == "auto":
                actual = _deduced_type(src, d)
            out.append((text_of(src, nm), local_alias.get(actual, actual), decl))
    return out


_CAST_RE = re.compile(r"_cast\s*<\s*([^>]+?)\s*\*?\s*>")
_CTOR_RE = re.compile(r"^\s*(?:new\s+)?([A-Za-z_][\w:]*)\s*(?:<|\(|\{)")


def _deduced_type(src: SourceFile, declarator: Node) -> str:
    """`auto *c = reinterpret_cast<Combiner *>(p)` -> Combiner; `auto k = Foo<T>{}` -> Foo."""
    value = declarator.child_by_field_name("value")
    if value is None:
        return "auto"
    text = text_of(src, value)
    m = _CAST_RE.search(text)
    if m:
        return base_type_name(m.group(1))
    m = _CTOR_RE.match(text)
    return base_type_name(m.group(1)) if m else "auto"


def core_of_condition(text: str) -> str | None:
    """'AIC' / 'AIV' when a condition tests the core type, else None."""
    t = text.replace(" ", "")
    if CORE_MACRO_AIC in t or "ASCEND_IS_AIC" in t:
        return "AIC" if "!" not in t else "AIV"
    if CORE_MACRO_AIV in t or "ASCEND_IS_AIV" in t:
        return "AIV" if "!" not in t else "AIC"
    m = re.search(r"g_coreType(==|!=)(?:AscendC::)?(AIC|AIV)", t) or re.search(
        r"(?:AscendC::)?(AIC|AIV)(==|!=)g_coreType", t
    )
    if m:
        groups = m.groups()
        op = groups[0] if groups[0] in ("==", "!=") else groups[1]
        core = groups[1] if groups[0] in ("==", "!=") else groups[0]
        if op == "!=":
            return "AIV" if core == "AIC" else "AIC"
        return core
    m = re.search(r"is_same(?:_v)?<\w+,(?:AscendC::)?(AIC|AIV)>", t) or re.search(
        r"ArchTag==(?:AscendC::)?(AIC|AIV)", t
    )
    if m:
        return m.group(1)
    return None


_ROLE_FLAG_RE = re.compile(r"\b(is[A-Z]\w*Core|is[A-Z]\w*(?:Sender|Receiver)|aivIdx\w*|aivId\w*|"
                           r"subBlockIdx\w*|GetSubBlockIdx\(\)|\w*(?:send|recv|comp|quant)\w*Core\w*)")


def role_of_condition(text: str) -> str | None:
    """The AIV role a condition selects (`isSendCore`, `aivIdx < n`, `GetSubBlockIdx()==1`)."""
    if _ROLE_FLAG_RE.search(text):
        return " ".join(text.split())
    return None


# --- functions by byte offsets: the one model of kernel and host code -----------------------
#
# `CppFunction` describes a function by offsets into its file (name, return type,
# parameters, body braces); the codemods edit host code with it, and every kernel
# `FunctionDef` carries one (`FunctionDef.sig`), built by the same `signature_of`. Host
# files are parsed here on their own terms: macro arguments that hold `return` are
# blanked first (`_blank_macro_statements`), which kernel analysis does not need.


def mask(data: bytes) -> bytes:
    """Same length as `data`: comments and the insides of string / char literals become
    spaces (newlines kept, quotes kept), so brackets and semicolons can be matched."""
    return _mask(bytes(data))


# The scans below are pure functions of a file's bytes. The layer codemods of one operator
# (and of every operator a process computes) ask them about the same files again and
# again — a shared pybind.cpp, an adapter — so they are cached by content: a file that
# changed is a different key.
@by_content(64, big=2)
def _mask(data: bytes) -> bytes:
    return blank_literals(data)



def statement_end(code: bytes, offset: int) -> int:
    """Offset just past the `;` ending the statement holding `offset`."""
    depth = 0
    for i in range(offset, len(code)):
        c = code[i]
        if c in (0x28, 0x7B, 0x5B):
            depth += 1
        elif c in (0x29, 0x7D, 0x5D):
            depth -= 1
            if depth < 0:
                return i
        elif c == 0x3B and depth == 0:
            return i + 1
    return len(code)


IDENT_RE = re.compile(rb"[A-Za-z_]\w*")


def last_ident(text: bytes) -> str:
    names = IDENT_RE.findall(text)
    return names[-1].decode() if names else ""



# --- functions (tree-sitter over host code) ----------------------------------------------


@dataclass(frozen=True)
class CppFunction:
    """A host-side function (definition or prototype) by byte offsets: its name, return type,
    parameters and body."""

    name: str  # unqualified
    qualified: str
    start: int  # the definition (template / specifiers included)
    type_span: tuple[int, int] | None  # the return type as written
    params: tuple[tuple[int, int], ...]  # each parameter declaration
    params_open: int
    params_close: int
    body_open: int  # `{`, or -1 for a declaration
    body_close: int
    line: int


def _name_of(node: Node | None, data: bytes) -> str:
    while node is not None:
        if node.type in ("identifier", "field_identifier", "qualified_identifier", "destructor_name",
                         "operator_name", "template_function"):
            return data[node.start_byte : node.end_byte].decode(errors="replace")
        inner = node.child_by_field_name("declarator")
        if inner is None:
            named = [c for c in node.named_children if c.type != "parameter_list"]
            inner = named[-1] if named else None
        node = inner
    return ""


def signature_of(node: Node, data: bytes, code: bytes) -> CppFunction | None:
    """The byte-offset model of a `function_definition` (or, for a prototype, a
    `declaration` / `field_declaration` with a function declarator) of `data`, whose
    masked copy is `code` (`mask`); None when the node declares no function."""
    is_def = node.type == "function_definition"
    fdecl = function_declarator(node)
    if fdecl is None:
        return None
    plist = fdecl.child_by_field_name("parameters")
    if plist is None:
        return None
    qualified = _name_of(fdecl.child_by_field_name("declarator"), data)
    if not qualified:
        return None
    params = tuple((p.start_byte, p.end_byte) for p in plist.named_children
                   if p.type.endswith("parameter_declaration"))
    body = node.child_by_field_name("body") if is_def else None
    type_node = node.child_by_field_name("type")
    start = node.start_byte
    if node.parent is not None and node.parent.type == "template_declaration":
        start = node.parent.start_byte
    body_close = -1
    if body is not None:
        # The brace that closes the body, matched in the bytes: error recovery inside
        # the body (an unknown macro) may end tree-sitter's node elsewhere.
        body_close = match_bracket(code, body.start_byte) if code[body.start_byte] == 0x7B else -1
        if body_close < 0:
            body_close = body.end_byte - 1
    return CppFunction(
        qualified.split("::")[-1], qualified, start,
        (type_node.start_byte, type_node.end_byte) if type_node is not None else None,
        params, plist.start_byte, plist.end_byte - 1,
        body.start_byte if body is not None else -1, body_close,
        line_number(data, node.start_byte),
    )


_FUNC_TYPES = frozenset({"function_definition", "declaration", "field_declaration"})


def functions(data: bytes, *, declarations: bool = False) -> list[CppFunction]:
    """Function definitions (and, with `declarations`, prototypes) in source order."""
    return [fn for fn, is_def in _functions(bytes(data)) if declarations or is_def]


_STATEMENT_WORD_RE = re.compile(rb"[()\[\]{}]|\b(?:return|break|continue)\b")


def _blank_macro_statements(text: bytes) -> bytes:
    """`return` / `break` / `continue` written as a macro argument (`OP_CHECK_IF(c, LOG(..),
    return ge::GRAPH_FAILED);`) blanked, same length: tree-sitter reads such a call as
    broken syntax and its recovery can end a function early, start one at a macro, or
    lose the next definition. A lambda's body inside the parentheses keeps its own."""
    code = mask(text)
    stack: list[int] = []
    blank: list[tuple[int, int]] = []
    for m in _STATEMENT_WORD_RE.finditer(code):
        c = code[m.start()]
        if c in b"([{":
            stack.append(c)
        elif c in b")]}":
            if stack:
                stack.pop()
        elif stack and stack[-1] == 0x28:  # right inside `(`: a macro argument
            blank.append(m.span())
    if not blank:
        return text
    out = bytearray(text)
    for start, end in blank:
        out[start:end] = b" " * (end - start)
    return bytes(out)


@by_content(64, big=2)
def _functions(data: bytes) -> tuple[tuple[CppFunction, bool], ...]:
    # Definitions and prototypes from one parse (each with "is a definition"): callers ask
    # for both of the same file, and a parse is most of the cost — the last two large files
    # too (offsets only are kept; one apply asked a 1.2 MB header fifty times).
    text = _blank_macro_statements(normalise(data, DEFAULT_QUALIFIERS))
    tree = new_parser().parse(text)
    code = mask(data)
    out: list[tuple[CppFunction, bool]] = []
    # The engine's C-side index finds them (parents before what they hold, as a pre-order
    # walk would): walking a host file's tree node by node in Python was most of this.
    for node in NodeIndex(tree.root_node).within(tree.root_node, _FUNC_TYPES):
        fn = signature_of(node, data, code)
        if fn is not None:
            out.append((fn, node.type == "function_definition"))
    out.sort(key=lambda f: f[0].start)
    return tuple(out)


def enclosing_function(data: bytes, offset: int) -> CppFunction | None:
    best = None
    for fn in functions(data):
        if fn.body_open <= offset <= fn.body_close:
            best = fn  # later starts are nested deeper (lambdas excluded: not definitions)
    return best


def param_name(data: bytes, span: tuple[int, int]) -> str:
    text = data[span[0] : span[1]]
    text = text.split(b"=")[0]
    return last_ident(re.sub(rb"\[[^\]]*\]", b"", text))


def top_level_return(code: bytes, fn: CppFunction) -> tuple[int, int] | None:
    """(start, end) of the body's final top-level `return ...;` when nothing but
    whitespace follows it, else None."""
    depth = 0
    last: tuple[int, int] | None = None
    i = fn.body_open + 1
    while i < fn.body_close:
        c = code[i]
        if c in (0x28, 0x7B, 0x5B):
            depth += 1
        elif c in (0x29, 0x7D, 0x5D):
            depth -= 1
        elif depth == 0 and c == 0x72 and code.startswith(b"return", i) and not _word(code, i - 1) \
                and not _word(code, i + 6):
            end = statement_end(code, i)
            last = (i, end)
            i = end
            continue
        i += 1
    if last is None or code[last[1] : fn.body_close].strip():
        return None
    return last


def _word(code: bytes, i: int) -> bool:
    return 0 <= i < len(code) and (chr(code[i]).isalnum() or code[i] == 0x5F)


def returns_in(code: bytes, fn: CppFunction) -> list[tuple[int, int]]:
    """Every `return ...;` of the body (nested blocks included, lambdas too)."""
    out = []
    for m in re.finditer(rb"\breturn\b", code[: fn.body_close]):
        if m.start() > fn.body_open:
            out.append((m.start(), statement_end(code, m.start())))
    return out


_LAMBDA_TAIL_RE = re.compile(rb"\s*(?:mutable\s*)?(?:noexcept\s*)?(?:->\s*[^;{}()]*)?\s*\Z")


def lambda_bodies(code: bytes, fn: CppFunction) -> list[tuple[int, int]]:
    """Bodies of lambdas inside the function: their returns are not the function's."""
    out = []
    for m in re.finditer(rb"\]\s*\(", code):
        if not fn.body_open < m.start() < fn.body_close:
            continue
        close = match_bracket(code, m.end() - 1)
        brace = code.find(b"{", close) if close > 0 else -1
        if brace < 0 or not _LAMBDA_TAIL_RE.match(code[close + 1 : brace]):
            continue
        end = match_bracket(code, brace)
        if end > 0:
            out.append((brace, end))
    return out


def own_return_values(code: bytes, fn: CppFunction) -> list[tuple[int, int, int]]:
    """`(return keyword, value start, value end)` of each of the function's own returns
    (lambdas' returns left out), the value trimmed of whitespace, without the `;`."""
    lambdas = lambda_bodies(code, fn)
    out = []
    for start, end in returns_in(code, fn):
        if any(a < start < b for a, b in lambdas):
            continue
        value_start = start + len(b"return")
        while code[value_start] in b" \t\r\n":
            value_start += 1
        value_end = end - 1
        while code[value_end - 1] in b" \t\r\n":
            value_end -= 1
        out.append((start, value_start, value_end))
    return out
