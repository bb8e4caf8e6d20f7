from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from optrace.codemods.layer import (
    EXAMPLE_TORCH,
    Carry,
    Evidence,
    FileLayer,
    LayerExample,
    LayerModel,
    Operator,
    carry_of,
)
from optrace.codemods.layer_common import CODE_LAYER_SHAPE, input_error
from optrace.codemods.python_files import (
    EditsFn,
    assigned_from_imports,
    caller_files,
    calls_outside_torch,
    cst_half,
    import_bindings_of,
    not_the_op,
    op_arity,
    parsed_by_ast,
    split_callers,
    starts_workers,
)
from optrace.codemods.torch_adapter import hand_instrumented, torch_names
from optrace.engine.discovery import LayerFile, Layers, SearchContext, is_sample_caller
from optrace.engine.edits import Edit, resolve
from optrace.engine.plan import Plan

# A test calling the op: it unpacks the buffer, syncs and saves it.
_EXAMPLE_TEST = """\
import torch
import torch_npu
import demo_lib  # noqa: F401


def test_demo_op():
    x = torch.randn(8, 256).npu()
    y = torch.ops.demo_lib.demo_op(x)
    assert y.shape == x.shape
"""


class PythonCallersLayer(FileLayer):
    NAME: ClassVar[str] = "python_callers"
    DESCRIPTION: ClassVar[str] = ("Python callers: samples / tests sync and save after each call, absolute "
                                  "paths; library code unpacks profiling_data")
    GATE: ClassVar[str] = "G4/G5"
    MODE_B_ONLY: ClassVar[bool] = True
    FOUND_KEY: ClassVar[str | None] = "python_callers"
    TITLE: ClassVar[str] = "Python samples / tests"
    EXAMPLES: ClassVar[tuple[LayerExample, ...]] = (LayerExample(
        path="tests/test_demo_op.py",
        files={**EXAMPLE_TORCH, "tests/test_demo_op.py": _EXAMPLE_TEST},
        changes=(
            ("import demo_lib  # noqa: F401\n",
             "import demo_lib  # noqa: F401\nimport os as _optrace_os  # optrace\n"),
            ("    y = torch.ops.demo_lib.demo_op(x)\n",
             "    y = torch.ops.demo_lib.demo_op(x)\n"
             "    y, profiling_data = y  # optrace\n"
             '    if _optrace_os.environ.get("OPTRACE_PROFILING_DIR"):  # optrace\n'
             "        torch_npu.npu.synchronize()  # optrace\n"
             "        from optrace.runtime import save_profiling_data as _optrace_save  # optrace\n"
             '        _optrace_save(profiling_data, int(_optrace_os.environ.get("RANK", "0")),  # optrace\n'
             '                      _optrace_os.environ["OPTRACE_PROFILING_DIR"],  # optrace\n'
             '                      point_map=_optrace_os.environ.get("OPTRACE_POINT_MAP"), tag="demo-op")'
             "  # optrace\n"),
        ),
    ),)

    def search(self, ctx: SearchContext) -> list[LayerFile]:
        """Python files outside the operator calling it (`.op(...)` under any of its
        torch names): samples / tests, or library code."""
        call_re = re.compile(rb"\.\s*" + ctx.any_name + rb"\s*\(")
        out: list[LayerFile] = []
        for path, data in ctx.python_candidates():
            if calls_outside_torch(data, call_re):
                sample = is_sample_caller(path, ctx.layers.repo_root, ctx.sample_globs)
                out.append(ctx.at(path, data, call_re.pattern, "calls the op" if sample
                                  else "library code calling the op: unpack only"))
        return out

    def find(self, layers: Layers) -> list[Path]:
        return caller_files(layers)

    def edits(self, plan: Plan, mode: str, model: LayerModel | None) -> list[Edit]:
        edits: EditsFn = cst_half(__name__).python_caller_edits
        return edits(plan, mode)

    def carries(self, plan: Plan, mode: str) -> Carry:
        """What the codemod would do, read with the standard `ast` (no LibCST, no
        metadata): the same refusals in the same order — a file that does not parse
        (then the codemod's own parse names the error), an op call sharing its line with
        another statement — and, in mode B, every file calling the op is edited (each call is unpacked)."""
        layers = plan.analysis.layers
        trees = parsed_by_ast(caller_files(layers))
        if trees is None:
            return carry_of(self.edits(plan, mode, None))  # the codemod's parse names the error
        if mode != "B" or hand_instrumented(plan) or not trees:
            return Carry()
        names = set(torch_names(layers))
        op_arity(layers)  # what the codemod reads of the schema first (and may refuse)
        globs = plan.analysis.config.sample_globs
        edited: set[Path] = set()
        for path, data, tree in trees:
            calls, spawns = _probe_calls(tree, names)
            if not calls:
                continue
            sample = is_sample_caller(path, layers.repo_root, globs)
            for node, stmt, body in [*calls, *(spawns if sample else [])]:
                _probe_statement(path, data, node, stmt, body, body is not tree.body)
            edited.add(resolve(path))
        return Carry(frozenset(edited))

    def verify(self, model: LayerModel) -> list[Evidence]:
        """G4 and G5 evidence of the samples and tests, G2 evidence of library code (its
        calls unpack profiling_data), each tagged with its gate. Samples in which nothing
        is read fail G4 naming the layer, even when library code gave G2 evidence."""
        names = set(torch_names(model.op.layers))
        samples, library = _split(model.op, [p for p in model.files if p in model.data])
        ev4: list[Evidence] = []
        ev5: list[Evidence] = []
        for path in samples:
            _python_file(path, model.data[path], names, ev4, ev5)
        if samples and not ev4 and not ev5:
            ev4.append(_not_read(samples, "a call of the op in a sample / test"))
        ev2: list[Evidence] = []
        for path in library:
            _g2_library_caller(path, model.data[path], names, ev2)
        return [*(_tag(e, "G4") for e in ev4), *(_tag(e, "G5") for e in ev5), *(_tag(e, "G2") for e in ev2)]


