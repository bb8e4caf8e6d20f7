"""Which Python files hold the op's Python layers (callers, fakes, converters), without
parsing them: what discovery found, plus files using one of the op's other torch names.

Apart from the codemods that parse these files with LibCST so that `check` can ask which
files there are without importing LibCST (pre-commit runs it on every commit).
The LibCST halves of the Python layers are the `*_cst.py` modules, which the CLI
imports at first use through the `PythonBackend` defined here.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType

from optrace.codemods.layer import Evidence, LayerModel, Operator
from optrace.codemods.layer_common import clean_bytes
from optrace.codemods.registration import registration_files, schema_strings
from optrace.codemods.torch_adapter import adapter_functions, torch_names
from optrace.codemods.torch_schema import returns_list
from optrace.engine.discovery import Layers, is_sample_caller, repo_index
from optrace.engine.edits import Edit
from optrace.engine.plan import Plan
from optrace.engine.source import read_regular


def python_layer_files(layers: Layers, key: str,
                       hint: Callable[[list[str]], re.Pattern[bytes]]) -> list[Path]:
    """The files discovery found for the Python layer `key`, plus Python files that use the
    op under one of its other torch names (`torch_names`) and match `hint(those names)`."""
    files = [f.path for f in layers.found.get(key, [])]
    extra = [n for n in torch_names(layers) if n != layers.op_name]
    if extra:
        pattern = hint(extra)
        for path in repo_index(layers.repo_root).mentioning(*[n.encode() for n in extra]):
            if path.suffix == ".py" and path not in files and pattern.search(read_regular(path)):
                files.append(path)
    return files


# What a file registering a fake / a torchair converter holds (the codemods read it with
# LibCST; finding the files needs only these).
FAKE_HINT_RE = re.compile(rb"\b(?:register_fake|impl_abstract)\s*\(|\bimpl\s*\([^)]*['\"]Meta['\"]")
CONVERTER_HINT_RE = re.compile(rb"\bregister_fx_node_ge_converter\s*\(")


def fake_files(layers: Layers) -> list[Path]:
    """Discovered fake files, plus Python files registering one under another torch name."""
    return python_layer_files(layers, "python_fakes", lambda _names: FAKE_HINT_RE)


def converter_files(layers: Layers) -> list[Path]:
    """Discovered converter files, plus files converting the op under another torch name."""
    return python_layer_files(layers, "graph_converters", lambda _names: CONVERTER_HINT_RE)


def caller_files(layers: Layers) -> list[Path]:
    """Discovered callers, plus Python files calling the op under another torch name."""
    return python_layer_files(layers, "python_callers", lambda names: re.compile(
        rb"\.\s*(?:" + b"|".join(re.escape(n.encode()) for n in names) + rb")\s*\("))


# The calls that start worker processes. Workers inherit the environment but may run
# from another directory, so apply makes the profiling paths absolute before each, and G5
# checks that it did: both ask `starts_workers`, so check accepts what apply writes.
# `name` is the callee's dotted name; a chain through a call
# (`mp.get_context("spawn").Process`) is given by its tail, `.Process`.
_SPAWNERS = ("spawn", "start_processes")
_WORKER_CLASSES = ("Process", "Pool", "ProcessPoolExecutor")

# PyTorch's own namespaces: `torch.nn.functional.gelu(x)` (or through a name the file
# binds to it: `import torch.nn.functional as F`, `from torch import nn`) is PyTorch's
# function, never a call of the operator named `gelu` (a reference implementation beside
# the operator's tests; unpacked as the op's call, the last row of a real tensor was taken
# for the profiling buffer). Judged by what the file imports, not by how a name is spelled:
# `F` bound to a project's own module calls the project's op.
_TORCH_NAMESPACES = frozenset({"torch", "torch.nn", "torch.nn.functional", "torch.special", "torch.linalg",
                               "torch.fft", "torch.Tensor"})
_RECEIVER_RE = re.compile(rb"[A-Za-z_][\w.]*$")
# The methods of Python's own types (`str`, `list`, `dict`, ...): `data_format.index("H")`
# is Python's `str.index`, not a call of the operator named `index` (ops-nn has one: apply
# unpacked a dozen golden scripts' `.index(` as the op's call). An op of such a name is
# called through a name the file imports (`torch.ops.lib.index(x)`, `lib_ops.index(x)`).
_BUILTIN_METHODS = frozenset(
    name for kind in (str, bytes, bytearray, list, tuple, dict, set, frozenset, int, float, complex)
    for name in dir(kind) if not name.startswith("_"))
# One-line imports (and `from m import (a, b)` over lines), for the search that reads bytes
# (the codemods read the parse tree: `import_bindings_of`).
_IMPORT_RE = re.compile(rb"^[ \t]*import[ \t]+([\w. \t,]+?)[ \t]*(?:[#;]|$)", re.M)
_FROM_IMPORT_RE = re.compile(
    rb"^[ \t]*from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+"
    rb"(?:\(([\w \t,\r\n]*)\)|([\w \t,]+?)[ \t]*(?:[#;]|$))", re.M)


def torch_own(receiver: str, aliases: Mapping[str, str]) -> bool:
    """Whether `receiver.name(...)` calls PyTorch's own function: `receiver` (the dotted
    name before the call's last dot) resolved through `aliases` (a name the file binds by
    an import -> the module or member it is) to one of PyTorch's namespaces."""
    head, _, rest = receiver.partition(".")
    module = aliases.get(head)
    if module is None:
        return False
    return (f"{module}.{rest}" if rest else module) in _TORCH_NAMESPACES


