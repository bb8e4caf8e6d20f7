"""The package layering that import-linter does not see: imports placed inside functions.

Outside the CLI package (optrace/, where commands import what they need when they run,
for start-up time) an import inside a function is either an optional dependency or a
module the start-up of `optrace collect` leaves out on purpose — never a way around an
import cycle. The layers themselves are import-linter's contracts (pyproject.toml).
And the checkout is the package as installed: optrace/<name> links to each top-level
folder that setuptools installs as `optrace.<name>`.
"""

from __future__ import annotations

import ast
import tomllib
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "rules", "codemods", "runtime", "pipeline")

# (file, imported module) -> why it is imported where it is used.
ALLOWED = {
    ("runtime/__init__.py", "runtime.errors"): "lazy package attribute: `import optrace.runtime` stays cheap",
    ("runtime/__init__.py", "runtime.save"): "lazy package attribute: numpy only on first use",
    ("runtime/save.py", "torch_npu"): "optional; importing it without CANN breaks `import torch`",
    ("runtime/pt_reader.py", "torch"): "optional: the torch reader only",
    ("runtime/report.py", "importlib.util"): "looks for the optional matplotlib",
    ("runtime/report.py", "matplotlib"): "optional ([report] extra)",
    ("runtime/report.py", "matplotlib.pyplot"): "optional ([report] extra)",
    ("runtime/pt_reader.py", "zipfile"): "collect start-up: only for archives the fast reader declines",
    ("runtime/pt_reader.py", "pickletools"): "collect start-up: paid at the first rank file",
    ("runtime/chrome.py", "gzip"): "collect start-up: only for .gz output",
    ("runtime/perfetto.py", "gzip"): "collect start-up: only for .gz output",
    ("runtime/collect.py", "runtime.perfetto"): "collect start-up: the .pftrace writer (~5 ms)",
    ("runtime/collect.py", "runtime.merge"): "collect start-up: only for --merge",
    ("runtime/collect.py", "runtime.dataset"): "optional ([query] extra): only for --format parquet",
    ("runtime/dataset_layout.py", "duckdb"): "optional ([query] extra): writes and reads a dataset",
    ("runtime/formats.py", "runtime.query"): "collect start-up: a dataset's reader, to read one",
    ("runtime/formats.py", "runtime.spans"): "collect start-up: the trace readers only when an input is read",
    ("runtime/formats.py", "runtime.perfetto"): "collect start-up: only for .pftrace",
    ("runtime/chrome.py", "tempfile"): "collect start-up: only where O_TMPFILE is missing",
    ("runtime/format.py", "copy"): "collect start-up: only for rare metadata values",
    ("runtime/workers.py", "traceback"): "collect start-up: only for a worker's unpicklable error",
}


def _function_imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_bytes(), filename=str(path))
    out: list[tuple[int, str]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, ast.Import):
                out.extend((child.lineno, alias.name) for alias in child.names)
            elif in_function and isinstance(child, ast.ImportFrom):
                module = child.module or ""
                if child.level:  # relative: named from the top-level folder (runtime.save)
                    parts = path.parent.relative_to(ROOT).parts
                    module = ".".join((*parts[: len(parts) - child.level + 1], *([module] if module else [])))
                if child.module is None:  # `from . import perfetto`: the modules themselves
                    out.extend((child.lineno, f"{module}.{alias.name}") for alias in child.names)
                else:
                    out.append((child.lineno, module))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(tree, False)
    return out


@cache
def _all_function_imports() -> tuple[tuple[str, int, str], ...]:
    """(file, line, module) of every import inside a function, outside the CLI package."""
    return tuple((path.relative_to(ROOT).as_posix(), line, module)
                 for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
                 for line, module in _function_imports(path))


def test_no_imports_inside_functions_outside_the_cli() -> None:
    found = [f"{rel}:{line}: import of {module} inside a function"
             for rel, line, module in _all_function_imports() if (rel, module) not in ALLOWED]
    assert not found, "\n".join(found)


def test_every_allowed_exception_is_still_there() -> None:
    seen = {(rel, module) for rel, _, module in _all_function_imports()}
    assert set(ALLOWED) <= seen, sorted(set(ALLOWED) - seen)


def test_each_installed_folder_is_linked_into_the_package() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    for name, folder in setuptools["package-dir"].items():
        if name == "optrace":
            continue
        link = ROOT / Path(*name.split("."))
        assert link.is_symlink(), f"{link.relative_to(ROOT)} should link to ../{folder}"
        assert link.resolve() == (ROOT / folder).resolve(), f"{link} points to {link.resolve()}"
    # Every folder is installed; a package without a folder of its own (the CLI package,
    # optrace/cli) is a real folder inside the package root.
    own = [name for name in setuptools["packages"] if name not in setuptools["package-dir"]]
    assert sorted(set(setuptools["packages"]) - set(own)) == sorted(setuptools["package-dir"])
    for name in own:
        folder = ROOT / Path(*name.split("."))
        assert folder.is_dir() and not folder.is_symlink() and (folder / "__init__.py").is_file(), name


def _is_dataclass_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return (isinstance(target, ast.Name) and target.id == "dataclass") or (
        isinstance(target, ast.Attribute) and target.attr == "dataclass")


def test_every_dataclass_has_a_docstring() -> None:
    """A dataclass without a docstring gets one made from `inspect.signature` when its
    module is imported (Python 3.11): ~0.1 ms a class, paid by every `check` pre-commit
    runs. A docstring of our own costs nothing and says more."""
    missing = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
                if (isinstance(node, ast.ClassDef) and any(map(_is_dataclass_decorator, node.decorator_list))
                        and not ast.get_docstring(node)):
                    missing.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not missing, "\n".join(missing)


def _private_imports(path: Path) -> list[str]:
    """`from optrace.x import _name` and `module._name` of an optrace module imported by name."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: list[str] = []
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("optrace"):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    out.append(f"{node.lineno}: from {node.module} import {alias.name}")
                modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules.update(a.asname or a.name.split(".")[-1] for a in node.names
                           if a.name.startswith("optrace"))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            out.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return out


def test_no_module_uses_another_modules_private_names() -> None:
    """An underscore means module-local: what another module needs is exported under a
    public name (tests may reach in; the package may not)."""
    found = [f"{path.relative_to(ROOT).as_posix()}:{hit}"
             for package in (*PACKAGES, "optrace") for path in sorted((ROOT / package).rglob("*.py"))
             if not path.is_symlink() and path.parent.is_symlink() is False
             for hit in _private_imports(path)]
    assert not found, "\n".join(found)


def test_cli_functions_parse_call_and_print_in_a_screenful() -> None:
    """A command of optrace/cli parses, calls and prints: no function body (its signature
    of typer options aside) longer than 60 lines; longer work belongs below the CLI."""
    long = []
    for path in sorted((ROOT / "optrace" / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_bytes())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.end_lineno - node.body[0].lineno + 1 if node.end_lineno else 0
                if body > 60:
                    long.append(f"{path.name}:{node.lineno} {node.name} ({body} lines)")
    assert not long, long