def _not_read(files: list[Path], what: str) -> Evidence:
    shown = ", ".join(p.name for p in files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    return Evidence(files[0], 1, f"python_callers not read: nothing in {shown} is what optrace reads as "
                    f"{what}", False)


def _tag(e: Evidence, gate: str) -> Evidence:
    return Evidence(e.path, e.line, e.note, e.ok, gate)


@dataclass
class _PythonFacts:
    """What G2 (library code) and G4 / G5 (samples) read of a Python caller: line spans of
    the op's calls, syncs, saves, worker starts, `expanduser().resolve()` calls and
    functions. Read with the standard `ast` module (no LibCST import for `check`)."""

    calls: list[tuple[int, int]] = field(default_factory=list)
    syncs: list[int] = field(default_factory=list)
    saves: list[tuple[int, int]] = field(default_factory=list)
    spawns: list[int] = field(default_factory=list)
    resolves: list[int] = field(default_factory=list)
    functions: list[tuple[int, int]] = field(default_factory=list)


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _calls_expanduser(node: ast.expr) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "expanduser" for n in ast.walk(node))


def _python_facts(path: Path, data: bytes, op_names: set[str], ev: list[Evidence]) -> _PythonFacts | None:
    """The facts of one file; a syntax error is ✗ evidence (then None)."""
    try:
        tree = ast.parse(data, filename=str(path))
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None) or 0
        ev.append(Evidence(path, line, f"Python syntax error: {getattr(exc, 'msg', exc)}", False))
        return None
    facts = _PythonFacts()
    aliases = import_bindings_of(tree)
    assigned = assigned_from_imports(tree, aliases)

    def visit(node: ast.AST, deferred: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            facts.functions.append((start, node.end_lineno or node.lineno))
        elif isinstance(node, ast.Call):
            line, end = node.lineno, node.end_lineno or node.lineno
            name = _dotted(node.func)
            if (isinstance(node.func, ast.Attribute) and node.func.attr in op_names
                    and not not_the_op(_dotted(node.func.value), node.func.attr, aliases, assigned)):
                if not deferred:  # a lambda's / comprehension's call runs later: not saved
                    facts.calls.append((line, end))
            elif name.endswith("synchronize"):
                facts.syncs.append(line)
            elif name.split(".")[-1] in ("save_profiling_data", "_optrace_save"):
                facts.saves.append((line, end))
            elif starts_workers(name):
                facts.spawns.append(line)
            elif name.endswith("resolve") and _calls_expanduser(node.func):
                facts.resolves.append(line)
        inner = deferred or isinstance(node, (ast.Lambda, ast.GeneratorExp, ast.ListComp))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, False)
    facts.calls.sort()
    return facts


def _g2_library_caller(path: Path, data: bytes, op_names: set[str], ev: list[Evidence]) -> None:
    """Library code calling the op (mode B): each call's statement, or the line after it,
    takes the extra output as `profiling_data`, so the library's own callers see the old
    outputs. Calls inside a lambda or comprehension are left as they are, as apply does."""
    facts = _python_facts(path, data, op_names, ev)
    if facts is None:
        return
    lines = data.split(b"\n")
    for start, end in facts.calls:
        # The unpack sits on the call's own lines (`a, b, profiling_data = op(...)`, a hoisted
        # `*_optrace_outputs, profiling_data = op(...)`) or right after (`out, profiling_data = ...`).
        text = b"\n".join(lines[start - 1 : end + 1])
        ok = re.search(rb"\b(?:optrace_)?profiling_data\b", text) is not None
        ev.append(Evidence(path, start, "library code: unpacks profiling_data (no sync / save: not a sample)"
                           if ok else "library code: the op's extra output profiling_data is not unpacked "
                           "here: this call returns one more value than its code expects", ok))


