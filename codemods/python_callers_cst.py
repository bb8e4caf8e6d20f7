"""Python callers (gates G4, G5): samples and tests receive, save and collect the buffer.

DESCRIPTION: in mode B, every call of the op (`torch.ops.<ns>.<op>(...)`, or the
extension module's `<module>.<op>(...)`) unpacks one more value, `profiling_data`; after
the call the file's device sync runs, then `optrace.runtime.save_profiling_data(...)`
when `OPTRACE_PROFILING_DIR` is set. Scripts with argparse get `--profiling-dir`,
`--point-map` and `--chrome-trace`; every such path is made absolute
(`Path(...).expanduser().resolve()`) right after parsing and exported to the
environment, and again before each call starting workers (`torch.multiprocessing.spawn`,
`mp.start_processes`, a `multiprocessing` `Process` / `Pool` / `ProcessPoolExecutor`:
`python_files.starts_workers`, what G5 checks too), so workers started from any
directory write where the user meant. After the workers are done (a blocking spawn or a
`with Pool(...)` block, else their last `join()`; without workers, after the calls), the
parent runs the collector when a point map is given. Mode A keeps the op's Python arity
and changes nothing here.

Only samples and tests save (`engine.discovery.is_sample_caller`: tests/, examples/,
samples/, test_*.py, *_sample.py, ..., and the config's `samples` globs). Library code
calling the op gets the unpack and nothing else: its callers keep the old outputs, and a
library never writes profiling files or parses options of its own.

The file is read with LibCST (a syntax error is bad input: `file:line`, exit 2); the
edits are byte edits, so formatting and comments stay as they were. Inserted lines end
with `  # optrace`. A statement that has to change inside a line (one more unpacking
target, or a call whose result is used in place) is rewritten as a whole and preceded by
`# optrace-edit N`; strip undoes it by its shape (the added target goes, the hoisted call
goes back where its placeholder stands), nothing of the original kept in a comment.

How a call site changes:

- `a, b = op(...)` (tuples, lists, starred targets): `a, b, profiling_data = op(...)`;
- `out = op(...)`: a line after it, `out, profiling_data = out[:-1], out[-1]` (a lone
  tensor: `out, profiling_data = out`), so `out` keeps its old arity;
- anything else (`op(...)[0]`, `return op(...)`, an argument, a bare call): the call is
  hoisted, `*_optrace_outputs, profiling_data = op(...)`, and the statement uses the old
  outputs in its place;
- a call inside a lambda or a comprehension (a benchmark's `bench(lambda: op(...))`)
  runs later or many times: it is left as it is, and its buffer is not saved.
"""

from __future__ import annotations

import ast
import codecs
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, ParentNodeProvider, PositionProvider

from optrace.codemods.layer import Evidence, LayerModel
from optrace.codemods.layer_common import (
    CODE_LAYER_SHAPE,
    CODE_PYTHON_SYNTAX,
    HASH_MARK,
    clean_bytes,
    input_error,
    marked_lines,
)
from optrace.codemods.python_files import (
    assigned_from_imports,
    caller_files,
    import_bindings_in,
    import_bindings_of,
    not_the_op,
    op_arity,
    starts_workers,
    workers_block,
)
from optrace.codemods.torch_adapter import hand_instrumented, torch_names
from optrace.engine.cache import by_content
from optrace.engine.diagnostics import InputError
from optrace.engine.discovery import is_sample_caller
from optrace.engine.edits import REVIEW_WIDTH, Edit, line_start, newline_of
from optrace.engine.plan import Plan
from optrace.engine.vocabulary import EDIT_MARK, HOIST_NAME

CODEMOD = "python-callers"
ENV_DIR = "OPTRACE_PROFILING_DIR"
ENV_MAP = "OPTRACE_POINT_MAP"
ENV_TRACE = "OPTRACE_CHROME_TRACE"
OS = "_optrace_os"
PATH = "_OptracePath"
OPTIONS = (("--profiling-dir", "profiling_dir", ENV_DIR,
            "optrace: save the op's profiling_data here (rank files)"),
           ("--point-map", "point_map", ENV_MAP, "optrace: the point_map.json the build hook wrote"),
           ("--chrome-trace", "chrome_trace", ENV_TRACE,
            "optrace: write the Chrome trace here (default: <profiling-dir>/trace.json)"))
_RANK_NAMES = ("rank", "global_rank", "global_rank_id", "rank_id", "local_rank", "local_rank_id",
               "ep_rank_id")


# --- source positions as bytes ------------------------------------------------------------------