def not_the_op(receiver: str, name: str, aliases: Mapping[str, str],
               assigned: frozenset[str] = frozenset()) -> bool:
    """Whether `receiver.name(...)` is not a call of the operator `name`: PyTorch's own
    function, or a method of Python's own types (see `_BUILTIN_METHODS`) called on
    anything but a name the file imports from outside the standard library or binds to
    an imported value (``assigned``: `ops = torch.ops.lib`, `self.ops = ...`) — a
    variable, a call's result, a literal, `sys.argv`."""
    if torch_own(receiver, aliases):
        return True
    if name not in _BUILTIN_METHODS:
        return False
    parts = receiver.split(".") if receiver else []
    if any(".".join(parts[:i]) in assigned for i in range(len(parts), 0, -1)):
        return False
    module = aliases.get(parts[0]) if parts else None
    if module is None:
        return True
    return not module.startswith(".") and module.split(".", 1)[0] in sys.stdlib_module_names


def _dotted_of(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted_of(node.value)
        return f"{head}.{node.attr}" if head else ""
    return ""


def assigned_from_imports(tree: ast.AST, aliases: Mapping[str, str]) -> frozenset[str]:
    """The names (`ops`) and attributes (`self.ops`) a parsed file assigns an imported
    value to (`ops = torch.ops.index_lib`): a call through them may be the op's, whatever
    its name."""
    assigned: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            head = _dotted_of(node.value).split(".", 1)[0]
            if head and (head in aliases or head in assigned):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                assigned.update(name for t in targets if (name := _dotted_of(t)))
    return frozenset(assigned)


def _add_import(aliases: dict[str, str], module: str, bound: str | None) -> None:
    if bound is not None:
        aliases[bound] = module
    else:  # `import torch.nn.functional` binds `torch`
        aliases[module.split(".", 1)[0]] = module.split(".", 1)[0]


def _member(module: str, name: str) -> str:
    return f"{module}{name}" if module.endswith(".") else f"{module}.{name}"  # `from . import x`: `.x`


def import_bindings_of(tree: ast.AST) -> dict[str, str]:
    """The names a parsed file binds by its imports (anywhere in it: a function's own
    import included), each with the module or member it is (`from . import ops`: `.ops`)."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for item in node.names:
                _add_import(aliases, item.name, item.asname)
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            for item in node.names:
                if item.name != "*":
                    aliases[item.asname or item.name] = _member(module, item.name)
    return aliases


def import_bindings_in(data: bytes) -> dict[str, str]:
    """:func:`import_bindings_of` read from a file's bytes, by the shapes of imports a
    search reading thousands of files can afford (one line each, or a parenthesized
    `from` list)."""
    aliases: dict[str, str] = {}
    for m in _IMPORT_RE.finditer(data):
        for item in m[1].decode("ascii").split(","):
            words = item.split()
            if len(words) == 1 or (len(words) == 3 and words[1] == "as"):
                _add_import(aliases, words[0], words[2] if len(words) == 3 else None)
    for m in _FROM_IMPORT_RE.finditer(data):
        module = m[1].decode("ascii")
        for item in (m[2] if m[2] is not None else m[3]).decode("ascii").split(","):
            words = item.split()
            if len(words) == 1 or (len(words) == 3 and words[1] == "as"):
                aliases[words[-1]] = _member(module, words[0])
    return aliases


def calls_outside_torch(data: bytes, call_re: re.Pattern[bytes]) -> bool:
    """Whether a `.name(` match of `call_re` (which starts at the dot) is a call of the op
    (see :func:`not_the_op`): the files a caller search keeps. A name of Python's own
    methods is judged on the file's parse, as the codemods judge it (its receiver may span
    lines, its imports take any form); a file that does not parse is kept (the codemod
    names the error)."""
    aliases: dict[str, str] | None = None
    builtin: set[str] = set()
    for m in call_re.finditer(data):
        name = m.group().strip(b". \t\r\n(").decode("ascii", "replace")
        if name in _BUILTIN_METHODS:
            builtin.add(name)
            continue
        before = _RECEIVER_RE.search(data, max(0, m.start() - 200), m.start())
        if before is None:
            return True
        if aliases is None:
            aliases = import_bindings_in(data)
        if not torch_own(before.group().decode("ascii", "replace"), aliases):
            return True
    return bool(builtin) and _calls_by_parse(data, builtin)


def _calls_by_parse(data: bytes, names: set[str]) -> bool:
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return True
    aliases = import_bindings_of(tree)
    assigned = assigned_from_imports(tree, aliases)
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in names
               and not not_the_op(_dotted_of(node.func.value), node.func.attr, aliases, assigned)
               for node in ast.walk(tree))


def starts_workers(name: str) -> bool:
    """`torch.multiprocessing.spawn` / `mp.start_processes`, or a `Process` / `Pool` /
    `ProcessPoolExecutor` being made (of `multiprocessing`, its context, or imported bare)."""
    last = name.rsplit(".", 1)[-1]
    if last in _SPAWNERS:
        return "mp" in name or "multiprocessing" in name
    return last in _WORKER_CLASSES


def workers_block(name: str) -> bool:
    """Whether the call returns only once its workers are done (`spawn(..., join=True)`, the
    default): a Process or a Pool runs on until it is joined."""
    return name.rsplit(".", 1)[-1] in _SPAWNERS


def split_callers(files: Iterable[Path], repo_root: Path,
                  globs: Sequence[str] = ()) -> tuple[list[Path], list[Path]]:
    """Callers as (samples and tests, library code): only samples sync and save the buffer;
    library code unpacks it and nothing more (`engine.discovery.is_sample_caller`)."""
    samples: list[Path] = []
    library: list[Path] = []
    for path in files:
        (samples if is_sample_caller(path, repo_root, globs) else library).append(path)
    return samples, library


def op_arity(layers: Layers) -> str:
    """How the op returned before optrace: "single" tensor, "tuple" or "list"."""
    names = torch_names(layers)
    for reg in registration_files(layers):
        for s in schema_strings(reg, clean_bytes(reg), names):
            if returns_list(s.schema):
                return "list"
            return "tuple" if s.schema.parenthesised else "single"
    for path, fns in adapter_functions(layers).items():
        data = clean_bytes(path)
        for fn in fns:
            if fn.type_span is not None:
                text = data[fn.type_span[0] : fn.type_span[1]]
                if b"tuple" in text:
                    return "tuple"
                if re.fullmatch(rb"\s*(?:at::|torch::)?Tensor\s*", text):
                    return "single"
                return "list"
    return "tuple"


def parsed_by_ast(files: Iterable[Path]) -> list[tuple[Path, bytes, ast.Module]] | None:
    """The files' clean bytes parsed by the standard `ast` (no LibCST): what a layer's
    `carries` reads. None when one does not parse or ends a line in a lone CR, which
    the codemods refuse: then their own LibCST parse names the error."""
    trees: list[tuple[Path, bytes, ast.Module]] = []
    for path in files:
        data = clean_bytes(path)
        if re.search(rb"\r(?!\n)", data):
            return None
        try:
            trees.append((path, data, ast.parse(data, filename=str(path))))
        except (SyntaxError, ValueError, UnicodeDecodeError, LookupError):
            return None
    return trees


EditsFn = Callable[[Plan, str], list[Edit]]
EvidenceFn = Callable[[LayerModel], list[Evidence]]
# Imports a module by its dotted name: what the CLI hands the Python layers (see above).
ModuleLoader = Callable[[str], ModuleType]

_loader: list[ModuleLoader] = []  # the one installed, if any


def use_cst_loader(loader: ModuleLoader) -> None:
    """Install what imports the Python layers' LibCST halves (the CLI and the tests do)."""
    _loader[:] = [loader]


def cst_half(layer_module: str) -> ModuleType:
    """The LibCST half of the Python layer `layer_module`: the module `<layer_module>_cst`,
    imported at its first use by the loader the CLI installed."""
    if not _loader:
        raise RuntimeError("the Python layers' LibCST half is not installed: call "
                           "optrace.cli.deferred.install() first (the optrace command does)")
    return _loader[0](f"{layer_module}_cst")


def python_layer_absent(layers: Layers, key: str) -> bool:
    """No Python file of the layer can exist: discovery found none, and the op has no other
    torch name the codemods would search Python files by."""
    return not layers.found.get(key) and torch_names(layers) == [layers.op_name]




def expected_returns(op: Operator) -> int | None:
    """What the Python side must return: the schema's count, else the launcher's."""
    facts = op.facts
    return facts.schema_returns if facts.schema_returns is not None else facts.adapter_returns