def _python_file(path: Path, data: bytes, op_names: set[str], ev4: list[Evidence],
                 ev5: list[Evidence]) -> None:
    facts = _python_facts(path, data, op_names, ev4)
    if facts is None:
        return
    last = data.count(b"\n") + 1

    def enclosing(line: int) -> tuple[int, int]:
        inner = [f for f in facts.functions if f[0] <= line <= f[1]]
        return max(inner, key=lambda f: f[0]) if inner else (1, last)

    for line, _end in facts.calls:
        scope = enclosing(line)
        save = next((s for s in facts.saves if line < s[0] <= scope[1]), None)
        if save is None:
            ev4.append(Evidence(path, line, "the op's profiling buffer is never saved after this call",
                                False))
            continue
        sync = next((s for s in facts.syncs if line < s <= save[0]), None)
        note = "device sync, then save_profiling_data" if sync else "no device sync before the save"
        ev4.append(Evidence(path, sync or line, note, sync is not None))
        ev4.append(Evidence(path, save[0], "saves the profiling buffer"))
    for line in facts.spawns:
        scope = enclosing(line)
        before = [r for r in facts.resolves if scope[0] <= r < line]
        if before:
            ev5.append(Evidence(path, before[-1], f"profiling paths made absolute before the workers start "
                                f"(line {line})"))
        else:
            ev5.append(Evidence(path, line, "workers start before the profiling paths are made absolute",
                                False))


def _split(op: Operator, files: list[Path]) -> tuple[list[Path], list[Path]]:
    return split_callers(files, op.layers.repo_root, op.analysis.config.sample_globs)


# What LibCST's collector counts as deferred: a call inside one of these keeps its result.
_DEFERRED = (ast.Lambda, ast.GeneratorExp, ast.ListComp)
_Site = tuple[ast.Call, ast.stmt, list[ast.stmt]]


def _probe_calls(tree: ast.Module, names: set[str]) -> tuple[list[_Site], list[_Site]]:
    """The op's calls (`x.name(...)`, not deferred) and the worker starts, in source
    order (as the codemod's visitor meets them), each with its innermost statement and
    the statement list holding it."""
    calls: list[_Site] = []
    spawns: list[_Site] = []
    aliases = import_bindings_of(tree)
    assigned = assigned_from_imports(tree, aliases)

    def visit(node: ast.AST, stmt: ast.stmt | None, body: list[ast.stmt], deferred: int) -> None:
        if isinstance(node, ast.Call) and stmt is not None:
            func = _dotted(node.func)
            if (isinstance(node.func, ast.Attribute) and not deferred and node.func.attr in names
                    and not not_the_op(_dotted(node.func.value), node.func.attr, aliases, assigned)):
                calls.append((node, stmt, body))
            if func.endswith(("spawn", "start_processes")) and ("mp" in func or "multiprocessing" in func):
                spawns.append((node, stmt, body))
        deferred += isinstance(node, _DEFERRED)
        for _field, value in ast.iter_fields(node):
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.stmt):
                        visit(item, item, value, deferred)
                    elif isinstance(item, ast.AST):
                        visit(item, stmt, body, deferred)
            elif isinstance(value, ast.AST):
                visit(value, stmt, body, deferred)

    visit(tree, None, tree.body, 0)
    return calls, spawns


def _probe_statement(path: Path, data: bytes, call: ast.Call, stmt: ast.stmt, body: list[ast.stmt],
                     block: bool) -> None:
    """The codemod's refusal of a call's statement: one sharing its line with another
    (`a; y = op()`). As in LibCST's tree, a statement of a one-line block (`if x: y =
    op()`) belongs to its compound statement, as does a call in a compound statement's
    header: those are fine. `block`: `body` is a compound statement's, not the module's."""
    if not _is_simple(stmt):
        return
    first = body[0]
    line_start = _offset(data, first.lineno, 0)
    if block and data[line_start : line_start + first.col_offset].strip():
        return  # the block follows its header on the line
    at = next(i for i, s in enumerate(body) if s is stmt)
    before = body[at - 1] if at > 0 else None
    after = body[at + 1] if at + 1 < len(body) else None
    if (before is not None and before.end_lineno == stmt.lineno) or (
            after is not None and after.lineno == stmt.end_lineno):
        raise input_error(CODE_LAYER_SHAPE, "put the op call in a statement of its own (not `a; b`)",
                          path, line=call.lineno)


def _is_simple(stmt: ast.stmt) -> bool:
    return not isinstance(stmt, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try,
                                 ast.TryStar, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Match))


def _offset(data: bytes, line: int, col: int) -> int:
    """The byte offset of (line counted from 1, UTF-8 byte column)."""
    at = 0
    for _ in range(line - 1):
        at = data.index(b"\n", at) + 1
    return at + col