_BOM = b"\xef\xbb\xbf"  # a UTF-8 byte-order mark: Python reads a file that starts with it

class _Source:
    """A Python file parsed by LibCST, with node spans as byte offsets."""

    def __init__(self, path: Path, data: bytes) -> None:
        self.path = path
        self.data = data
        lone_cr = re.search(rb"\r(?!\n)", data)
        if lone_cr is not None:
            # Python (and LibCST) end a line at a lone CR too; the edits and strip's markers
            # work line by line on LF: refused whole rather than edited half-way.
            raise input_error(CODE_PYTHON_SYNTAX, "a line ends in a lone CR (old Mac style): optrace "
                              "edits Python files with LF or CRLF line ends only", path,
                              line=data.count(b"\n", 0, lone_cr.start()) + 1)
        self.starts = [0] + [m.end() for m in re.finditer(rb"\n", data)]
        try:
            self.module = cst.parse_module(data)
        except cst.ParserSyntaxError as exc:
            raise python_syntax_error(path, data, exc) from None
        except (UnicodeDecodeError, LookupError, SyntaxError) as exc:  # not its declared encoding, or none
            line = data.count(b"\n", 0, exc.start) + 1 if isinstance(exc, UnicodeDecodeError) else 1
            raise input_error(CODE_PYTHON_SYNTAX, f"not Python source in its declared encoding: {exc}",
                              path, line=line) from None
        self.encoding = self.module.encoding
        # A file that starts with a UTF-8 byte-order mark reads as "utf-8-sig": LibCST's
        # columns of its first line count from after the mark, and text is measured in
        # UTF-8 (the -sig codec puts a mark before whatever it encodes: 3 bytes off).
        self._codec = "utf-8" if codecs.lookup(self.encoding).name == "utf-8-sig" else self.encoding
        self._bom = len(_BOM) if self._codec != self.encoding and data.startswith(_BOM) else 0
        self.wrapper = MetadataWrapper(self.module, unsafe_skip_copy=True)
        self.positions = self.wrapper.resolve(PositionProvider)
        self.parents = self.wrapper.resolve(ParentNodeProvider)
        self._collected: _Collector | None = None
        self._assigned: dict[cst.CSTNode, frozenset[str]] = {}

    def collected(self) -> _Collector:
        """The file's calls, syncs, spawns and argparse use (visited once)."""
        if self._collected is None:
            try:
                tree = ast.parse(self.data)
                aliases = import_bindings_of(tree)
                assigned = assigned_from_imports(tree, aliases)
            except (SyntaxError, ValueError):  # LibCST read it: its one-line imports then
                aliases, assigned = import_bindings_in(self.data), frozenset()
            found = _Collector(aliases, assigned)
            self.wrapper.visit(found)
            self._collected = found
        return self._collected

    def assigned_names(self, node: cst.CSTNode) -> frozenset[str]:
        """`_assigned_names(node)` of one of this file's nodes (visited once)."""
        names = self._assigned.get(node)
        if names is None:
            names = self._assigned[node] = frozenset(_assigned_names(node))
        return names

    def offset(self, line: int, column: int) -> int:
        start = self.starts[line - 1] + (self._bom if line == 1 else 0)
        end = self.starts[line] if line < len(self.starts) else len(self.data)
        text = self.data[start:end].decode(self._codec, errors="surrogateescape")
        return start + len(text[:column].encode(self._codec, errors="surrogateescape"))

    def span(self, node: cst.CSTNode) -> tuple[int, int]:
        r: CodeRange = self.positions[node]
        return self.offset(r.start.line, r.start.column), self.offset(r.end.line, r.end.column)

    def line_of(self, node: cst.CSTNode) -> int:
        return self.positions[node].start.line

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(node)

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)


def python_syntax_error(path: Path, data: bytes, exc: cst.ParserSyntaxError) -> InputError:
    """Located where Python itself puts it (LibCST reports the token after the mistake)."""
    try:
        compile(data, str(path), "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as err:
        return input_error(CODE_PYTHON_SYNTAX, f"Python syntax error: {err.msg}", path, line=err.lineno or 1)
    except ValueError:
        pass
    return input_error(CODE_PYTHON_SYNTAX, f"Python syntax error: {exc.message}", path, line=exc.raw_line)


def _line_after(data: bytes, offset: int) -> int:
    nl = data.find(b"\n", offset)
    return len(data) if nl < 0 else nl + 1


def _indent(data: bytes, offset: int) -> bytes:
    start = line_start(data, offset)
    m = re.match(rb"[ \t]*", data[start:])
    return m.group(0) if m else b""


PythonSource = _Source


@by_content(8, max_bytes=256 << 10)
def parse_python(path: Path, data: bytes) -> _Source:
    """`data` (the bytes of `path`) parsed, shared: a sample several operators call is
    parsed once per process while its bytes stay the same. The source is never changed
    after parsing (codemods only read it and return edits), so sharing it is safe; a file
    that does not parse raises every time (exceptions are not cached)."""
    return _Source(path, data)


# --- what the file looks like ------------------------------------------------------------------


def dotted(node: cst.BaseExpression) -> str:
    """`a.b.c` for a name or attribute chain, "" for anything else (a call, a subscript)."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        inner = dotted(node.value)
        return f"{inner}.{node.attr.value}" if inner else ""
    return ""


def callee_name(node: cst.BaseExpression) -> str:
    """The dotted name of a callee, a chain through a call given by its tail
    (`mp.get_context("spawn").Process` -> `.Process`), as `starts_workers` reads it."""
    name = dotted(node)
    if not name and isinstance(node, cst.Attribute):
        return "." + node.attr.value
    return name


class _Collector(cst.CSTVisitor):
    """What a caller file holds, whichever op is asked about: one visit per parsed file
    (`_Source.collected`), however many operators the file calls."""

    def __init__(self, aliases: dict[str, str], assigned: frozenset[str]) -> None:
        # Every `x.name(...)` call not inside a lambda / comprehension, with its name:
        # deferred calls (a benchmark's lambda) keep their result. Not a call of one of
        # PyTorch's own functions or Python's own methods (`not_the_op`: `aliases`, the
        # names the file's imports bind; `assigned`, those it binds to imported values).
        self.aliases = aliases
        self.assigned = assigned
        self.attr_calls: list[tuple[str, cst.Call]] = []
        self.syncs: list[str] = []
        self.spawns: list[cst.Call] = []
        self.joins: list[cst.Call] = []
        self.parsers: list[str] = []
        self.parse_calls: list[cst.Call] = []
        self.add_args: list[cst.Call] = []
        self.options: set[str] = set()
        self.names: set[str] = set()
        self.deferred = 0  # inside a lambda / comprehension: the call runs later or repeatedly

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self.deferred += 1

    def leave_Lambda(self, original_node: cst.Lambda) -> None:
        self.deferred -= 1

    def visit_GeneratorExp(self, node: cst.GeneratorExp) -> None:
        self.deferred += 1

    def leave_GeneratorExp(self, original_node: cst.GeneratorExp) -> None:
        self.deferred -= 1

    def visit_ListComp(self, node: cst.ListComp) -> None:
        self.deferred += 1

    def leave_ListComp(self, original_node: cst.ListComp) -> None:
        self.deferred -= 1

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)

    def visit_Call(self, node: cst.Call) -> None:
        func = dotted(node.func)
        if (isinstance(node.func, cst.Attribute) and not self.deferred and not not_the_op(
                dotted(node.func.value), node.func.attr.value, self.aliases, self.assigned)):
            self.attr_calls.append((node.func.attr.value, node))
        if func.endswith("npu.synchronize"):
            self.syncs.append(func)
        if starts_workers(callee_name(node.func)):
            self.spawns.append(node)
        if func.endswith(".join") and not func.startswith(("os.path", "str", "\"")):
            self.joins.append(node)
        if func.endswith("ArgumentParser"):
            self.parsers.append(func)
        if func.endswith(".parse_args") or func.endswith(".parse_known_args"):
            self.parse_calls.append(node)
        if func.endswith(".add_argument"):
            self.add_args.append(node)
            for arg in node.args:
                if isinstance(arg.value, cst.SimpleString) and arg.value.value.strip("'\"").startswith("--"):
                    self.options.add(arg.value.value.strip("'\""))

    def calls_of(self, op_names: Sequence[str]) -> list[cst.Call]:
        """The op's calls (any of its names), in file order."""
        wanted = set(op_names)
        return [call for name, call in self.attr_calls if name in wanted]


@dataclass
class _File:
    """One Python caller being edited: its source, what was found in it and the edits so far."""

    src: _Source
    found: _Collector
    edits: list[Edit] = field(default_factory=list)
    needs_os: bool = False
    needs_path: bool = False


def _statement(src: _Source, node: cst.CSTNode) -> tuple[cst.SimpleStatementLine | cst.BaseCompoundStatement,
                                                             cst.CSTNode]:
    """The statement line holding `node`, and the small statement inside it."""
    child = node
    parent = src.parent(node)
    while parent is not None and not isinstance(parent, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
        child = parent
        parent = src.parent(parent)
    if parent is None:
        raise input_error(CODE_LAYER_SHAPE, "the op call is not inside a statement", src.path,
                          line=src.line_of(node))
    if isinstance(parent, cst.SimpleStatementLine):
        owner = src.parent(parent)
        if isinstance(owner, cst.SimpleStatementSuite):
            raise input_error(CODE_LAYER_SHAPE, "put the op call on its own line (it shares a one-line "
                              "block)", src.path, line=src.line_of(node))
        if len(parent.body) != 1:
            raise input_error(CODE_LAYER_SHAPE, "put the op call in a statement of its own (not `a; b`)",
                              src.path, line=src.line_of(node))
    return parent, child


def _outer_statement(src: _Source, node: cst.CSTNode) -> cst.SimpleStatementLine | cst.BaseCompoundStatement:
    """The statement holding node that lines can be inserted before: its statement line, or
    the compound statement whose header holds it (`if mp.spawn(...):`, a one-line block
    `if rank: mp.spawn(...)`), and for an `elif` / `else` branch the whole `if`."""
    cur: cst.CSTNode | None = node
    while cur is not None and not isinstance(cur, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
        cur = src.parent(cur)
    if cur is None:
        raise input_error(CODE_LAYER_SHAPE, "the call is not inside a statement", src.path,
                          line=src.line_of(node))
    stmt: cst.SimpleStatementLine | cst.BaseCompoundStatement = cur
    while True:
        parent = src.parent(stmt)
        if isinstance(parent, cst.SimpleStatementSuite):  # `if x: mp.spawn(...)`: before the `if`
            up = src.parent(parent)
            while up is not None and not isinstance(up, cst.BaseCompoundStatement):
                up = src.parent(up)  # through an `else:` / `except:` to its statement
            if up is None:
                return stmt
            stmt = up
        elif isinstance(stmt, cst.If) and isinstance(parent, cst.If):
            stmt = parent  # an `elif`: before its `if`
        else:
            return stmt


def _top_statement(src: _Source, node: cst.CSTNode) -> cst.CSTNode:
    """The outermost statement of the enclosing function (or module) body holding node."""
    best: cst.CSTNode = node
    cur: cst.CSTNode | None = node
    while cur is not None:
        if isinstance(cur, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            parent = src.parent(cur)
            body_owner = src.parent(parent) if parent is not None else None
            best = cur
            if isinstance(body_owner, cst.FunctionDef) or isinstance(parent, cst.Module):
                return best
        cur = src.parent(cur)
    return best


def _enclosing_function(src: _Source, node: cst.CSTNode) -> cst.FunctionDef | None:
    cur = src.parent(node)
    while cur is not None and not isinstance(cur, cst.FunctionDef):
        cur = src.parent(cur)
    return cur


def _assigned_names(node: cst.CSTNode) -> set[str]:
    """Names bound by assignments inside `node`, and `self.x` attributes assigned there."""
    names: set[str] = set()

    class _Binder(cst.CSTVisitor):
        def visit_AssignTarget(self, target: cst.AssignTarget) -> None:
            for sub in _target_names(target.target):
                names.add(sub)

        def visit_AnnAssign(self, ann: cst.AnnAssign) -> None:
            for sub in _target_names(ann.target):
                names.add(sub)

    node.visit(_Binder())
    return names


def _target_names(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name):
        return [f"self.{target.attr.value}"] if target.value.value == "self" else []
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for el in target.elements for n in _target_names(el.value)]
    return []


def _rank_expr(f: _File, call: cst.Call) -> str:
    """The caller's rank: a parameter or local of the calling function, a `self.` attribute
    the module assigns, else the RANK environment variable torch.distributed sets."""
    fn = _enclosing_function(f.src, call)
    if fn is not None:
        p = fn.params
        params = [a.name.value for a in (*p.posonly_params, *p.params, *p.kwonly_params)]
        local = f.src.assigned_names(fn.body)
        for name in _RANK_NAMES:
            if name in params or name in local:
                return name
        if params and params[0] == "self":
            everywhere = f.src.assigned_names(f.src.module)
            for name in _RANK_NAMES:
                if f"self.{name}" in everywhere:
                    return f"self.{name}"
    f.needs_os = True
    return f'int({OS}.environ.get("RANK", "0"))'


def _sync_expr(f: _File) -> str:
    if f.found.syncs:
        return f.found.syncs[0] + "()"
    return "torch_npu.npu.synchronize()" if "torch_npu" in f.found.names else "torch.npu.synchronize()"


def _save_lines(f: _File, call: cst.Call, var: str, indent: bytes, unit: bytes) -> list[bytes]:
    f.needs_os = True
    rank = _rank_expr(f, call)
    # Rank files are tagged with the op (rank000_<op>.pt): a sample calling several
    # instrumented ops keeps their buffers apart.
    tag = ""
    if isinstance(call.func, cst.Attribute):
        tag = f', tag="{call.func.attr.value.replace("_", "-")}"'
    args = [var, rank, f'{OS}.environ["{ENV_DIR}"]', f'point_map={OS}.environ.get("{ENV_MAP}")']
    return [
        indent + f"if {OS}.environ.get(\"{ENV_DIR}\"):".encode(),
        indent + unit + _sync_expr(f).encode(),
        indent + unit + b"from optrace.runtime import save_profiling_data as _optrace_save",
        *packed(indent + unit + b"_optrace_save(", [*args, *([tag[2:]] if tag else [])], ")", unit),
    ]


#: A line optrace adds to a Python file ends within this column, its `  # optrace` mark
#: included: a reviewer reads the patch at 120 columns.
_PY_WIDTH = REVIEW_WIDTH - len(HASH_MARK)


def packed(head: bytes, items: list[str], close: str, unit: bytes) -> list[bytes]:
    """`head` (`    name(`) and its comma-separated `items`, then `close`, as lines of
    at most _PY_WIDTH columns: items packed in order, the next lines under the opening
    bracket (a hanging indent of two units past the line's own where that is past the
    middle). An item longer than the width alone stands on a line of its own."""
    lead = head[: len(head) - len(head.lstrip())]
    cont = b" " * len(head) if len(head) <= _PY_WIDTH // 2 else lead + unit + unit
    lines: list[bytes] = []
    line = head if len(head) <= _PY_WIDTH // 2 else None
    if line is None:
        lines.append(head)
    for k, item in enumerate(items):
        piece = (item + ("," if k < len(items) - 1 else close)).encode()
        if line is None:
            line = cont + piece
        elif line == head:
            line += piece
        elif len(line) + 1 + len(piece) > _PY_WIDTH:
            lines.append(line)
            line = cont + piece
        else:
            line += b" " + piece
    if line is not None:
        lines.append(line)
    return lines


def _collect_lines(f: _File, indent: bytes, unit: bytes) -> list[bytes]:
    f.needs_os = True
    env = f"{OS}.environ"
    return [
        indent + f"if {env}.get(\"{ENV_DIR}\") and {env}.get(\"{ENV_MAP}\"):".encode(),
        indent + unit + b"import subprocess as _optrace_subprocess",
        indent + unit + b"import sys as _optrace_sys",
        indent + unit + f"_optrace_dir = {env}[\"{ENV_DIR}\"]".encode(),
        indent + unit + f"_optrace_map = {env}[\"{ENV_MAP}\"]".encode(),
        indent + unit + f"_optrace_out = {env}.get(\"{ENV_TRACE}\")".encode(),
        indent + unit + f"_optrace_out = _optrace_out or {OS}.path.join(_optrace_dir, \"trace.json\")"
        .encode(),
        *packed(indent + unit + b"_optrace_subprocess.run([",
                ["_optrace_sys.executable", '"-m"', '"optrace"', '"collect"', "_optrace_dir", '"--point-map"',
                 "_optrace_map", '"-o"', "_optrace_out"], "], check=True)", unit),
    ]


def _resolve_env_lines(f: _File, indent: bytes, unit: bytes) -> list[bytes]:
    f.needs_os = f.needs_path = True
    names = ", ".join(f'"{env}"' for _, _, env, _ in OPTIONS)
    return [
        indent + f"for _optrace_env in ({names}):".encode(),
        indent + unit + f"if {OS}.environ.get(_optrace_env):".encode(),
        indent + unit + unit + f"_optrace_path = {PATH}({OS}.environ[_optrace_env])".encode(),
        indent + unit + unit + f"{OS}.environ[_optrace_env] = str(_optrace_path.expanduser().resolve())"
        .encode(),
    ]


def _resolve_args_lines(f: _File, args: str, indent: bytes, unit: bytes) -> list[bytes]:
    """Each path option absolute, and exported as OPTRACE_<OPTION> for the workers."""
    f.needs_os = f.needs_path = True
    dests = ", ".join(f'"{dest}"' for _, dest, _, _ in OPTIONS)
    value = f"getattr({args}, _optrace_opt)"
    return [
        indent + f"for _optrace_opt in ({dests}):".encode(),
        indent + unit + f"if getattr({args}, _optrace_opt, None):".encode(),
        indent + unit + unit + f"_optrace_path = {PATH}({value})".encode(),
        indent + unit + unit + f"setattr({args}, _optrace_opt, str(_optrace_path.expanduser().resolve()))"
        .encode(),
        indent + unit + unit + f"{OS}.environ[\"OPTRACE_\" + _optrace_opt.upper()] = {value}".encode(),
    ]


def _unit(data: bytes) -> bytes:
    m = re.search(rb"^(?:def|class|if|for|while|with)\b[^\n]*:\s*\n([ \t]+)\S", data, re.M)
    return m.group(1) if m else b"    "


# --- the codemod ---------------------------------------------------------------------------


def mode_b_sources(plan: Plan, mode: str, files: Sequence[Path]) -> tuple[list[_Source], list[str]] | None:
    """The shared start of the Python layers' codemods: every file is parsed first, in
    either mode (a syntax error is bad input, named before anything of any layer is
    written); then, in mode B and unless the kernel is instrumented by hand, the parsed
    files and the op's torch names. None: this layer changes nothing."""
    sources = [parse_python(path, clean_bytes(path)) for path in files]
    if mode != "B" or hand_instrumented(plan):
        return None
    return sources, torch_names(plan.analysis.layers)


def python_caller_edits(plan: Plan, mode: str) -> list[Edit]:
    layers = plan.analysis.layers
    found = mode_b_sources(plan, mode, caller_files(layers))
    if found is None:
        return []
    sources, names = found
    arity = op_arity(layers)
    globs = plan.analysis.config.sample_globs
    return [edit for src in sources
            for edit in _file_edits(src, names, arity, is_sample_caller(src.path, layers.repo_root, globs))]


def _file_edits(src: _Source, op_names: Sequence[str], arity: str, sample: bool = True) -> list[Edit]:
    """A sample / test gets the unpack, the sync and save, its options and the collector;
    library code (`sample` false) the unpack only: its callers see the op's old outputs,
    and a library never writes profiling files or parses options on its own."""
    found = src.collected()
    calls = found.calls_of(op_names)
    if not calls:
        return []
    f = _File(src, found)
    data = src.data
    unit = _unit(data)
    var = "profiling_data" if "profiling_data" not in found.names else "optrace_profiling_data"
    handled: set[int] = set()
    collect_after: list[cst.CSTNode] = []
    for call in calls:
        stmt, small = _statement(src, call)
        start = src.span(stmt)[0]
        if start in handled:
            continue
        handled.add(start)
        _call_site(f, call, stmt, small, var, arity, unit, save=sample)
        if not found.spawns and not found.joins:
            collect_after.append(_top_statement(src, stmt))
    if not sample:
        _imports(f)
        return f.edits
    _argparse(f, unit)
    starts: set[int] = set()
    done: list[cst.CSTNode] = []  # where workers are known to be finished
    running = False  # a Process / Pool started outside a `with`: its workers run until joined
    for spawn in found.spawns:
        stmt = _outer_statement(src, spawn)
        at = line_start(data, src.span(stmt)[0])
        if at in starts:
            continue
        starts.add(at)
        ind = _indent(data, at)
        f.edits.append(_lines(f, at, _resolve_env_lines(f, ind, unit),
                              "paths absolute before the workers start"))
        if workers_block(callee_name(spawn.func)) or isinstance(stmt, cst.With):
            done.append(stmt)
        else:
            running = True
    if found.joins and (running or not found.spawns):
        done.append(_top_statement(src, found.joins[-1]))
    elif running:
        done.extend(_outer_statement(src, s) for s in found.spawns)
    # One collector per function, after its last workers: every rank's file is there by then.
    last: dict[int, cst.CSTNode] = {}
    for node in done:
        key = id(_enclosing_function(src, node))
        if key not in last or src.span(node)[1] > src.span(last[key])[1]:
            last[key] = node
    collect_after.extend(last.values())
    if found.parsers:  # a script run by hand: build the trace when asked to
        seen: set[int] = set()
        for node in collect_after:
            end = _line_after(data, src.span(node)[1])
            if end in seen:
                continue
            seen.add(end)
            ind = _indent(data, src.span(node)[0])
            f.edits.append(_lines(f, end, _collect_lines(f, ind, unit), "collector"))
    _imports(f)
    return f.edits


def _lines(f: _File, at: int, lines: list[bytes], note: str) -> Edit:
    return Edit(f.src.path, at, at, marked_lines(f.src.data, at, lines, HASH_MARK), CODEMOD, note)


def _call_site(f: _File, call: cst.Call, stmt: cst.CSTNode, small: cst.CSTNode, var: str, arity: str,
               unit: bytes, save: bool = True) -> None:
    src, data = f.src, f.src.data
    s_start, s_end = src.span(stmt)
    first = line_start(data, s_start)
    after = _line_after(data, s_end)
    indent = _indent(data, s_start)
    nl = newline_of(data)
    saving = _save_lines(f, call, var, indent, unit) if save else []
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and small.value is call:
        target = small.targets[0].target
        if isinstance(target, (cst.Tuple, cst.List)) and target.elements:
            last_end = src.span(target.elements[-1].value)[1]
            end = _line_after(data, last_end)
            _rewrite(f, first, end, data[first:last_end] + f", {var}".encode() + data[last_end:end])
            if saving:
                f.edits.append(_lines(f, after, saving, "sync and save"))
            return
        if isinstance(target, cst.Name):
            name = target.value
            value = name if arity == "single" else f"{name}[:-1], {name}[-1]"
            split = f"{name}, {var} = {value}"
            f.edits.append(_lines(f, after, [indent + split.encode(), *saving],
                                  "unpack, sync and save" if saving else "unpack"))
            return
    # hoist the call; the statement uses the old outputs in its place (strip puts the
    # hoisted call back where the placeholder stands: its structural inverse)
    c_start, c_end = src.span(call)
    hoisted = indent + f"*{HOIST_NAME}, {var} = ".encode() + data[c_start:c_end]
    lines = [hoisted + nl] + [ln + HASH_MARK + nl for ln in saving]
    is_bare = isinstance(small, cst.Expr) and small.value is call
    if is_bare and data[first:c_start] == indent and data[c_end:after] in (nl, b""):
        pass  # the call was the whole line: the hoisted call is the statement again
    else:
        old = HOIST_NAME if is_bare else {"single": f"{HOIST_NAME}[0]", "list": HOIST_NAME}.get(
            arity, f"tuple({HOIST_NAME})")
        rest = data[first:c_start] + old.encode() + data[c_end:after]
        lines.append(rest)
    _rewrite(f, first, after, b"".join(lines))


def _rewrite(f: _File, start: int, end: int, new: bytes) -> None:
    f.edits.append(rewrite_edit(f.src.path, f.src.data, start, end, new, CODEMOD))


def rewrite_edit(path: Path, data: bytes, start: int, end: int, new: bytes, codemod: str,
                 note: str = "statement rewritten") -> Edit:
    """Replace whole lines data[start:end] by `new` under a `# optrace-edit N` line (N:
    lines of the rewrite). Nothing of the original is kept: what optrace adds inside a
    statement is one of a few shapes (a last element named profiling_data, a
    `new_empty((_OPTRACE_PROFILING_NUMEL,), ...)` value, a hoisted call) that strip takes
    out again (`codemods/strip.py`); apply checks that strip gives `data` back before it
    writes."""
    nl = newline_of(data)
    if not new.endswith(b"\n") and end < len(data):
        new += nl
    count = new.count(b"\n") + (0 if new.endswith(b"\n") else 1)
    marker = _indent(data, start) + EDIT_MARK + f" {count}".encode() + nl
    return Edit(path, start, end, marker + new, codemod, note)


def rewrite_insertions(path: Path, data: bytes, spans: list[tuple[int, int, list[tuple[int, bytes]]]],
                       codemod: str, note: str) -> list[Edit]:
    """Insertions inside statements as whole-line rewrites: each (start, end, [(offset,
    text)]) names a statement and what goes into it; statements sharing lines are
    rewritten together, so no two rewrites overlap."""
    groups: list[tuple[int, int, list[tuple[int, bytes]]]] = []
    for start, end, inserts in sorted(((line_start(data, s), _line_after(data, e), ins)
                                       for s, e, ins in spans), key=lambda g: g[0]):
        if groups and start < groups[-1][1]:
            first, last, prev = groups[-1]
            groups[-1] = (first, max(last, end), prev + inserts)
        else:
            groups.append((start, end, list(inserts)))
    edits = []
    for start, end, inserts in groups:
        out = bytearray()
        pos = start
        for at, text in sorted(inserts, key=lambda i: i[0]):
            out += data[pos:at] + text
            pos = at
        out += data[pos:end]
        edits.append(rewrite_edit(path, data, start, end, bytes(out), codemod, note))
    return edits


def _argparse(f: _File, unit: bytes) -> None:
    """The three options after the last add_argument; paths absolute right after parsing."""
    src, data, found = f.src, f.src.data, f.found
    if not found.parsers or not found.add_args:
        return
    last = found.add_args[-1]
    stmt, _ = _statement(src, last)
    receiver = dotted(last.func).rsplit(".", 1)[0]
    at = _line_after(data, src.span(stmt)[1])
    ind = _indent(data, src.span(stmt)[0])
    lines = []
    for flag, _dest, _env, text in OPTIONS:
        if flag not in found.options:
            line = ind + f'{receiver}.add_argument("{flag}", default=None, help="{text}")'.encode()
            if len(line + HASH_MARK) > REVIEW_WIDTH:  # the help on a line of its own
                head = ind + f'{receiver}.add_argument('.encode()
                line = head + f'"{flag}", default=None,'.encode()
                lines.append(line)
                line = b" " * len(head) + f'help="{text}")'.encode()
            lines.append(line)
    if lines:
        f.edits.append(_lines(f, at, lines, "profiling options"))
    for parse in found.parse_calls:
        stmt, small = _statement(src, parse)
        targets = _bound_names(src, stmt, small, parse)
        for site, name in targets:
            end = _line_after(data, src.span(site)[1])
            lines = _resolve_args_lines(f, name, _indent(data, src.span(site)[0]), unit)
            f.edits.append(_lines(f, end, lines, "paths absolute after parsing"))


def _bound_names(src: _Source, stmt: cst.CSTNode, small: cst.CSTNode,
                 parse: cst.Call) -> Sequence[tuple[cst.CSTNode, str]]:
    """Where the parsed namespace gets a name: `args = parser.parse_args()`, or, for
    `return parser.parse_args()` in `def f()`, every `args = f()`."""
    if isinstance(small, cst.Assign) and small.value is parse and len(small.targets) == 1 \
            and isinstance(small.targets[0].target, cst.Name):
        return [(stmt, small.targets[0].target.value)]
    if isinstance(small, cst.Return) and small.value is parse:
        fn = _enclosing_function(src, parse)
        if fn is None:
            return []
        fn_name = fn.name.value
        out: list[tuple[cst.CSTNode, str]] = []

        class _Finder(cst.CSTVisitor):
            def visit_Assign(self, node: cst.Assign) -> None:
                if isinstance(node.value, cst.Call) and dotted(node.value.func) == fn_name \
                        and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
                    line = src.parent(node)
                    if isinstance(line, cst.SimpleStatementLine):
                        out.append((line, node.targets[0].target.value))

        src.wrapper.visit(_Finder())
        return out
    return []


def _imports(f: _File) -> None:
    """`import os as _optrace_os` / `from pathlib import Path as _OptracePath` at the top."""
    if not (f.needs_os or f.needs_path):
        return
    at = import_point(f.src)
    lines = []
    if f.needs_os:
        lines.append(f"import os as {OS}".encode())
    if f.needs_path:
        lines.append(f"from pathlib import Path as {PATH}".encode())
    f.edits.append(_lines(f, at, lines, "imports"))


def import_point(src: _Source) -> int:
    """Where lines go after the module's leading imports (and docstring)."""
    data = src.data
    body = src.module.body
    at = 0
    for i, stmt in enumerate(body):
        if isinstance(stmt, cst.SimpleStatementLine) and all(
                isinstance(s, (cst.Import, cst.ImportFrom)) or (i == 0 and isinstance(s, cst.Expr)
                                                                and isinstance(s.value, cst.SimpleString))
                for s in stmt.body):
            at = _line_after(data, src.span(stmt)[1])
            continue
        if at == 0 and isinstance(stmt, cst.SimpleStatementLine):
            at = line_start(data, src.span(stmt)[0])
        break
    if at == 0 and body:
        at = line_start(data, src.span(body[0])[0])
    return at


_T = TypeVar("_T")


def read_each(model: LayerModel, find: Callable[[PythonSource, list[str]], list[_T]],
               ev: list[Evidence]) -> Iterator[tuple[Path, PythonSource, list[_T]]]:
    """Each file of the layer parsed, with what `find` reads in it for the op's torch
    names; a file LibCST or `find` refuses is ✗ evidence at its line instead."""
    names = torch_names(model.op.layers)
    for path, data in model.data.items():
        try:
            src = PythonSource(path, data)
            found = find(src, names)
        except InputError as exc:
            ev.append(Evidence(path, exc.diagnostic.line, exc.diagnostic.message, False))
            continue
        yield path, src, found
